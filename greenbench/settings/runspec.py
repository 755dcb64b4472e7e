"""A run specification: the fully resolved settings of one benchmark configuration.

The launcher hands it to every rank as JSON, and the store keeps it with the run, as flat
dotted settings; code reads them through the typed view, `RunSpec.config`. Parsing suites and
validating settings is `greenbench.spec`'s job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from greenbench.config import Config
from greenbench.strategies.odc.settings import ODCSettings
from greenbench.strategies.skippipe.settings import skips
from greenbench.vocabulary import Layout, is_user_workload


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
    def config(self) -> Config:
        """The settings as typed sections (`greenbench.settings.SCHEMA`)."""
        from greenbench.settings import SCHEMA

        return SCHEMA.config(self.settings)

    @property
    def name(self) -> str:
        """Short human label, e.g. ``transformer/tiny seq=1024 fixed single×1``; ranks under a
        CPU quota each (``emulate.rank_cpu_quota`` resolved to ``on``) add ``cpu-quota``, so the
        same layout with and without quotas reads as two configurations, as it is; a GPU power
        limit adds ``limit=490W`` (``limit=0.7×default`` until the launcher turns a fraction into
        watts), and emulated GPUs ``emulated-h100``; ODC over point-to-point messages reads
        ``odc[p2p]``."""
        c = self.config
        quota = " cpu-quota" if c.emulate.rank_cpu_quota == "on" else ""
        if c.train.activation_checkpointing != "off":
            quota += f" ac={c.train.activation_checkpointing}"
        if c.emulate.gpu:
            quota += f" emulated-{c.emulate.gpu}"
        if (c.gpu.power_limit_w or 0) > 0:
            quota += f" limit={c.gpu.power_limit_w:g}W"
        elif (c.gpu.power_limit_frac or 0) > 0:
            quota += f" limit={c.gpu.power_limit_frac:g}×default"
        strategy = c.run.strategy
        ranks = c.run.nproc * c.run.nnodes
        if is_user_workload(self.workload):  # its entry point and its own settings tell it apart
            own = " ".join(f"user.{k}={v}" for k, v in sorted(c.user.items()))
            return f"{self.workload}{f' {own}' if own else ''} {strategy}×{ranks}{quota}"
        if strategy == "hybrid":  # its layout is what tells one hybrid run from another
            layout = Layout(**c.layout.degrees())
            schedule = f" {c.train.pp_schedule}" if layout.pp > 1 else ""
            strategy = f"hybrid[{layout.short}{schedule}]"
        elif strategy == "skippipe":  # its schedule and emulated conditions tell runs apart
            sp = c.skippipe
            parts = [sp.schedule, sp.stages]
            if skips(sp.schedule):
                parts.append(f"skip={sp.skip:g}")
            if sp.slow_nodes:
                parts.append(f"slow={sp.slow_nodes}×{sp.slowdown:g}")
            if sp.fail_node >= 0:
                parts.append(f"fail={sp.fail_node}@{sp.fail_step}")
            if c.fault is not None and c.fault.kill_rank.strip():  # a node really killed
                parts.append(f"kill={c.fault.kill_rank.strip()}")
            if sp.mode == "simulate":
                return self._simulated_name(c, parts)
            strategy = f"skippipe[{' '.join(parts)}]"
        elif strategy == "ddp":  # its method and an emulated link tell runs apart
            from greenbench.distributed.link import EmulatedLink

            parts = [c.ddp.method, EmulatedLink.of(c).label()]
            if any(parts):
                strategy = f"ddp[{', '.join(p for p in parts if p)}]"
        elif strategy == "odc":  # its transport, away from shared memory, tells runs apart
            odc = c[ODCSettings]
            if odc is not None and odc.transport != "shm":
                strategy = f"odc[{odc.transport}]"
        quota += self._fault_words(c)
        m, d = c.model, c.data
        return f"{m.family}/{m.size} seq={d.seq_len} {d.lengths} {strategy}×{ranks}{quota}"

    @staticmethod
    def _fault_words(c: Config) -> str:
        """A checkpointed or killed run's words: ``ckpt/4 async kill=1@15`` (SkipPipe's kill is
        in its brackets)."""
        words = ""
        ckpt, fault = c.ckpt, c.fault
        if ckpt is not None and ckpt.every > 0:
            words += f" ckpt/{ckpt.every}" + (" async" if ckpt.mode == "async" else "")
        if fault is not None and fault.kill_rank.strip() and c.run.strategy != "skippipe":
            words += f" kill={fault.kill_rank.strip()}"
        return words

    def _simulated_name(self, c: Config, parts: list[str]) -> str:
        """A simulated SkipPipe run's name: its network and its simulated nodes; on ``gcp12``
        the published experiment's model and context instead of the settings'."""
        network = c.skippipe.network
        nodes = sum(int(p) for p in str(c.skippipe.stages).split("-") if p.strip())
        what = f"skippipe[{' '.join([*parts, 'simulated', network])}]×{nodes}"
        if network == "gcp12":
            return f"published/24-layer seq=1024 {what}"
        m, d = c.model, c.data
        return f"{m.family}/{m.size} seq={d.seq_len} {d.lengths} {what}"

    @property
    def layout(self) -> Layout:
        """The layout the spec's ``layout.*`` settings name (resolved by the spec)."""
        return Layout(**self.config.layout.degrees())

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
