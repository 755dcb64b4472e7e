"""A run specification: the fully resolved settings of one benchmark configuration.

Plain data (no torch): the launcher hands it to every rank as JSON, and the store keeps it with
the run. Parsing suites and validating settings is `greenbench.spec`'s job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from greenbench.vocabulary.layout import DEGREES, Layout

#: the ``strategy`` of a user's own measurement, which no greenbench workload trains: an own loop
#: measured by ``greenbench.measure`` (workload ``loop/NAME``), or a whole process measured by
#: ``greenbench measure -- CMD`` (workload ``process/NAME``)
OWN_LOOP_STRATEGY = "own-loop"
WHOLE_PROCESS_STRATEGY = "whole-process"
#: each own-measurement strategy, in words
OWN_MEASUREMENT_KINDS = {OWN_LOOP_STRATEGY: "own loop", WHOLE_PROCESS_STRATEGY: "whole process"}


def is_user_workload(workload: str) -> bool:
    """Whether a workload is a user's own, named by its entry point ``module.path:attribute``
    (greenbench's own workloads have plain names, never a colon)."""
    return ":" in workload


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One fully resolved configuration of one workload."""

    workload: str
    settings: dict[str, Any]
    suite: str | None = None
    label: str | None = None

    def __getitem__(self, key: str) -> Any:
        return self.settings[key]

    @property
    def name(self) -> str:
        """Short human label, e.g. ``transformer/tiny seq=1024 fixed single×1``; ranks under a
        CPU quota each (``emulate.rank_cpu_quota`` resolved to ``on``) add ``cpu-quota``, so the
        same layout with and without quotas reads as two configurations, as it is; a GPU power
        limit adds ``limit=490W`` (``limit=0.7×default`` until the launcher turns a fraction into
        watts), and emulated GPUs ``emulated-h100``."""
        s = self.settings
        quota = " cpu-quota" if s.get("emulate.rank_cpu_quota") == "on" else ""
        if s.get("emulate.gpu"):
            quota += f" emulated-{s['emulate.gpu']}"
        if (s.get("gpu.power_limit_w") or 0) > 0:
            quota += f" limit={s['gpu.power_limit_w']:g}W"
        elif (s.get("gpu.power_limit_frac") or 0) > 0:
            quota += f" limit={s['gpu.power_limit_frac']:g}×default"
        strategy = s["strategy"]
        if is_user_workload(self.workload):  # its entry point and its own settings tell it apart
            own = " ".join(f"{k}={v}" for k, v in sorted(s.items()) if k.startswith("user."))
            ranks = s["nproc"] * s["nnodes"]
            return f"{self.workload}{f' {own}' if own else ''} {strategy}×{ranks}{quota}"
        if strategy == "hybrid":  # its layout is what tells one hybrid run from another
            schedule = f" {s.get('train.pp_schedule', '1f1b')}" if self.layout.pp > 1 else ""
            strategy = f"hybrid[{self.layout.short}{schedule}]"
        elif strategy == "skippipe":  # its schedule and emulated conditions tell runs apart
            parts = [s.get("skippipe.schedule", "skippipe"), s.get("skippipe.stages", "")]
            if parts[0] != "full":
                parts.append(f"skip={s.get('skippipe.skip', 0):g}")
            if s.get("emulate.slow_nodes"):
                parts.append(f"slow={s['emulate.slow_nodes']}×{s.get('emulate.slowdown', 1):g}")
            if s.get("skippipe.fail_node", -1) >= 0:
                parts.append(f"fail={s['skippipe.fail_node']}@{s.get('skippipe.fail_step', 0)}")
            if s.get("skippipe.mode") == "simulate":
                return self._simulated_name(parts)
            strategy = f"skippipe[{' '.join(parts)}]"
        return (
            f"{s['model.family']}/{s['model.size']} seq={s['data.seq_len']} "
            f"{s['data.lengths']} {strategy}×{s['nproc'] * s['nnodes']}{quota}"
        )

    def _simulated_name(self, parts: list[str]) -> str:
        """A simulated SkipPipe run's name: its network and its simulated nodes; on ``gcp12``
        the published experiment's model and context instead of the settings'."""
        s = self.settings
        network = s.get("skippipe.network", "local")
        nodes = sum(int(p) for p in str(s.get("skippipe.stages", "")).split("-") if p.strip())
        what = f"skippipe[{' '.join([*parts, 'simulated', network])}]×{nodes}"
        if network == "gcp12":
            return f"published/24-layer seq=1024 {what}"
        model = f"{s['model.family']}/{s['model.size']}"
        return f"{model} seq={s['data.seq_len']} {s['data.lengths']} {what}"

    @property
    def layout(self) -> Layout:
        """The layout the spec's ``layout.*`` settings name (resolved by the spec)."""
        return Layout(**{d: self.settings[f"layout.{d}"] for d in DEGREES})

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "suite": self.suite,
            "label": self.label,
            "settings": dict(self.settings),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        return cls(
            workload=d["workload"],
            settings=dict(d["settings"]),
            suite=d.get("suite"),
            label=d.get("label"),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)
