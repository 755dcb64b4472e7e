"""What the launcher decides about a spec on the machine that runs it, before the run is stored:
the device and precision (``auto``), the kernel ``model.scan: auto`` becomes, whether blocks are
compiled and liger's fused kernels used, and whether ranks run under CPU quotas. Resolved values
are part of the run's identity, so runs on different devices, kernels, compilation or quota
settings are never pooled. Also the coefficients of ``data.cost_model = measured``: this
machine's stored fit for the run's model, measured first where none is stored (they count in no
identity: the machine's fingerprint is stored with every run)."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from greenbench.config import setting_of
from greenbench.errors import DeviceUnavailable, KernelUnavailable, SpecError
from greenbench.settings import (
    DataSettings,
    EmulateSettings,
    ModelSettings,
    RunSettings,
    TrainSettings,
)
from greenbench.settings.runspec import RunSpec
from greenbench.vocabulary import is_user_workload

#: the settings resolved here, by the keys their sections declare
DEVICE = setting_of(RunSettings, "device").key
PRECISION = setting_of(RunSettings, "precision").key
SCAN = setting_of(ModelSettings, "scan").key
COMPILE = setting_of(TrainSettings, "compile").key
LIGER = setting_of(ModelSettings, "liger").key
QUOTA = setting_of(EmulateSettings, "rank_cpu_quota").key
COST_A = setting_of(DataSettings, "cost_a").key
COST_B = setting_of(DataSettings, "cost_b").key


def _with(spec: RunSpec, values: dict[str, Any]) -> RunSpec:
    """``spec`` with ``values`` (resolved settings, by key) written into its settings."""
    return replace(spec, settings={**spec.settings, **values})


def resolve_device(spec: RunSpec) -> RunSpec:
    """Turn ``auto`` device and precision into concrete values; fail if cuda is asked and absent.
    (Whether this machine has enough devices for the spec's ranks is the preflight's question:
    `greenbench.launcher.preflight.why_too_few_devices`.)"""
    from greenbench.spec import default_device

    c = spec.config
    device, precision = c.run.device, c.run.precision
    if c.emulate is not None and c.emulate.gpu and device == "auto":
        device = "cpu"  # its GPUs are emulated: CPU ranks stand in for them
    has_cuda = device != "cpu" and default_device() == "cuda"
    if device == "auto":
        device = "cuda" if has_cuda else "cpu"
    if device == "cuda" and not has_cuda:
        raise DeviceUnavailable(
            "--device cuda was asked but torch sees no CUDA device here "
            "(CPU-only torch build or no GPU); use --device cpu"
        )
    if precision == "auto":
        precision = "bf16" if device == "cuda" else "fp32"
    return _with(spec, {DEVICE: device, PRECISION: precision})


def resolve_kernel(spec: RunSpec, *, build: bool = True) -> RunSpec:
    """``model.scan`` as the backend that will run (``none`` for families without a scan);
    ``build`` False builds no kernel (`greenbench.models.card.ModelCard.resolve_kernel`)."""
    from greenbench.models import FAMILIES

    c = spec.config
    scan = FAMILIES[c.model.family].resolve_kernel(c.model.scan, c.run.device, build=build)
    return _with(spec, {SCAN: scan})


#: strategies whose runs compile their blocks under ``train.compile: auto`` on CUDA (the ones
#: torchtitan compiles; the others hook into their blocks' forward in ways not tried compiled)
COMPILED_BY_DEFAULT = ("single", "ddp", "fsdp")


def resolve_compile(spec: RunSpec) -> RunSpec:
    """``train.compile`` as on or off: auto is on for the Transformer on CUDA under the
    strategies of `COMPILED_BY_DEFAULT` (as torchtitan runs it), off elsewhere (on CPU the
    reference runs stay eager, and compiling a tiny model costs more than it saves)."""
    from greenbench.models import FAMILIES

    c = spec.config
    if c.train.compile != "auto":
        return _with(spec, {})
    on = (
        c.run.device == "cuda"
        and FAMILIES[c.model.family].compiled_by_default
        and c.run.strategy in COMPILED_BY_DEFAULT
    )
    return _with(spec, {COMPILE: "on" if on else "off"})


def resolve_liger(spec: RunSpec) -> RunSpec:
    """``model.liger`` as on or off: auto is on for the Transformer on CUDA under the
    strategies of `COMPILED_BY_DEFAULT` when liger-kernel is installed and the run is not
    compiled (``train.compile`` resolved off): liger's Triton kernels inside torch.compile's graph
    made a step slower than either alone (125m, seq 1024, batch 4, bf16, on an H200: 0.68× an
    eager transformers loop with both, 0.95× with either one), so a compiled run leaves its
    fusion to the compiler unless ``model.liger=on`` asks for both. ``on`` elsewhere is
    refused with its reason (SpecError: another family or a strategy whose loss is computed
    elsewhere; KernelUnavailable: not installed, or a CPU without Triton's interpreter)."""
    from greenbench.models import FAMILIES
    from greenbench.models.transformer.fused import liger_available, liger_runs_on

    c = spec.config
    model, run = c.model, c.run
    fits = FAMILIES[model.family].fused_kernels and run.strategy in COMPILED_BY_DEFAULT
    if model.liger == "auto":
        compiled = c.train.compile == "on"
        on = fits and run.device == "cuda" and not compiled and liger_available()
        return _with(spec, {LIGER: "on" if on else "off"})
    if model.liger == "on":
        if not fits:
            raise SpecError(
                "model.liger=on applies to the transformer family under strategy single, ddp or "
                f"fsdp (got {model.family} under {run.strategy})"
            )
        if not liger_available():
            raise KernelUnavailable("model.liger=on but liger-kernel is not installed")
        if not liger_runs_on(run.device):
            raise KernelUnavailable(
                "model.liger=on: liger-kernel's kernels are Triton GPU kernels; on CPU they run "
                "only under Triton's interpreter (TRITON_INTERPRET=1)"
            )
    return _with(spec, {})


def resolve_quota(spec: RunSpec, cores: int | None = None) -> RunSpec:
    """``emulate.rank_cpu_quota`` as on or off for this node: auto is on exactly when a CPU run
    has more ranks on the node than the node has cores (GPU ranks own their devices)."""
    from greenbench.launcher.cpu_quota import quota_wanted

    c = spec.config
    cores = cores or os.cpu_count() or 1
    wanted = c.run.device == "cpu" and quota_wanted(c.emulate.rank_cpu_quota, c.run.nproc, cores)
    return _with(spec, {QUOTA: "on" if wanted else "off"})


def resolve_spec(spec: RunSpec, cores: int | None = None, *, measure: bool = True) -> RunSpec:
    """Everything above, in order (the kernel and the quota depend on the device). A simulated
    run (`greenbench.launcher.runners.simulated`) has no ranks: it runs where the simulator does
    (the CPU, for ``device: auto``), under no quota, so no figure of this machine's enters its
    identity. ``cores``: the node's (default: this machine's). ``measure`` False (a preview:
    `greenbench run --dry-run`) builds no kernel and fits no cost model, so nothing is run or
    written: the coefficients count in no identity, and a kernel that could be built is taken
    to build."""
    from greenbench.launcher.runners.simulated import is_simulated

    if is_simulated(spec):
        device = spec.config.run.device
        spec = _with(spec, {DEVICE: "cpu" if device == "auto" else device, QUOTA: "off"})
    if is_user_workload(spec.workload):  # no model family: no kernel or liger to choose
        from greenbench.rank import user_run

        return resolve_quota(user_run.resolve_compile(resolve_device(spec)), cores)
    spec = resolve_liger(resolve_compile(resolve_kernel(resolve_device(spec), build=measure)))
    spec = resolve_quota(spec, cores)
    return resolve_cost(spec) if measure else spec


def resolve_cost(spec: RunSpec) -> RunSpec:
    """``data.cost_model = measured`` without coefficients: this machine's fit for the run's
    model, precision and threads per rank (`greenbench.sources.cost_timing.calibrated_fit`),
    measured and stored first where none is (a few seconds of the model on the CPU)."""
    from greenbench.data.packing import MEASURED

    c = spec.config
    data = c.data
    if data is None or data.cost_model != MEASURED or data.cost_a or data.cost_b:
        return spec
    if c.run.device != "cpu":
        raise SpecError("data.cost_model=measured is fitted on CPU runs only for now")
    from greenbench.launcher.execute import threads_per_rank
    from greenbench.sources.cost_timing import calibrated_fit

    fit = calibrated_fit(
        c.model.family,
        c.model.size,
        data.seq_len,
        precision=c.run.precision,
        threads=threads_per_rank(c.run.nproc),
        kernel=c.model.scan,
    )
    return _with(spec, {COST_A: fit.a, COST_B: fit.b})
