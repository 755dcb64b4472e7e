"""A GPU's power and speed against its power limit: a model, not a measurement. No torch.

One model serves two readers: the planner prices a power limit with it (`greenbench.planner.power`),
and an emulated GPU answers NVML with it (`greenbench.hardware.nvml_model`, for trying and testing
the power-limit path on a machine without a GPU). Units: watts (W), megahertz (MHz), seconds.

The model, with where each part comes from:

* **Busy power without a cap** is ``BUSY_SHARE_OF_BOARD`` × board power, **assumed** from the H100
  SXM measured here: 618–635 W of its 700 W while training at 24–32 % MFU (J/token × tokens/s,
  ``reference/h100-measured.md``). Idle power and the allowed range come from the GPU table
  (`greenbench.hardware.gpus`: the H100's 75 W idle and 200–700 W range are measured, other GPUs'
  are assumed at the same shares of board power).
* **Under a limit** ``L`` below the busy power, the driver lowers the SM clock until the board draws
  ``L``. In CMOS, dynamic power is ``P ∝ C·V²·f`` and, within the DVFS range, voltage falls roughly
  in proportion to frequency, so ``P ∝ f³`` (Hennessy & Patterson, *Computer Architecture: A
  Quantitative Approach*, §1.5, "Trends in power and energy"). The clock then runs at
  ``(L / P_busy)^(1/3)`` of its maximum, and a clock-bound step takes ``(P_busy / L)^(1/3)`` times
  as long. The whole board is treated as dynamic power (no static floor), and the whole step as
  clock-bound: memory-bound kernels do not slow with the SM clock, so a real GPU slows less than
  this, and the model's slowdown is an upper bound.
* **Power while partly busy** is ``P_idle + (min(L, P_busy) − P_idle) × load`` for a busy fraction
  ``load`` in [0, 1].

What the shape means, and what it is checked against: energy per unit of work is power × time ∝
``L^(2/3)``, so below the busy power every step down in the limit saves more energy than it costs
time. That is the shape the published power-limit sweeps show for DNN training (Zeus, You, Chung
and Chowdhury, NSDI 2023, "Zeus: Understanding and Optimizing GPU Energy Consumption of DNN
Training": energy falls and time rises as the limit drops; Perseus, Chung et al., SOSP 2024,
arXiv 2312.06902: large-model training spends up to ~30 % of its energy for no speed). On the H100
the model gives 15 % less energy per token for 9 % more time at 490 W (0.7 × 700 W). The figures
are the model's, not a measurement; the ``power-limit`` workload measures the real curve where a
GPU is at hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from greenbench.hardware.gpus import GpuFacts

BUSY_SHARE_OF_BOARD = 0.9  # assumed: H100 SXM measured 618–635 W of 700 W
CLOCK_EXPONENT = 1 / 3  # clock ∝ power^(1/3) in the DVFS range (P ∝ f·V², V ∝ f)
#: the SM clock an emulated GPU reports at full speed (H100 SXM's maximum SM clock, NVIDIA's
#: datasheet boost clock 1,980 MHz); only ratios of it matter
MAX_SM_CLOCK_MHZ = 1980


def clock_fraction(limit_w: float, busy_w: float) -> float:
    """The share of its maximum clock a GPU busy at ``busy_w`` runs at under ``limit_w`` (≤ 1)."""
    if limit_w <= 0 or busy_w <= 0:
        raise ValueError(f"limit and busy power must be > 0 W, got {limit_w}, {busy_w}")
    return min(1.0, (limit_w / busy_w) ** CLOCK_EXPONENT)


def slowdown(limit_w: float, busy_w: float) -> float:
    """How many times as long a clock-bound step takes under ``limit_w`` (≥ 1)."""
    return 1.0 / clock_fraction(limit_w, busy_w)


@dataclass(frozen=True, slots=True)
class GpuPowerModel:
    """One GPU type's power against its power limit (the module docstring's model)."""

    label: str
    busy_w: float  # drawn while training without a cap
    idle_w: float
    default_limit_w: float  # the limit the driver starts with (board power)
    min_limit_w: float
    max_limit_w: float

    @classmethod
    def of(cls, facts: GpuFacts) -> GpuPowerModel:
        """The model of a GPU type from its table row."""
        return cls(
            label=facts.label,
            busy_w=facts.board_power_w * BUSY_SHARE_OF_BOARD,
            idle_w=facts.idle_power_w,
            default_limit_w=facts.board_power_w,
            min_limit_w=facts.min_power_limit_w,
            max_limit_w=facts.board_power_w,
        )

    def busy_power_w(self, limit_w: float) -> float:
        """Power while fully busy under ``limit_w``: the busy power, capped at the limit."""
        return min(self.busy_w, limit_w)

    def power_w(self, limit_w: float, load: float) -> float:
        """Power at busy fraction ``load`` (clamped to [0, 1]) under ``limit_w``."""
        load = min(max(load, 0.0), 1.0)
        busy = self.busy_power_w(limit_w)
        return self.idle_w + max(busy - self.idle_w, 0.0) * load

    def slowdown(self, limit_w: float) -> float:
        """How many times as long a clock-bound step takes under ``limit_w``."""
        return slowdown(limit_w, self.busy_w)

    def sm_clock_mhz(self, limit_w: float) -> int:
        """The SM clock the GPU runs at while busy under ``limit_w``."""
        return round(MAX_SM_CLOCK_MHZ * clock_fraction(limit_w, self.busy_w))
