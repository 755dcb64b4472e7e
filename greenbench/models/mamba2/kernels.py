"""Which SSD scan a Mamba-2 run uses (the ``model.scan`` setting, resolved before the run), and
the calls into the GPU libraries that offer one.

Choices: ``torch`` (greenbench's chunked SSD, `greenbench.models.mamba2.ssd`, any device),
``fla`` (fla-core's Triton ``chunk_simple_gla``, CUDA), ``mamba-ssm`` (mamba-ssm's Triton
``mamba_chunk_scan_combined``, CUDA) and ``auto``: on CUDA mamba-ssm, else fla, else torch,
whichever imports first and whose library declares nothing broken on this GPU (fla-core declares
its gated backward wrong on Hopper with some Triton releases: `declared_broken`); on CPU torch.
``native`` and ``triton`` (Mamba-1's own kernels) are refused. The resolved name is part of the
run's identity (`ModelCard.kernels_used`), so runs on different kernels are never pooled.

Both libraries are imported only when a CUDA device asks for them, never at module import: fla-core
asks Triton for a GPU driver as it imports, which fails on a CPU-only machine, and mamba-ssm's
package imports its compiled CUDA extension even for the Triton SSD kernels (a source install
built without nvcc cannot be imported at all).

Every backend takes the same arguments as `ssd_scan`: ``x`` (batch, T, H, P), ``dt`` (batch, T,
H) after softplus, ``A`` (H,) negative, ``B``, ``C`` (batch, T, G, N); and returns ``y``
(batch, T, H, P) without the D skip. Each also takes an ``initial_state`` and, with
``return_final_state``, returns ``(y, final state)`` too, states (batch, H, P, N): both
libraries take and give states (mamba-ssm ``initial_states`` / ``return_final_states``, fla
``initial_state`` / ``output_final_state``, transposed) and differentiate them; the context-
parallel mixer (`greenbench.models.mamba2.context_parallel`) uses the final state. The library
calls:

* mamba-ssm: ``mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size)`` is this very recurrence
  in this very layout (its D, z, dt_bias and softplus options are left to the mixer, so all
  backends share one interface).
* fla: ``chunk_simple_gla(q, k, v, g, scale)`` computes, per head, the gated linear attention
  ``S_t = exp(g_t) S_{t-1} + k_tᵀ v_t`` (K × V) and ``o_t = scale · q_t S_t``. Mamba-2's
  ``S_t = exp(dt_t A) S_{t-1} + (dt_t x_t) B_tᵀ`` (P × N) and ``y_t = S_t C_t`` is the same
  recurrence transposed, with

  - ``q = C`` and ``k = B`` (K = N, the state size), each group's vector repeated to its heads
    (fla has no groups);
  - ``v = dt · x`` (V = P, the head dim): the step size scales the input, as in SSD's ``X·dt``;
  - ``g = dt · A``, the log of the per-head scalar decay (fla's "simple" gate: one per head
    and token, natural log; fla rescales to log2 itself);
  - ``scale = 1`` (fla's default is 1/sqrt(K), an attention convention SSD does not have).

  fla tiles the sequence in its own chunks of 64 whatever the preset's chunk length: the result
  is the same function, only the kernel's blocking differs.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from greenbench.errors import KernelUnavailable
from greenbench.models.mamba2.card import CHOICES, check_scan

if TYPE_CHECKING:  # resolving a scan needs no torch (`resolve_scan`); running one does
    import torch

__all__ = [
    "CHOICES",
    "declared_broken",
    "fla_scan",
    "importable",
    "mamba_ssm_scan",
    "resolve_scan",
    "scan_function",
    "usable",
]

#: backend -> the module whose import proves it usable on this machine
MODULES = {"mamba-ssm": "mamba_ssm.ops.triton.ssd_combined", "fla": "fla.ops.simple_gla"}

ScanFunction = Callable[..., "torch.Tensor"]


def importable(backend: str) -> bool:
    """Whether ``backend``'s library imports here. Call only for a CUDA run: fla's import fails
    without a GPU driver, and a broken CUDA extension fails in more ways than ImportError."""
    try:
        importlib.import_module(MODULES[backend])
    except Exception:
        return False
    return True


def declared_broken(backend: str) -> str | None:
    """Why ``backend``'s library, though it imports, says it computes wrong results on this GPU
    and Triton, or None. fla-core declares such a range itself (its ``fla.utils`` flags: gated
    backward kernels on Hopper GPUs with Triton >= 3.4.0 and < 3.7.1) and raises at the first
    backward; reading its own flags refuses the kernel before the run instead. A version of
    fla-core without those flags declares nothing. Call only where `importable` is true."""
    if backend != "fla":
        return None
    flags = importlib.import_module("fla.utils")
    hopper = getattr(flags, "IS_NVIDIA_HOPPER", False)
    bad_triton = getattr(flags, "TRITON_ABOVE_3_4_0", False) and not getattr(
        flags, "TRITON_ABOVE_3_7_1", True
    )
    if not (hopper and bad_triton):
        return None
    import triton

    return (
        "fla-core declares its gated backward wrong on Hopper GPUs with Triton "
        f"{triton.__version__} (>= 3.4.0, < 3.7.1); upgrade Triton to >= 3.7.1"
    )


def usable(backend: str) -> bool:
    """Whether ``backend`` imports here and its library declares nothing broken on this GPU."""
    return importable(backend) and declared_broken(backend) is None


def resolve_scan(setting: str, device: str, *, build: bool = True) -> str:
    """The backend ``model.scan=setting`` runs on ``device`` ("cpu" or "cuda"). Raises SpecError
    for a choice Mamba-2 does not offer and KernelUnavailable for one this machine cannot run.
    (``build``: Mamba-2 builds no kernel of its own; the argument is the family interface's,
    `greenbench.models.card.ModelCard.resolve_kernel`.)"""
    check_scan(setting)
    if device != "cuda":
        if setting in MODULES:
            raise KernelUnavailable(
                f"model.scan={setting} is a CUDA kernel; on {device} use auto or torch"
            )
        return "torch"
    if setting == "auto":
        return next((name for name in ("mamba-ssm", "fla") if usable(name)), "torch")
    if setting in MODULES and not importable(setting):
        package = "mamba-ssm (with its CUDA extension)" if setting == "mamba-ssm" else "fla-core"
        raise KernelUnavailable(
            f"model.scan={setting} but {MODULES[setting]} cannot be imported; install {package} "
            "or use auto or torch"
        )
    if setting in MODULES and (broken := declared_broken(setting)):
        raise KernelUnavailable(f"model.scan={setting}: {broken}; or use auto or torch")
    return setting


def scan_function(backend: str, device: str) -> ScanFunction:
    """The scan ``backend`` names (``auto`` resolved for ``device``), as a function with
    `ssd_scan`'s signature."""
    if backend == "auto":
        backend = _resolved_auto(device)
    if backend == "torch":
        from greenbench.models.mamba2.ssd import ssd_scan

        return ssd_scan
    if backend == "mamba-ssm":
        return mamba_ssm_scan
    if backend == "fla":
        return fla_scan
    raise ValueError(f"unknown Mamba-2 scan backend {backend!r}")


@functools.cache
def _resolved_auto(device: str) -> str:
    return resolve_scan("auto", device)


def mamba_ssm_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    *,
    chunk_size: int,
    initial_state: torch.Tensor | None = None,
    return_final_state: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """mamba-ssm's fused SSD (Triton, CUDA) on our arguments (module docstring); its
    ``initial_states`` and ``return_final_states`` take and give states in our (batch, H, P,
    N) layout, and its backward differentiates the final state."""
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    states = {}
    if initial_state is not None:
        states["initial_states"] = initial_state
    if return_final_state:
        states["return_final_states"] = True
    return mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, **states)


def fla_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    *,
    chunk_size: int,
    initial_state: torch.Tensor | None = None,
    return_final_state: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """fla-core's ``chunk_simple_gla`` (Triton, CUDA) on our arguments, mapped as the module
    docstring says; ``chunk_size`` is the preset's, fla tiles by its own 64. fla's state is
    the transpose of ours (K × V = N × P per head): ``initial_state`` and the final state are
    transposed on the way in and out."""
    del chunk_size
    import torch
    from fla.ops.simple_gla import chunk_simple_gla

    heads, groups = x.shape[2], B.shape[2]
    q = C.repeat_interleave(heads // groups, dim=2)
    k = B.repeat_interleave(heads // groups, dim=2)
    v = x * dt.unsqueeze(-1).to(x.dtype)
    decay = torch.promote_types(dt.dtype, torch.float32)  # the log decays in float32 at least
    g = dt.to(decay) * A.to(decay)
    states = {}
    if initial_state is not None:
        states["initial_state"] = initial_state.transpose(-1, -2).contiguous()
    if return_final_state:
        states["output_final_state"] = True
    out, final = chunk_simple_gla(q, k, v, g, scale=1.0, **states)
    return (out, final.transpose(-1, -2)) if return_final_state else out
