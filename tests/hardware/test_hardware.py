"""hardware: GPU peak lookup (order, no fallback), CPU GEMM calibration and its caches,
fingerprint (NVML faked at the pynvml boundary)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from greenbench.hardware import cpu_peak, gpus, machine
from greenbench.hardware import fingerprint as fingerprint_mod


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA H20", None),  # not an H200, and not in the table
        ("NVIDIA GB200", "GB200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L40", None),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 4090 D", None),
        ("AMD Instinct MI300X", "MI300X"),
        ("Tesla V100-SXM2-16GB", None),  # unknown: no A100 fallback
        ("", None),
    ],
)
def test_gpu_lookup_order(name: str, label: str | None) -> None:
    found = gpus.gpu_peak_flops(name, "bf16")
    assert (found[1] if found else None) == (f"datasheet:{label} bf16" if label else None)


def test_gpu_peak_values_and_dtypes() -> None:
    assert gpus.gpu_peak_flops("NVIDIA H100 80GB HBM3", "bf16") == (
        989e12,
        "datasheet:H100 SXM bf16",
    )
    assert gpus.gpu_peak_flops("NVIDIA H100 PCIe", torch.bfloat16)[0] == 756e12
    assert gpus.gpu_peak_flops("NVIDIA A100-SXM4-40GB", torch.float32) == (
        19.5e12,
        "datasheet:A100 fp32",
    )
    assert gpus.gpu_peak_flops("NVIDIA B200", "tf32")[0] == 1100e12
    with pytest.raises(ValueError, match="fp8"):
        gpus.gpu_peak_flops("NVIDIA H100", "fp8")


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GREENBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cpu_peak, "_GEMM_CACHE", {})
    return tmp_path / "cache" / "gemm.json"


def test_cpu_calibration_measures_and_caches(
    fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads_before = torch.get_num_threads()
    flops = cpu_peak.cpu_gemm_peak_flops(1, torch.float32, budget_s=0.2)
    assert flops > 0
    assert torch.get_num_threads() == threads_before  # restored after calibrating

    def no_measuring(*_args: object) -> float:
        raise AssertionError("should have come from a cache")

    monkeypatch.setattr(cpu_peak, "_measure_gemm_flops", no_measuring)
    assert cpu_peak.cpu_gemm_peak_flops(1, torch.float32) == flops  # in-process cache
    monkeypatch.setattr(cpu_peak, "_GEMM_CACHE", {})
    assert cpu_peak.cpu_gemm_peak_flops(1, torch.float32) == flops  # disk cache
    (key,) = json.loads(fresh_cache.read_text())
    assert machine.cpu_model() in key and "threads=1" in key and torch.__version__ in key


def test_cpu_calibration_cache_keys_and_bad_cache(
    fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[torch.dtype] = []

    def fake_measure(dtype: torch.dtype, budget_s: float) -> float:
        calls.append(dtype)
        return 1e9 * len(calls)

    monkeypatch.setattr(cpu_peak, "_measure_gemm_flops", fake_measure)
    fresh_cache.parent.mkdir(parents=True)
    fresh_cache.write_text("{not json")  # a corrupt cache is ignored, then rewritten
    assert cpu_peak.cpu_gemm_peak_flops(1, torch.float32) == 1e9
    assert cpu_peak.cpu_gemm_peak_flops(1, torch.bfloat16) == 2e9  # dtype is part of the key
    assert cpu_peak.cpu_gemm_peak_flops(2, torch.float32) == 3e9  # so are threads
    assert len(json.loads(fresh_cache.read_text())) == 3
    monkeypatch.setattr(cpu_peak, "_GEMM_CACHE", {})
    assert cpu_peak.cpu_gemm_peak_flops(1, torch.float32, use_disk_cache=False) == 4e9


def test_fingerprint_outside_a_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    fp = fingerprint_mod.fingerprint()
    assert set(fp) == {"host", "git_sha", "hardware", "versions"}
    assert fp["git_sha"] is None and fp["versions"]["git_dirty"] is None
    assert fp["versions"]["torch"] == torch.__version__
    assert fp["hardware"]["logical_cores"] >= 1 and fp["hardware"]["cpu_model"]
    json.dumps(fp)  # stored as JSON


def test_fingerprint_git_sha(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True)
    monkeypatch.chdir(tmp_path)
    fp = fingerprint_mod.fingerprint()
    assert fp["git_sha"] == sha.stdout.strip()
    assert fp["versions"]["git_dirty"] is False


def test_fingerprint_reports_nvml_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    pynvml = pytest.importorskip("pynvml")
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlSystemGetDriverVersion", lambda: "550.54.15")
    assert fingerprint_mod.fingerprint()["hardware"]["gpu_driver"] == "550.54.15"


def test_fingerprint_without_nvml_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    pynvml = pytest.importorskip("pynvml")

    def no_driver() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    assert fingerprint_mod.fingerprint()["hardware"]["gpu_driver"] is None
