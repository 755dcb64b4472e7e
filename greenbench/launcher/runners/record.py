"""A configuration's run record (the ``runs`` row it begins with), built in one place.

`spec_record` holds what the spec alone says (all a cluster's submitter knows of a
configuration its job never began); `build_record` adds what the launcher knows of this machine
and session (its fingerprint, the region's carbon intensity, the power limit it holds) and what
the runner says ran it (the device type, the kernels, the columns a runner stores in its own
way), in that order, so that no column is written twice by different hands.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from greenbench.rank import emulated_gpu
from greenbench.results import RunRecord
from greenbench.settings import spec_key, spec_seed_group
from greenbench.settings.runspec import RunSpec
from greenbench.vocabulary import is_user_workload

if TYPE_CHECKING:
    from greenbench.launcher.runners.base import RunContext


def spec_record(spec: RunSpec, run_id: str) -> RunRecord:
    """The record of ``spec``'s run ``run_id`` as its spec alone fills it, started now."""
    c = spec.config
    model, data = c.model, c.data  # None for a user workload
    return RunRecord(
        run_id=run_id,
        suite=spec.suite,
        workload=spec.workload,
        config_name=spec.name,
        config_key=spec_key(spec),
        seed_group=spec_seed_group(spec),
        config=json.dumps(spec.to_dict(), sort_keys=True),
        model_family=model.family if model is not None else None,
        model_size=model.size if model is not None else None,
        strategy=c.run.strategy,
        layout=spec.layout,
        rank_cpu_quota=c.emulate.rank_cpu_quota == "on",
        device=c.run.device,
        nproc=c.run.nproc,
        nnodes=c.run.nnodes,
        precision=c.run.precision,
        seq_len=data.seq_len if data is not None else None,
        lengths=data.lengths if data is not None else None,
        region=c.energy.region,
        label=spec.label,
        started_at=dt.datetime.now(dt.timezone.utc).replace(tzinfo=None),
    )


def model_kernels(spec: RunSpec, optimizer: str | None = None) -> dict[str, str]:
    """The kernels that run ``spec``'s model, by role: its family's (none for a user
    workload), the ``optimizer`` step's when one runs, and liger's when ``model.liger`` is on.
    Under context parallelism (``layout.cp`` > 1) role ``context_parallel`` says which form ran
    and why (`greenbench.models.card.ModelCard.cp_form`: PyTorch's ``context_parallel`` or the
    family's own, e.g. our ring for packed rows), the choice the hybrid strategy makes."""
    c = spec.config
    kernels: dict[str, str] = {}
    if not is_user_workload(spec.workload):
        from greenbench.models import FAMILIES

        card = FAMILIES[c.model.family]
        kernels = card.kernels_used(c.model.scan)
        if spec.layout.cp > 1 and card.context_parallel:
            device = "cuda" if c.run.device == "cuda" else "cpu"
            kernels["context_parallel"] = card.cp_form(device, c.data.lengths != "fixed").note
    if optimizer is not None:
        kernels["optimizer"] = optimizer
    if c.model is not None and c.model.liger == "on":
        from greenbench.models.transformer.fused import liger_parts

        kernels |= liger_parts(c.run.device)
    return kernels


def build_record(
    spec: RunSpec,
    ctx: RunContext,
    *,
    device_type: str,
    kernels: dict[str, str],
    **own: Any,
) -> RunRecord:
    """The record a runner returns for ``spec``'s run in ``ctx``: the spec's columns, then
    this machine's, then the ``own`` columns the runner stores in its own way (fields of
    `RunRecord`, e.g. a user workload's versions with its package's), then the power limit
    held; an emulated GPU names the device type."""
    fingerprint = ctx.fingerprint
    machine: dict[str, Any] = {
        "kernels": kernels,
        "device_type": device_type,
        "carbon_intensity_g_per_kwh": ctx.carbon[0],
        "git_sha": fingerprint.get("git_sha"),
        "git_branch": fingerprint.get("git_branch"),
        "host": fingerprint.get("host"),
        "hardware": json.dumps(fingerprint.get("hardware", fingerprint), default=str),
        "versions": json.dumps(fingerprint.get("versions", {}), default=str),
    }
    record = replace(spec_record(spec, ctx.run_id), **(machine | own))
    emulated = emulated_gpu.device_type(emulated_gpu.emulated(spec))
    if emulated:
        record = replace(record, device_type=emulated)
    return record if ctx.limit is None else replace(record, **ctx.limit.row())
