"""The GPU table's device facts for the planner: every labelled GPU has them, lookups by short
name and by reported name agree, and the figures are the datasheets' (per direction for links)."""

from __future__ import annotations

import pytest

from greenbench.hardware import gpus


def test_every_gpu_with_a_peak_has_facts_and_a_short_name() -> None:
    labels = {label for _, label, _ in gpus._GPU_PEAKS_TFLOPS}
    assert labels == set(gpus._GPU_FACTS)
    assert set(gpus.DEVICE_TYPES.values()) == labels


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("h100", "H100 SXM"),
        ("H100", "H100 SXM"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("h200", "H200 SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("b200", "B200"),
        ("NVIDIA GB200", "GB200"),
        ("NVIDIA H20", None),
        ("tpu-v5", None),
    ],
)
def test_labels(name: str, label: str | None) -> None:
    assert gpus.gpu_label(name) == label
    facts = gpus.gpu_facts(name)
    assert (facts.label if facts else None) == label


def test_datasheet_figures() -> None:
    h100, h200, a100, b200 = (gpus.gpu_facts(n) for n in ("h100", "h200", "a100", "b200"))
    assert (h100.memory_bytes, h100.hbm_bytes_per_s) == (80e9, 3.35e12)
    assert h100.fast_link_bytes_per_s == 450e9  # NVLink 900 GB/s bidirectional
    assert (h200.memory_bytes, h200.hbm_bytes_per_s) == (141e9, 4.8e12)
    assert (a100.memory_bytes, a100.fast_link_bytes_per_s) == (80e9, 300e9)
    assert (b200.memory_bytes, b200.fast_link_bytes_per_s, b200.board_power_w) == (
        180e9,
        900e9,
        1000,
    )
    assert gpus.gpu_facts("gb200").fast_domain == 72


def test_measured_and_assumed_power_say_so() -> None:
    h100, a100 = gpus.gpu_facts("h100"), gpus.gpu_facts("a100")
    assert (h100.idle_power_w, h100.min_power_limit_w) == (75, 200)
    assert h100.source("idle_power_w").startswith("measured")
    assert a100.idle_power_w == round(400 * 75 / 700)
    assert a100.source("idle_power_w").startswith("assumed")
    assert a100.source("memory_bytes") == "datasheet (A100)"


def test_peak_of_a_label() -> None:
    assert gpus.gpu_peak_flops_of_label("H100 SXM", "bf16") == 989e12
    assert gpus.gpu_peak_flops_of_label("MI300X", "fp32") == 163.4e12
    with pytest.raises(KeyError):
        gpus.gpu_peak_flops_of_label("TPU", "bf16")
