"""The power model: watts per device while busy and while waiting, and what a power limit does.

Units: watts (W), seconds (s), joules (J).

* A device computing draws ``busy_w``; a device waiting (exposed communication, pipeline
  bubble) draws ``idle_w``. Energy of one step on one device is
  ``busy_w × compute_s + idle_w × wait_s``. Default ``busy_w`` is **assumed** at 0.9 × board
  power: the H100 SXM measured here drew 618–635 W of its 700 W while training at 24–32 % MFU
  (``reference/h100-measured.md``: J/token × tokens/s). ``idle_w`` is the GPU table's idle power
  (measured for the H100 SXM, assumed elsewhere). Waiting is priced at idle power, so the model
  reads a little low where communication kernels keep the device busier than idle.
* A power limit ``L`` below ``busy_w`` caps the busy power at ``L`` and slows compute: in the
  DVFS range dynamic power grows about as the cube of the clock (P ∝ f·V², V ∝ f), so the clock,
  and a compute-bound step's speed, scale as ``(L / busy_w)^(1/3)``. An **assumption** of the
  model (the shape Zeus and Perseus measure: limits well under the default trade a few percent
  of time for a larger share of energy), to be replaced by a measured curve from the power-limit
  workload when one is stored. Communication time and idle power do not change with the limit.
  The law and its sources live in `greenbench.hardware.gpu_model`, which an emulated GPU answers
  NVML with too, so the planner and the emulation price a limit the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from greenbench.errors import SpecError
from greenbench.hardware.gpu_model import BUSY_SHARE_OF_BOARD, slowdown

__all__ = ["BUSY_SHARE_OF_BOARD", "Power", "under_limit"]


@dataclass(frozen=True, slots=True)
class Power:
    """Watts of one device: ``busy_w`` computing, ``idle_w`` waiting; ``slowdown`` multiplies
    compute time (1 without a power limit)."""

    busy_w: float
    idle_w: float
    slowdown: float = 1.0

    def energy_j(self, compute_s: float, wait_s: float) -> float:
        """Joules of one device over ``compute_s`` busy and ``wait_s`` waiting seconds."""
        return self.busy_w * compute_s + self.idle_w * wait_s


def under_limit(
    busy_w: float,
    idle_w: float,
    limit_w: float | None,
    *,
    min_limit_w: float,
    board_power_w: float,
) -> Power:
    """The device's `Power` under the GPU power limit ``limit_w`` (None: the default limit).
    SpecError when the limit is outside what the device allows."""
    if limit_w is None:
        return Power(busy_w, idle_w)
    if not min_limit_w <= limit_w <= board_power_w:
        raise SpecError(
            f"--power-limit-w {limit_w:g} is outside this device's range "
            f"{min_limit_w:g}–{board_power_w:g} W"
        )
    if limit_w >= busy_w:
        return Power(busy_w, idle_w)
    return Power(limit_w, idle_w, slowdown=slowdown(limit_w, busy_w))
