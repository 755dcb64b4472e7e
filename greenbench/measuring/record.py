"""Storing what a user measured in their own process: a run row, its one repeat and its ranks,
written by one process (rank 0, or the ``greenbench measure`` command) as the launcher writes its.

Two kinds of run come from here, each labelled by its ``strategy`` column and its name:

- an **own loop** (``greenbench.measure``): the user's training loop after its warm-up steps,
  rank-aware, a window like a workload's; ``strategy = own-loop``, workload ``loop/NAME``;
- a **whole process** (``greenbench measure -- COMMAND``): everything the command did from start
  to exit (start-up, data loading, compilation, evaluation included), never a training window;
  ``strategy = whole-process``, workload ``process/NAME``, and every repeat's ``energy_note``
  starts with `PROCESS_NOTE`.

Their identity is what they measured (the name, the command line, the user's settings, the
device and ranks), so a loop or command measured at two commits compares as one configuration.
The columns of greenbench's own model and data are ``user`` (family, lengths), the name (size)
and 0 (sequence length), as for a user workload.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from greenbench.config import setting_of
from greenbench.errors import SpecError
from greenbench.results import HarnessCost, RankResult, RepeatResult, RunOutcome, RunRecord
from greenbench.settings import SCHEMA, identity_of, seed_group_of
from greenbench.vocabulary import (
    OWN_LOOP_STRATEGY,
    WHOLE_PROCESS_STRATEGY,
    Layout,
    config_key,
)

LOOP_STRATEGY = OWN_LOOP_STRATEGY
PROCESS_STRATEGY = WHOLE_PROCESS_STRATEGY
PROCESS_NOTE = (
    "whole-process measurement: the command's energy and time from start to exit (start-up, "
    "data loading and evaluation included), not a training window"
)
#: ``runs.model_family`` and ``runs.lengths`` of what greenbench did not build
USER_FAMILY = "user"


def by_key(section: type, **values: Any) -> dict[str, Any]:
    """``values`` of ``section``'s settings (by field name) under the keys it declares: the
    settings a measurement stores with its run."""
    return {setting_of(section, name).key: value for name, value in values.items()}


def check_name(name: str) -> str:
    """A run name: non-empty, one line."""
    name = str(name).strip()
    if not name or "\n" in name:
        raise SpecError(f"a measurement's name must be one non-empty line, got {name!r}")
    return name


def run_record(
    *,
    run_id: str,
    workload: str,
    config_name: str,
    strategy: str,
    settings: Mapping[str, Any],
    label: str | None,
    device_type: str,
    fingerprint: Mapping[str, Any],
    carbon_g_per_kwh: float,
    model_size: str,
) -> RunRecord:
    """The run record of a measurement; ``settings`` hold ``device``, ``nproc``, ``nnodes``,
    ``precision`` and ``energy.region`` beside what defines it."""
    s = dict(settings)
    config = SCHEMA.config(s)
    run = config.run
    world = int(run.nproc) * int(run.nnodes)
    return RunRecord(
        run_id=run_id,
        suite=None,
        workload=workload,
        config_name=config_name,
        config_key=config_key(identity_of(s, workload)),
        seed_group=seed_group_of(identity_of(s, workload)),
        config=json.dumps(
            {"workload": workload, "suite": None, "label": label, "settings": s},
            sort_keys=True,
            default=str,
        ),
        model_family=USER_FAMILY,
        model_size=model_size,
        strategy=strategy,
        layout=Layout(dp_replicate=world),  # ranks side by side: the user's own parallelism
        kernels={},
        rank_cpu_quota=False,
        device=run.device,
        device_type=device_type,
        nproc=run.nproc,
        nnodes=run.nnodes,
        precision=run.precision,
        seq_len=0,
        lengths=USER_FAMILY,
        region=config.energy.region,
        carbon_intensity_g_per_kwh=carbon_g_per_kwh,
        label=label,
        git_sha=fingerprint.get("git_sha"),
        git_branch=fingerprint.get("git_branch"),
        started_at=dt.datetime.now(dt.timezone.utc).replace(tzinfo=None),
        host=fingerprint.get("host"),
        hardware=json.dumps(fingerprint.get("hardware", {}), default=str),
        versions=json.dumps(fingerprint.get("versions", {}), default=str),
    )


def device_type(device: str, gpus: list[int] | None = None) -> str:
    """The ``runs.device_type`` of this machine's ``device`` (as the launcher names it); on
    cuda the first of ``gpus`` (CUDA indices; default 0), named by torch where a loop runs
    under torch, else by NVML (a whole process: no torch import)."""
    if device == "cuda":
        first = (gpus or [0])[0]
        torch = sys.modules.get("torch")
        if torch is not None:
            return torch.cuda.get_device_name(first)
        from greenbench.hardware.nvidia import visible_gpus

        names = {gpu.index: gpu.name for gpu in visible_gpus()}
        return names.get(first, "unknown GPU")
    from greenbench.hardware.machine import cpu_model

    return f"cpu:{cpu_model()}"


def store_run(
    db: Path,
    record: RunRecord,
    ranks: list[RankResult],
    *,
    idle_power_w: float | None,
    peak: tuple[float | None, str | None],
    carbon_g_per_kwh: float,
    notes: tuple[str, ...] = (),
    mfu_note: str = "",
    status: str = "ok",
    error: str | None = None,
    idle_note: str = "",
    harness: HarnessCost | None = None,
) -> str:
    """Write one measured run (its single repeat aggregated from ``ranks``); return its id.
    ``notes`` go in front of the repeat's energy note (e.g. `PROCESS_NOTE`), ``mfu_note`` (where
    the FLOPs came from) in front of its MFU note; ``idle_note`` says why the idle baseline is
    unreliable (net energy unknown); ``harness``: what greenbench itself cost the run."""
    from dataclasses import replace

    from greenbench.aggregate import aggregate_repeat
    from greenbench.store import Store

    repeats: list[RepeatResult] = []
    if ranks:
        repeat = aggregate_repeat(
            ranks,
            idle_power_w=idle_power_w,
            peak_flops=peak[0],
            n_devices=int(record.nproc) * int(record.nnodes),
            carbon_g_per_kwh=carbon_g_per_kwh,
            idle_sample_note=idle_note,
        )
        note = "; ".join(filter(None, (*notes, repeat.energy_note)))
        mfu = "; ".join(filter(None, (mfu_note, repeat.mfu_note)))
        repeats = [replace(repeat, energy_note=note, mfu_note=mfu)]
    outcome = RunOutcome(
        status=status,
        repeats=repeats,
        ranks=ranks,
        error=error,
        peak_flops=peak[0],
        peak_flops_source=peak[1],
        harness=harness or HarnessCost(),
    )
    with Store(db) as store:
        store.begin_run(record.row())
        store.finish_run(record.run_id, outcome)
    return record.run_id
