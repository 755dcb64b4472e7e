"""Which selective scan a Mamba run uses: the ``model.scan`` setting, resolved before the run.

Choices: ``native`` (greenbench's C kernel, CPU), ``torch`` (the exact stepping scan, any
device), ``mamba-ssm`` (transformers' forward on mamba-ssm's CUDA kernels, when installed), and
``auto``: the C kernel on CPU when it builds (else the torch scan, with one warning), mamba-ssm
on CUDA when installed (else the torch scan). The resolved name is part of the run's identity,
so runs on different kernels are never pooled.
"""

from __future__ import annotations

from greenbench.errors import KernelUnavailable, SpecError

CHOICES = ("native", "torch", "mamba-ssm")


def mamba_ssm_available() -> bool:
    from transformers.utils.import_utils import is_mamba_ssm_available

    return bool(is_mamba_ssm_available())


def resolve_scan(setting: str, device: str) -> str:
    """The backend ``model.scan=setting`` runs on ``device`` ("cpu" or "cuda"); builds the C
    kernel on first use. Raises SpecError for an unknown choice and KernelUnavailable for a
    choice this machine cannot run."""
    from greenbench.models.mamba.scan_native import native_kernel

    if setting not in ("auto", *CHOICES):
        raise SpecError(f"model.scan={setting!r} is not one of auto, {', '.join(CHOICES)}")
    if device == "cuda":
        if setting == "native":
            raise KernelUnavailable(
                "model.scan=native is a CPU kernel; on CUDA use auto, torch or mamba-ssm"
            )
        if setting == "mamba-ssm" and not mamba_ssm_available():
            raise KernelUnavailable("model.scan=mamba-ssm but mamba-ssm is not installed")
        if setting == "auto":
            return "mamba-ssm" if mamba_ssm_available() else "torch"
        return setting
    if setting == "mamba-ssm":
        raise KernelUnavailable("model.scan=mamba-ssm needs CUDA; on CPU use auto, native or torch")
    if setting == "torch":
        return "torch"
    kernel = native_kernel(required=setting == "native")
    return "native" if kernel is not None else "torch"
