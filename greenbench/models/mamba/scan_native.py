"""Build, cache and call the C selective-scan kernel (`scan_kernel.c`) for CPU training.

Why: mamba-ssm's selective-scan kernels exist only for CUDA, and on CPU the torch stepping scan
(`greenbench.models.scan`) pays ~20 operator dispatches per time step; the C kernel does the
same arithmetic in one call per direction (see `scan.py` for what is measured).

Why compile at first use rather than ship a wheel with a binary: the kernel is plain C with OpenMP,
built with ``-march=native`` for the machine it runs on (3x faster than the x86-64 baseline on the
reference machine), and compiles in about a second. The shared library goes to the machine cache
(`greenbench.hardware.machine.cache_dir`, honouring ``$GREENBENCH_CACHE_DIR``) under a name keyed
by a hash of the source, the flags, the compiler's version, the architecture and the CPU (model and
feature flags), so a changed kernel, compiler or host gets its own build. Builds go to a temporary
file renamed into place, so ranks starting together cannot load half a file.

Which path runs is a setting (``model.scan``: auto, native, torch), resolved before a run starts
(`greenbench.models.mamba.kernels.resolve_scan`) and stored as part of the run's identity:
``native`` requires the kernel (a failed build is then an error), ``auto`` uses it when it
builds and otherwise logs one warning and runs the torch scan.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from greenbench.errors import KernelUnavailable
from greenbench.hardware.machine import cache_dir, cpu_model
from greenbench.models.mamba.compiler import find_compiler

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("scan_kernel.c")

# -fno-trapping-math lets the clamps of the kernel's exp become vector selects;
# -ffp-contract=fast lets a*b+c become one FMA, which ISO C mode (-std=c11) otherwise forbids
# (30 % slower without). No -ffast-math: it would change results (NaN handling, the exp's
# rounding trick) and, linked into a shared library by GCC 12, switch the whole process to
# flush-denormals-to-zero.
_BASE_FLAGS = ("-O3", "-std=c11", "-fPIC", "-shared", "-fopenmp", "-fno-math-errno",
               "-fno-trapping-math", "-ffp-contract=fast")  # fmt: skip
_COMPILE_TIMEOUT_S = 120


def _native_flags() -> tuple[str, ...]:
    """Flags tuned to this CPU: all its vector instructions, full-width AVX-512 on x86."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        return ("-march=native", "-mprefer-vector-width=512")
    return ("-mcpu=native",) if platform.machine().lower() in ("aarch64", "arm64") else ()


def _cpu_features() -> str:
    """The CPU's feature flags (``-march=native`` depends on them, not only on the model)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _compiler_version(compiler: str) -> str:
    done = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout


def _build(compiler: str, flags: tuple[str, ...], directory: Path) -> Path:
    """Compile `SOURCE` with ``flags`` into ``directory`` unless already there; the path."""
    source = SOURCE.read_bytes()
    key = hashlib.sha256()
    for part in (
        source,
        " ".join(flags).encode(),
        _compiler_version(compiler).encode(),
        platform.machine().encode(),
        cpu_model().encode(),
        _cpu_features().encode(),
    ):
        key.update(part + b"\0")
    target = directory / f"scan_kernel-{key.hexdigest()[:20]}.so"
    if target.exists():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".scan_kernel-", suffix=".so.tmp", dir=directory)
    os.close(fd)
    try:
        done = subprocess.run(
            [compiler, *flags, str(SOURCE), "-o", tmp],
            capture_output=True,
            text=True,
            timeout=_COMPILE_TIMEOUT_S,
        )
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines() or ["?"]
            first_error = next((line for line in lines if "error" in line), lines[-1])
            raise RuntimeError(f"{Path(compiler).name} {' '.join(flags)} failed: {first_error}")
        os.chmod(tmp, 0o755)  # mkstemp's 0600 would keep it from other users of the cache
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


_P, _I = ctypes.c_void_p, ctypes.c_int64


def check_scan_inputs(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    *more: torch.Tensor,
    chunk_size: int,
    kernel: str,
    placed: Callable[[torch.Tensor], bool],
) -> None:
    """What a scan kernel reading raw memory needs of its inputs (ValueError if not): u, delta
    (T, batch, D), A (D, N), B, C (T, batch, N), chunk_size >= 1; every tensor (``more``
    too) contiguous float32 where ``placed`` says, else the error says what ``kernel`` takes."""
    if chunk_size < 1:
        raise ValueError(f"selective scan: chunk_size must be >= 1, got {chunk_size}")
    if u.dim() != 3 or A.dim() != 2:
        shapes = f"{tuple(u.shape)}, {tuple(A.shape)}"
        raise ValueError(f"selective scan: u must be (T, batch, D), A (D, N); got {shapes}")
    seq_len, batch, D = u.shape
    N = A.shape[1]
    expected = {"delta": u.shape, "A": (D, N), "B": (seq_len, batch, N), "C": (seq_len, batch, N)}
    given = {"delta": delta, "A": A, "B": B, "C": C}
    for name, shape in expected.items():
        if tuple(given[name].shape) != tuple(shape):
            got = tuple(given[name].shape)
            raise ValueError(f"selective scan: {name} must be {tuple(shape)}, got {got}")
    for x in (u, delta, A, B, C, *more):
        if x.dtype != torch.float32 or not placed(x) or not x.is_contiguous():
            raise ValueError(f"selective scan: {kernel}, got {x.dtype} on {x.device}")


def _check_inputs(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    *more: torch.Tensor,
    chunk_size: int,
) -> None:
    """The kernel reads raw memory: refuse what would make it read out of bounds."""
    check_scan_inputs(
        u, delta, A, B, C, *more, chunk_size=chunk_size,
        kernel="the native kernel takes contiguous float32 CPU tensors",
        placed=lambda x: x.device.type == "cpu",
    )  # fmt: skip


def _raise_for(status: int) -> None:
    if status == -2:
        raise ValueError("selective scan: chunk_size must be >= 1")
    if status != 0:
        raise MemoryError("native selective scan: out of memory for its work buffers")


@dataclass(frozen=True)
class NativeKernel:
    """The loaded kernel library and where it came from."""

    library: ctypes.CDLL
    path: Path
    flags: tuple[str, ...]

    def __post_init__(self) -> None:
        self.library.gb_scan_forward.argtypes = [_P] * 7 + [_I] * 5 + [ctypes.c_int]
        self.library.gb_scan_forward.restype = ctypes.c_int
        self.library.gb_scan_backward.argtypes = [_P] * 12 + [_I] * 5 + [ctypes.c_int]
        self.library.gb_scan_backward.restype = ctypes.c_int

    def forward(
        self,
        u: torch.Tensor,
        delta: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        chunk_size: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``y`` (T, batch, D) and the state before every chunk, (chunks, batch, N, D), as
        `greenbench.models.scan._scan_states` returns them. Inputs: contiguous float32 CPU."""
        _check_inputs(u, delta, A, B, C, chunk_size=chunk_size)
        seq_len, batch, D = u.shape
        N = A.shape[1]
        A_t = A.t().contiguous()
        y = torch.empty_like(u)
        starts = u.new_empty((seq_len + chunk_size - 1) // chunk_size, batch, N, D)
        status = self.library.gb_scan_forward(
            u.data_ptr(), delta.data_ptr(), A_t.data_ptr(), B.data_ptr(), C.data_ptr(),
            y.data_ptr(), starts.data_ptr(), seq_len, batch, D, N, chunk_size,
            torch.get_num_threads(),
        )  # fmt: skip
        _raise_for(status)
        return y, starts

    def backward(
        self,
        u: torch.Tensor,
        delta: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        starts: torch.Tensor,
        gy: torch.Tensor,
        chunk_size: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Gradients of ``y`` for upstream ``gy``: (du, ddelta, dA, dB, dC)."""
        gy = gy.contiguous()
        _check_inputs(u, delta, A, B, C, starts, gy, chunk_size=chunk_size)
        seq_len, batch, D = u.shape
        N = A.shape[1]
        n_chunks = (seq_len + chunk_size - 1) // chunk_size
        if gy.shape != u.shape or starts.shape != (n_chunks, batch, N, D):
            got = f"gy {tuple(gy.shape)}, starts {tuple(starts.shape)}"
            raise ValueError(f"selective scan backward: shapes do not match the inputs: {got}")
        A_t = A.t().contiguous()
        gu, gdelta = torch.empty_like(u), torch.empty_like(u)
        gA, gB, gC = torch.empty_like(A), torch.empty_like(B), torch.empty_like(C)
        status = self.library.gb_scan_backward(
            u.data_ptr(), delta.data_ptr(), A_t.data_ptr(), B.data_ptr(), C.data_ptr(),
            starts.data_ptr(), gy.data_ptr(), gu.data_ptr(), gdelta.data_ptr(), gA.data_ptr(),
            gB.data_ptr(), gC.data_ptr(), seq_len, batch, D, N, chunk_size,
            torch.get_num_threads(),
        )  # fmt: skip
        _raise_for(status)
        return gu, gdelta, gA, gB, gC


@functools.cache
def _load(compiler: str | None, directory: str) -> NativeKernel | str:
    """Build (if needed) and load the kernel; on failure the reason, as a string. Tried with
    this CPU's flags first, then portable ones. Cached per compiler and cache directory."""
    if compiler is None:
        return "no C compiler found (looked for sysconfig CC, cc, gcc)"
    reasons = []
    native = _native_flags()
    for flags in dict.fromkeys([_BASE_FLAGS + native, _BASE_FLAGS]):  # distinct, in order
        try:
            path = _build(compiler, flags, Path(directory))
            return NativeKernel(ctypes.CDLL(str(path)), path, flags)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            reasons.append(f"{type(exc).__name__}: {exc}")
    return "; ".join(dict.fromkeys(reasons))


_warned: set[tuple[str | None, str]] = set()  # (compiler, cache directory) already warned about


def native_kernel(*, required: bool = False) -> NativeKernel | None:
    """The kernel for CPU float32 scans (built at first use), or None for the torch scan.

    When the kernel cannot be built or loaded: with ``required`` (``model.scan=native``) a
    `KernelUnavailable` error saying why; otherwise one logged warning per compiler and cache
    directory, and None.
    """
    key = (find_compiler(), str(cache_dir() / "native"))
    loaded = _load(*key)
    if isinstance(loaded, NativeKernel):
        return loaded
    if required:
        raise KernelUnavailable(
            f"model.scan=native but the native selective scan is unavailable: {loaded}"
        )
    if key not in _warned:
        _warned.add(key)
        log.warning("native selective scan unavailable, using the torch scan: %s", loaded)
    return None
