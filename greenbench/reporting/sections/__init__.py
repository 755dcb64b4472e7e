"""The sections of ``greenbench report``, in the order it writes them (`REPORT_SECTIONS`).

Each keeps the `greenbench.reporting.section.ReportSection` protocol; adding one is its module
and one line here.
"""

from __future__ import annotations

from greenbench.reporting.hybrid import HybridSection
from greenbench.reporting.odc import OdcSection
from greenbench.reporting.power_limits import PowerLimitsSection
from greenbench.reporting.section import ReportSection
from greenbench.reporting.sections.board import LeaderboardSection
from greenbench.reporting.sections.comm_efficient import CommEfficientSection
from greenbench.reporting.sections.fault_tolerance import FaultToleranceSection
from greenbench.reporting.sections.own import OwnMeasurementsSection
from greenbench.reporting.sections.pareto import ParetoSection
from greenbench.reporting.sections.seq_len import SeqLenSection
from greenbench.reporting.sections.to_target import ToTargetSection
from greenbench.reporting.sections.workloads import WorkloadsSection
from greenbench.reporting.skippipe import SkipPipeSection

REPORT_SECTIONS: tuple[ReportSection, ...] = tuple(
    sorted(
        (
            LeaderboardSection(),
            ParetoSection(),
            SeqLenSection(),
            OdcSection(),
            HybridSection(),
            SkipPipeSection(),
            ToTargetSection(),
            CommEfficientSection(),
            FaultToleranceSection(),
            PowerLimitsSection(),
            OwnMeasurementsSection(),
            WorkloadsSection(),
        ),
        key=lambda s: s.order,
    )
)

__all__ = ["REPORT_SECTIONS"]
