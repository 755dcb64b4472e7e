"""Which selective scan a Mamba run uses: the ``model.scan`` setting, resolved before the run.

Choices: ``native`` (greenbench's C kernel, CPU), ``torch`` (the exact stepping scan, any
device), ``triton`` (greenbench's Triton kernels, CUDA; on CPU only under Triton's interpreter,
``TRITON_INTERPRET=1``, for tests), ``mamba-ssm`` (transformers' forward on mamba-ssm's CUDA
kernels, when it can be imported), and ``auto``: on CPU the C kernel when it builds (else the
torch scan, with one warning); on CUDA mamba-ssm when it can be imported, else the Triton
kernels when triton can, else the torch scan. ``fla`` (a Mamba-2 kernel) is refused. The
resolved name is part of the run's identity, so runs on different kernels are never pooled.
"""

from __future__ import annotations

import importlib
import os

from greenbench.errors import KernelUnavailable
from greenbench.models.mamba.card import CHOICES, check_scan
from greenbench.models.mamba.compiler import find_compiler

__all__ = [
    "CHOICES",
    "find_compiler",
    "mamba_ssm_available",
    "resolve_scan",
    "triton_available",
]

_NO_TRITON = "model.scan=triton but triton cannot be imported; install triton or use auto or torch"


def mamba_ssm_available() -> bool:
    """Whether transformers would run mamba-ssm's kernels: it finds the package and CUDA, and
    the package imports (a source install without its compiled CUDA extension does not)."""
    from transformers.utils.import_utils import is_mamba_ssm_available

    if not is_mamba_ssm_available():
        return False
    try:
        importlib.import_module("mamba_ssm")
    except Exception:  # a missing or broken CUDA extension fails in more ways than ImportError
        return False
    return True


def triton_available() -> bool:
    """Whether triton can be imported (it comes with CUDA builds of torch)."""
    try:
        importlib.import_module("triton")
    except ImportError:
        return False
    return True


def triton_interpreter_on() -> bool:
    """Whether ``TRITON_INTERPRET`` asks Triton to interpret kernels (on CPU tensors), read as
    Triton reads it."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


def resolve_scan(setting: str, device: str, *, build: bool = True) -> str:
    """The backend ``model.scan=setting`` runs on ``device`` ("cpu" or "cuda"); builds the C
    kernel on first use. Raises SpecError for an unknown choice and KernelUnavailable for a
    choice this machine cannot run. ``build`` False (a preview: `greenbench run --dry-run`)
    builds and loads nothing: the C kernel is taken to build where a C compiler is found."""
    check_scan(setting)
    if device == "cuda":
        if setting == "native":
            raise KernelUnavailable(
                "model.scan=native is a CPU kernel; on CUDA use auto, torch, triton or mamba-ssm"
            )
        if setting == "mamba-ssm" and not mamba_ssm_available():
            raise KernelUnavailable(
                "model.scan=mamba-ssm but mamba-ssm cannot be imported (its CUDA extension needs "
                "a build with nvcc); use auto, triton or torch"
            )
        if setting == "triton" and not triton_available():
            raise KernelUnavailable(_NO_TRITON)
        if setting == "auto":
            if mamba_ssm_available():
                return "mamba-ssm"
            return "triton" if triton_available() else "torch"
        return setting
    if setting == "mamba-ssm":
        raise KernelUnavailable("model.scan=mamba-ssm needs CUDA; on CPU use auto, native or torch")
    if setting == "triton":
        if not triton_interpreter_on():
            raise KernelUnavailable(
                "model.scan=triton is a CUDA kernel; on CPU use auto, native or torch"
            )
        if not triton_available():
            raise KernelUnavailable(_NO_TRITON)
        return "triton"
    if setting == "torch":
        return "torch"
    if not build:
        if find_compiler() is None and setting == "native":
            raise KernelUnavailable("model.scan=native but no C compiler is found to build it")
        return "native" if find_compiler() is not None else "torch"
    from greenbench.models.mamba.scan_native import native_kernel

    kernel = native_kernel(required=setting == "native")
    return "native" if kernel is not None else "torch"
