"""GPU peak FLOP/s from datasheets, for MFU. No torch.

GPU peaks are dense datasheet figures (the sparse figure printed on datasheets is twice the
dense one), from the NVIDIA A100, H100, H200, Blackwell (B200, GB200), L4 and L40S datasheets,
the NVIDIA Ada Lovelace architecture whitepaper (RTX 4090) and the AMD Instinct MI300X data
sheet, as collected in the project's ``reference/gpus.md``. torchtitan's ``get_peak_flops``
uses the same BF16 values but falls back to the A100 figure for an unknown device; here an
unknown device has no datasheet peak (None), so its MFU is left unknown rather than invented.

The planner (`greenbench.planner`) needs more than peaks: memory per device, HBM bandwidth, the
NVLink (or PCIe) bandwidth inside a device's fast domain and the network bandwidth beyond it,
board power, idle power and the lowest power limit. `GpuFacts` holds them, one row per label of
the peak table, each figure with its source:

* memory, HBM bandwidth, NVLink bandwidth and board power: the same datasheets (NVIDIA A100
  80GB SXM, H100 SXM/PCIe/NVL, H200 SXM/NVL, HGX/DGX B200 (1,440 GB and 64 TB/s over 8 GPUs),
  GB200 NVL72 (13.4 TB and 576 TB/s over 72 GPUs), L4, L40S, GeForce RTX 4090, AMD Instinct
  MI300X (seven Infinity Fabric links of 128 GB/s)). Datasheets print NVLink as the
  bidirectional total; the per-direction figure a ring collective sees is half of it.
* the fast domain: 8 GPUs on an HGX/DGX board, 72 on a GB200 NVL72 rack, 2 (H100 NVL) or 4
  (H200 NVL) joined by NVLink bridges, 1 for cards with PCIe only.
* the network beyond the fast domain, per GPU and direction: one 400 Gb/s NIC per GPU (50 GB/s),
  as the DGX H100/H200/B200 datasheets list eight ConnectX-7 ports; 200 Gb/s (25 GB/s) for the
  DGX A100's ConnectX-6 and for PCIe cards (a PCIe 4.0 x16 slot moves ~25 GB/s in practice).
  This is an **assumed** cluster, the reference design; a calibration replaces it.
* idle power: **measured** for the H100 SXM (~75 W at the energy counter, ``reference/
  h100-measured.md``); for every other GPU it is **assumed** at the same share of board power
  (75/700 ≈ 11 %), because datasheets give no idle figure.
* lowest power limit: **measured** for the H100 SXM (NVML's allowed range 200–700 W, same
  reference); **assumed** at the same share (2/7 of board power) elsewhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """What the planner needs of one GPU type beyond its peaks (sources: module docstring).

    Bandwidths are bytes/s per device and direction; ``fast_domain`` is how many devices share
    the fast link (NVLink); ``network_bytes_per_s`` is what one device gets beyond it.
    ``measured`` names the figures measured on a real device rather than taken or assumed.
    """

    label: str
    memory_bytes: float
    hbm_bytes_per_s: float
    fast_link_bytes_per_s: float
    fast_domain: int
    network_bytes_per_s: float
    board_power_w: float
    idle_power_w: float
    min_power_limit_w: float
    measured: tuple[str, ...] = ()

    def source(self, figure: str) -> str:
        """Where ``figure`` (a field name) comes from, in words."""
        if figure in self.measured:
            return "measured (reference/h100-measured.md)"
        if figure in ("idle_power_w", "min_power_limit_w"):
            return "assumed (H100 SXM's measured share of board power)"
        if figure == "network_bytes_per_s":
            return "assumed (one NIC per GPU, DGX reference design)"
        return f"datasheet ({self.label})"


_GB = 1e9
_IDLE_SHARE = 75 / 700  # H100 SXM, measured
_LIMIT_SHARE = 200 / 700  # H100 SXM, NVML's allowed range


def _facts(
    label: str,
    memory_gb: float,
    hbm_tb_s: float,
    nvlink_gb_s_bidirectional: float,
    fast_domain: int,
    network_gb_s: float,
    board_power_w: float,
) -> GpuFacts:
    return GpuFacts(
        label=label,
        memory_bytes=memory_gb * _GB,
        hbm_bytes_per_s=hbm_tb_s * 1e12,
        fast_link_bytes_per_s=nvlink_gb_s_bidirectional / 2 * _GB,
        fast_domain=fast_domain,
        network_bytes_per_s=network_gb_s * _GB,
        board_power_w=board_power_w,
        idle_power_w=round(board_power_w * _IDLE_SHARE),
        min_power_limit_w=round(board_power_w * _LIMIT_SHARE),
    )


#: label -> facts; PCIe-only cards have a fast domain of 1 (their "fast link" is PCIe 4.0 x16)
_GPU_FACTS: dict[str, GpuFacts] = {
    f.label: f
    for f in (
        _facts("GB200", 186, 8.0, 1800, 72, 50, 1200),
        _facts("B200", 180, 8.0, 1800, 8, 50, 1000),
        _facts("H200 NVL", 141, 4.8, 900, 4, 50, 600),
        _facts("H200 SXM", 141, 4.8, 900, 8, 50, 700),
        _facts("H100 NVL", 94, 3.9, 600, 2, 50, 400),
        _facts("H100 PCIe", 80, 2.0, 600, 2, 25, 350),
        GpuFacts(
            label="H100 SXM",
            memory_bytes=80 * _GB,
            hbm_bytes_per_s=3.35e12,
            fast_link_bytes_per_s=450 * _GB,
            fast_domain=8,
            network_bytes_per_s=50 * _GB,
            board_power_w=700,
            idle_power_w=75,
            min_power_limit_w=200,
            measured=("idle_power_w", "min_power_limit_w"),
        ),
        _facts("A100", 80, 2.039, 600, 8, 25, 400),
        _facts("L40S", 48, 0.864, 64, 1, 25, 350),
        _facts("L4", 24, 0.300, 64, 1, 25, 72),
        _facts("RTX 4090", 24, 1.008, 64, 1, 25, 450),
        _facts("MI300X", 192, 5.3, 1792, 8, 50, 750),
    )
}

#: short names for ``greenbench plan --device-type`` -> label of the tables
DEVICE_TYPES: dict[str, str] = {
    "a100": "A100",
    "h100": "H100 SXM",
    "h100-pcie": "H100 PCIe",
    "h100-nvl": "H100 NVL",
    "h200": "H200 SXM",
    "h200-nvl": "H200 NVL",
    "b200": "B200",
    "gb200": "GB200",
    "l4": "L4",
    "l40s": "L40S",
    "rtx4090": "RTX 4090",
    "mi300x": "MI300X",
}


def gpu_label(device_name: str) -> str | None:
    """The table label of a GPU name as NVML reports it (``'NVIDIA H100 80GB HBM3'`` ->
    ``'H100 SXM'``), or of a short name (``h100``), or None if unknown."""
    short = DEVICE_TYPES.get(device_name.strip().lower())
    if short:
        return short
    for pattern, label, _ in _GPU_PEAKS_TFLOPS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return label
    return None


def gpu_facts(device_name: str) -> GpuFacts | None:
    """Memory, bandwidths and power of a GPU (a short name or a reported name), or None."""
    label = gpu_label(device_name)
    return _GPU_FACTS.get(label) if label else None


def gpu_peak_flops_of_label(label: str, dtype: object) -> float:
    """Dense datasheet peak FLOP/s of a table label (``'H100 SXM'``) in ``dtype``."""
    key = _dtype_key(dtype)
    for _, name, peaks in _GPU_PEAKS_TFLOPS:
        if name == label:
            return peaks[key] * 1e12
    raise KeyError(label)
