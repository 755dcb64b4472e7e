"""GPU peak FLOP/s from datasheets, for MFU. No torch.

GPU peaks are dense datasheet figures (the sparse figure printed on datasheets is twice the
dense one), from the NVIDIA A100, H100, H200, Blackwell (B200, GB200), L4 and L40S datasheets,
the NVIDIA Ada Lovelace architecture whitepaper (RTX 4090) and the AMD Instinct MI300X data
sheet, as collected in the project's ``reference/gpus.md``. torchtitan's ``get_peak_flops``
uses the same BF16 values but falls back to the A100 figure for an unknown device; here an
unknown device has no datasheet peak (None), so its MFU is left unknown rather than invented.
"""

from __future__ import annotations

import re

# (regex on the device name, label, dense TFLOP/s per dtype). First match wins, so a more
# specific name comes before any name it contains: H200 before H20, GB200 before B200,
# NVL and PCIe before plain H100 (whose default is the SXM part), L40S before L4.
_GPU_PEAKS_TFLOPS: tuple[tuple[str, str, dict[str, float]], ...] = (
    (r"GB200", "GB200", {"bf16": 2500, "tf32": 1250, "fp32": 80}),
    (r"B200", "B200", {"bf16": 2250, "tf32": 1100, "fp32": 75}),
    (r"H200.*NVL", "H200 NVL", {"bf16": 835, "tf32": 417.5, "fp32": 60}),
    (r"H200", "H200 SXM", {"bf16": 989, "tf32": 495, "fp32": 67}),
    (r"H100.*NVL", "H100 NVL", {"bf16": 835, "tf32": 417.5, "fp32": 60}),
    (r"H100.*PCIE", "H100 PCIe", {"bf16": 756, "tf32": 378, "fp32": 51}),
    (r"H100", "H100 SXM", {"bf16": 989, "tf32": 495, "fp32": 67}),
    (r"A100", "A100", {"bf16": 312, "tf32": 156, "fp32": 19.5}),
    (r"L40S", "L40S", {"bf16": 362, "tf32": 183, "fp32": 91.6}),
    (r"\bL4\b", "L4", {"bf16": 121, "tf32": 60, "fp32": 30.3}),
    (r"RTX 4090(?!\s*D)", "RTX 4090", {"bf16": 165.2, "tf32": 82.6, "fp32": 82.6}),
    (r"MI300X", "MI300X", {"bf16": 1307, "tf32": 654, "fp32": 163.4}),
)

_DTYPE_NAMES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "tf32": "tf32",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
}


def _dtype_key(dtype: object) -> str:
    name = str(dtype).removeprefix("torch.").lower()
    if name not in _DTYPE_NAMES:
        raise ValueError(f"no peak table for dtype {dtype!r}; known: bf16, tf32, fp32")
    return _DTYPE_NAMES[name]


def gpu_peak_flops(device_name: str, dtype: object) -> tuple[float, str] | None:
    """(dense peak FLOP/s, ``'datasheet:<GPU> <dtype>'``) for a GPU name, or None if unknown.

    ``device_name`` is what ``torch.cuda.get_device_name`` or NVML report, e.g.
    ``'NVIDIA H100 80GB HBM3'``; ``dtype`` is ``bf16``/``tf32``/``fp32`` or a torch dtype.
    """
    key = _dtype_key(dtype)
    for pattern, label, peaks in _GPU_PEAKS_TFLOPS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return peaks[key] * 1e12, f"datasheet:{label} {key}"
    return None
