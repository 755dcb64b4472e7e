"""hardware: GPU peak lookup (order, no fallback), CPU GEMM calibration and its caches,
fingerprint (NVML faked at the pynvml boundary)."""

from __future__ import annotations

import itertools
import json
import subprocess
from datetime import datetime, timezone
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


def fake_load(monkeypatch: pytest.MonkeyPatch, others_busy_cores: float) -> None:
    """The kernel's CPU counters (the load boundary) as if other processes kept
    ``others_busy_cores`` cores busy: each reading is one second after the last."""
    ticks = itertools.count()

    def counters() -> tuple[float, float, float]:
        t = float(next(ticks))
        return t, t * (others_busy_cores + 1.0), t  # wall, machine busy CPU-s, own CPU-s

    monkeypatch.setattr(cpu_peak, "_cpu_counters", counters)
    monkeypatch.setattr(cpu_peak, "_cores", lambda: 2)


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty calibration cache, on a machine nobody else is using."""
    monkeypatch.setenv("GREENBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cpu_peak, "_GEMM_CACHE", {})
    monkeypatch.setattr(cpu_peak, "_GEMM_RECORDS", {})
    fake_load(monkeypatch, 0.0)
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


def measuring(monkeypatch: pytest.MonkeyPatch, *figures: float) -> list[float]:
    """Fake calibrations that measure ``figures`` in turn; returns the list of those taken."""
    taken: list[float] = []

    def fake_measure(dtype: torch.dtype, budget_s: float) -> float:
        taken.append(figures[len(taken)])
        return taken[-1]

    monkeypatch.setattr(cpu_peak, "_measure_gemm_flops", fake_measure)
    return taken


def disk_entry(path: Path) -> dict:
    (entry,) = json.loads(path.read_text()).values()
    return entry


def test_a_calibration_under_load_is_stamped_and_measured_again(
    fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Others hold 1.5 of 2 cores while it runs: the figure (161 GFLOP/s where 224 is the
    truth) is used for now but not trusted, so the next process measures again, keeps the best,
    and trusts it once a quiet measurement stands behind it."""
    fake_load(monkeypatch, 1.5)
    taken = measuring(monkeypatch, 161e9, 224e9, 200e9)
    assert cpu_peak.cpu_gemm_peak_flops(2) == 161e9
    entry = disk_entry(fresh_cache)
    assert entry["flops"] == 161e9 and entry["trusted"] is False
    assert entry["load"]["busy"] is True and entry["load"]["others_busy_cores"] == 1.5
    assert entry["load"]["cores"] == 2 and "loadavg_1m_before" in entry["load"]
    when = datetime.fromisoformat(entry["measured_at"])
    assert when.tzinfo is not None and abs(datetime.now(timezone.utc) - when).total_seconds() < 600
    assert "under load" in cpu_peak.describe(cpu_peak.calibration_record(2))

    monkeypatch.setattr(cpu_peak, "_GEMM_CACHE", {})  # the next process, on a quiet machine
    fake_load(monkeypatch, 0.05)
    assert cpu_peak.cpu_gemm_peak_flops(2) == 224e9
    entry = disk_entry(fresh_cache)
    assert entry["trusted"] is True and entry["measurements"] == 2
    assert entry["load"]["busy"] is False
    assert "quiet" in cpu_peak.describe(cpu_peak.calibration_record(2))

    monkeypatch.setattr(cpu_peak, "_GEMM_CACHE", {})  # trusted now: taken from the disk
    assert cpu_peak.cpu_gemm_peak_flops(2) == 224e9 and taken == [161e9, 224e9]


def test_busy_means_other_processes_on_the_cores(
    fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Load is what *others* used while the calibration ran: its own threads (the load average
    counts them) are not load; more than a tenth of the cores used by others is."""
    measuring(monkeypatch, 1e9, 1e9, 1e9)
    for others, busy in ((0.0, False), (0.19, False), (0.3, True)):
        monkeypatch.setattr(cpu_peak, "_GEMM_CACHE", {})
        fake_load(monkeypatch, others)
        cpu_peak.cpu_gemm_peak_flops(1, use_disk_cache=False)
        assert cpu_peak.calibration_record(1)["load"]["busy"] is busy, others
    assert cpu_peak._load_while((0.0, 0.0, 0.0), (0.05, 0.1, 0.0), (None, None))["busy"] is None
    assert cpu_peak._load_while(None, None, (None, None))["busy"] is None  # no counters


def test_an_old_entry_without_its_load_is_measured_again(
    fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache as older versions wrote it: a bare number, for good. Nothing says when or
    under what load it was taken, so it is measured again, and the better figure kept."""
    key = cpu_peak.disk_key(2, "float32")
    fresh_cache.parent.mkdir(parents=True)
    fresh_cache.write_text(json.dumps({key: 161e9}))
    measuring(monkeypatch, 224e9)
    assert cpu_peak.cpu_gemm_peak_flops(2) == 224e9
    assert disk_entry(fresh_cache)["trusted"] is True


def test_a_calibration_is_reused_per_machine_fingerprint_and_a_new_one_measures_again(
    fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trusted figure is taken from the disk by every later process of this machine
    (a hit: nothing measured); a machine whose fingerprint changed (a new kernel, more memory,
    another CPU under the same image) finds no entry and measures (a miss), beside the old."""
    taken = measuring(monkeypatch, 224e9, 180e9)
    monkeypatch.setattr(cpu_peak, "machine_key", lambda: "machine-a")
    assert cpu_peak.cpu_gemm_peak_flops(2) == 224e9
    spent = cpu_peak.seconds_spent()
    monkeypatch.setattr(cpu_peak, "_GEMM_CACHE", {})  # the next process, same machine: a hit
    assert cpu_peak.cpu_gemm_peak_flops(2) == 224e9 and taken == [224e9]
    assert cpu_peak.seconds_spent() == spent  # a hit costs no calibration
    monkeypatch.setattr(cpu_peak, "_GEMM_CACHE", {})  # the fingerprint changed: a miss
    monkeypatch.setattr(cpu_peak, "machine_key", lambda: "machine-b")
    assert cpu_peak.cpu_gemm_peak_flops(2) == 180e9 and taken == [224e9, 180e9]
    assert cpu_peak.seconds_spent() > spent
    keys = sorted(json.loads(fresh_cache.read_text()))
    assert [k.split("|")[0] for k in keys] == ["machine-a", "machine-b"]


def test_the_machine_key_follows_the_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a per-machine cache entry depends on changes its key; the host's name does not."""
    import socket

    key = machine.machine_key()
    assert key == machine.machine_key() and len(key) == 16
    monkeypatch.setattr(socket, "gethostname", lambda: "another-ci-runner")
    assert machine.machine_key() == key
    monkeypatch.setattr(machine, "memory_bytes", lambda: 1)
    assert machine.machine_key() != key
    monkeypatch.undo()
    monkeypatch.setattr(machine.platform, "platform", lambda: "Linux-9.9-other-kernel")
    assert machine.machine_key() != key


def test_recalibrating_measures_again_and_never_drops(
    fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = measuring(monkeypatch, 200e9, 224e9, 150e9)
    assert cpu_peak.cpu_gemm_peak_flops(2) == 200e9  # quiet, trusted
    assert cpu_peak.cpu_gemm_peak_flops(2, recalibrate=True) == 224e9  # the caches are ignored
    assert cpu_peak.cpu_gemm_peak_flops(2, recalibrate=True) == 224e9  # a worse one is not kept
    assert taken == [200e9, 224e9, 150e9]
    monkeypatch.setattr(cpu_peak, "_GEMM_CACHE", {})
    assert cpu_peak.cpu_gemm_peak_flops(2) == 224e9  # the disk has the best
    assert disk_entry(fresh_cache)["measurements"] == 3


def test_a_calibration_is_the_best_of_several_trials_per_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loops: list[tuple[int, float]] = []
    rates = iter([5e9, 9e9, 7e9, 8e9, 6e9, 4e9])  # a burst of load spoils some trials

    def fake_rate(a: torch.Tensor, b: torch.Tensor, seconds: float) -> float:
        loops.append((a.shape[0], seconds))
        return next(rates)

    monkeypatch.setattr(cpu_peak, "_GEMM_SIZES", (64, 128))
    monkeypatch.setattr(cpu_peak, "_mm_rate", fake_rate)
    assert cpu_peak.TRIALS == 3
    assert cpu_peak._measure_gemm_flops(torch.float32, 60.0) == 9e9
    # each size timed TRIALS times, the rounds spread over the budget
    assert loops == [(64, 10.0), (128, 10.0)] * 3


def test_fingerprint_outside_a_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GITHUB_REF_NAME", "main")  # a CI's branch names no checkout's
    fp = fingerprint_mod.fingerprint()
    assert set(fp) == {"host", "git_sha", "git_branch", "hardware", "versions"}
    assert fp["git_sha"] is None and fp["git_branch"] is None
    assert fp["versions"]["git_dirty"] is None
    assert fp["versions"]["torch"] == torch.__version__
    assert fp["hardware"]["logical_cores"] >= 1 and fp["hardware"]["cpu_model"]
    json.dumps(fp)  # stored as JSON


def test_fingerprint_git_sha(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q", "-b", "trunk"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True)
    monkeypatch.chdir(tmp_path)
    fp = fingerprint_mod.fingerprint()
    assert fp["git_sha"] == sha.stdout.strip() and fp["git_branch"] == "trunk"
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


class _FakeNvml:
    """pynvml's calls a GPU listing makes: three physical GPUs."""

    class _Memory:
        total = 80 * 2**30

    def __init__(self) -> None:
        self.gpus = {0: ("GPU-a", "NVIDIA H100"), 1: ("GPU-b", "NVIDIA A100"), 2: ("GPU-c", "L4")}
        self.open = 0

    def nvmlInit(self) -> None:
        self.open += 1

    def nvmlShutdown(self) -> None:
        self.open -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        return next(i for i, (u, _) in self.gpus.items() if u == uuid)

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self.gpus[h][1].encode()

    def nvmlDeviceGetMemoryInfo(self, h: int) -> _Memory:
        return self._Memory()

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54"


def test_visible_gpus_are_numbered_as_cuda_numbers_them_without_torch() -> None:
    from greenbench.hardware.nvidia import driver_version, visible_gpus

    nv = _FakeNvml()
    every = visible_gpus(None, nv)
    assert [(g.index, g.name) for g in every] == [(0, "NVIDIA H100"), (1, "NVIDIA A100"), (2, "L4")]
    assert every[0].memory_bytes == 80 * 2**30
    assert [g.name for g in visible_gpus("2,0", nv)] == ["L4", "NVIDIA H100"]
    assert [(g.index, g.name) for g in visible_gpus("GPU-b", nv)] == [(0, "NVIDIA A100")]
    assert visible_gpus("", nv) == [] and visible_gpus("1,7,0", nv)[-1].name == "NVIDIA A100"
    assert visible_gpus("MIG-x", nv) == []
    assert nv.open == 0  # every init shut down
    assert driver_version(nv) == "550.54"


def test_the_fingerprint_reads_torchs_versions_without_importing_it() -> None:
    """In a fresh interpreter: the fingerprint names torch's version and CUDA as torch would,
    and torch is still not imported."""
    import subprocess
    import sys

    code = (
        "import json, sys; from greenbench.hardware.fingerprint import fingerprint; "
        "v = fingerprint()['versions']; print(json.dumps([v['torch'], v['cuda'], "
        "'torch' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    version, cuda, loaded = json.loads(out.stdout)
    assert (version, cuda, loaded) == (torch.__version__, torch.version.cuda, False)
