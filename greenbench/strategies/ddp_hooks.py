"""Which communication hook DDP registers (``ddp.compress``), and how its reductions are recorded.

DDP takes one communication hook, so the recording wraps the reduction rather than sitting
beside it:

- ``none``: DDP's own arithmetic, as stock DDP without a hook (divide the bucket by the world
  size, all-reduce with a sum);
- ``bf16`` / ``fp16``: torch's ``bf16_compress_hook`` / ``fp16_compress_hook`` (the bucket cast
  to half precision, divided, all-reduced, cast back);
- ``powersgd``: torch's ``powerSGD_hook`` with a `PowerSGDState` of rank ``ddp.powersgd_rank``,
  ``start_powerSGD_iter = ddp.powersgd_start``, error feedback and warm start (the paper's
  method: each n×m gradient matrix M reduced as P = M Q (n×r) and Q = Mᵀ P (m×r), what
  compression loses carried into the next step). Its ``min_compression_rate`` is
  `MIN_COMPRESSION_RATE`: a matrix is compressed where its factors hold under half its
  elements, torch's default; the tiny Transformer's smallest matrix (256×256) holds 128 times
  its factors' elements at r = 1 and 32 times at r = 4, so every one of its matrices is.

Bytes: what was actually reduced, never the uncompressed size. Each hook runs as torch wrote it,
but as a copy whose ``torch.distributed`` is `CountedDist` (`with_dist`): every ``all_reduce``
it issues adds its tensor's bytes to the step's (`Buckets.add`, under a lock: PowerSGD issues
its P and Q all-reduces from future callbacks, on the process group's threads) and goes on to
torch's. So a bf16 or fp16 bucket counts ``numel × 2``; a PowerSGD bucket counts P and Q of its
compressed matrices plus the tensors it reduces whole (vectors, matrices not worth compressing),
and the whole bucket in the steps before ``start_powerSGD_iter``, when it reduces plainly.
torch's modules are not touched: only the hook copies read the counting ``dist``, so another
user of torch's hooks in the process (local SGD's) counts nothing here.

Time: as `greenbench.strategies.ddp` records it, the tail from the moment the step's last bucket
became ready until every bucket's reduction completed: on CPU by the wall clock
(`Buckets.last_ready`; the schedule reads the clock when backward returns), on CUDA by an event
pair around the last bucket's reduction, its end when the hook's future completes. On a
host-side process group (gloo), PowerSGD's compressed buckets are reduced one after another
(`one_bucket_at_a_time`: otherwise the ranks' collectives can come in different orders), and
the time backward stands waiting for them counts in the tail.

Emulated link (`greenbench.distributed.link`): each all-reduce a hook issues is made to last
``link.all_reduce_s(its bytes, world)`` longer, spent after the real collective completes
(chained on its future, `DelayedWork`), so inside the recorded time and smaller for compressed
bytes. PowerSGD's three all-reduces per bucket (the whole tensors, P, then Q) each pay the
link's latency, as the three round trips they are would on a real link.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel

from greenbench.distributed.comm import Call, CommRecorder, tensor_bytes
from greenbench.distributed.link import EmulatedLink
from greenbench.strategies.ddp_settings import MIN_COMPRESSION_RATE, DDPSettings

DIM = "dp_replicate"

#: a DDP communication hook: (state, bucket) -> a future of the reduced bucket
Hook = Callable[[Any, Any], Any]


@dataclass(slots=True)
class Buckets:
    """The step's buckets: how many, their reduced bytes so far, (CPU) when the last became
    ready and how long backward stood waiting for a bucket's reduction before it
    (`one_bucket_at_a_time`), and (CUDA) the step's recorded call, whose bytes follow the
    count."""

    last_ready: float = 0.0
    nbytes: int = 0
    count: int = 0
    stalled: float = 0.0
    call: Call | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, nbytes: int) -> None:
        with self.lock:
            self.nbytes += nbytes
            if self.call is not None:
                self.call.nbytes = self.nbytes

    def track(self, call: Call | None) -> None:
        """Keep ``call``'s bytes equal to the step's (None: a new step, no call yet)."""
        with self.lock:
            self.call = call
            if call is not None:
                call.nbytes = self.nbytes


class Overlay:
    """``base`` with some attributes replaced: what a hook copy reads as a module."""

    def __init__(self, base: Any, **overrides: Any) -> None:
        self._base = base
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)


class CountedDist(Overlay):
    """``torch.distributed`` for a hook copy: ``all_reduce`` counts its tensor's bytes into the
    step's and, over an emulated link, completes that much later; the rest is torch's."""

    def __init__(self, buckets: Buckets, link: EmulatedLink, world: int) -> None:
        super().__init__(dist)
        self.buckets, self._link, self._world = buckets, link, world

    def all_reduce(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        nbytes = tensor_bytes(tensor)
        self.buckets.add(nbytes)
        work = dist.all_reduce(tensor, *args, **kwargs)
        seconds = self._link.all_reduce_s(nbytes, self._world)
        if seconds <= 0:
            return work
        if work is None:  # a synchronous all-reduce: it has completed
            self._link.delay(seconds)
            return None
        return DelayedWork(work, self._link, seconds)


class DelayedWork:
    """An asynchronous collective that completes ``seconds`` after the real one (the link's
    time, spent in the future's callback, where the process group completes it)."""

    def __init__(self, work: Any, link: EmulatedLink, seconds: float) -> None:
        self._work, self._link, self._seconds = work, link, seconds
        self._future: Any = None

    def get_future(self) -> Any:
        if self._future is None:
            link, seconds = self._link, self._seconds

            def after_link(fut: Any) -> Any:
                link.delay(seconds)
                return fut.value()

            self._future = self._work.get_future().then(after_link)
        return self._future

    def wait(self, *args: Any, **kwargs: Any) -> bool:
        self.get_future().wait()
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def with_dist(fn: Callable[..., Any], counted: CountedDist, **names: Any) -> Callable[..., Any]:
    """A copy of torch's hook function ``fn`` that reads ``dist`` as ``counted`` (and the other
    module-level ``names`` as given); its nested callbacks share the copy's globals, so the
    all-reduces they issue are counted too. Refuses, rather than counting nothing, a torch whose
    function no longer reads those names."""
    scope = {"dist": counted, **names}
    missing = sorted(set(scope) - set(fn.__globals__))
    if missing:
        raise RuntimeError(
            f"torch's {fn.__module__}.{fn.__name__} reads no {', '.join(missing)}: "
            "its reductions could not be counted"
        )
    copy = types.FunctionType(
        fn.__code__, {**fn.__globals__, **scope}, fn.__name__, fn.__defaults__, fn.__closure__
    )
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


def plain_hook(counted: CountedDist, group: Any, world: int) -> Hook:
    """DDP's default arithmetic: the bucket divided by the world size, all-reduced with a sum."""

    # unannotated: DDP checks a hook's annotations against the classes themselves,
    # which postponed (string) annotations would fail
    def allreduce(state, bucket):  # type: ignore[no-untyped-def]
        buffer = bucket.buffer().div_(world)
        work = counted.all_reduce(buffer, group=group, async_op=True)
        return work.get_future().then(lambda fut: fut.value()[0])

    return allreduce


def powersgd_state(settings: DDPSettings, group: Any) -> powersgd.PowerSGDState:
    """PowerSGD's state for ``ddp.powersgd_rank`` and ``ddp.powersgd_start`` (error feedback
    and warm start on, `MIN_COMPRESSION_RATE`)."""
    return powersgd.PowerSGDState(
        process_group=group,
        matrix_approximation_rank=settings.powersgd_rank,
        start_powerSGD_iter=settings.powersgd_start,
        min_compression_rate=MIN_COMPRESSION_RATE,
        use_error_feedback=True,
        warm_start=True,
    )


def one_bucket_at_a_time(hook: Hook, buckets: Buckets) -> Hook:
    """PowerSGD's ``hook`` with each compressed bucket's reduction begun only once the previous
    bucket's has completed (host-side process groups: gloo).

    A compressed bucket issues its P and Q all-reduces from its futures' callbacks, which gloo
    runs on its own threads as the previous all-reduce completes; with several buckets in
    flight, one rank's bucket 1 can issue its first all-reduce before bucket 0's P while
    another's does so after, and the ranks' collectives no longer match (gloo aborts: "Received
    data size doesn't match expected size"; torch tests PowerSGD on NCCL only, where the
    callbacks run as each all-reduce is issued). Waiting here, on backward's thread, keeps
    every rank's order the same; it costs a compressed step the overlap of one bucket's
    reduction with the backward computation of the next (nothing with one bucket). The time
    backward stood waiting counts as communication: `recorded` adds it to the step's tail."""
    previous: Any = None

    def ordered(state, bucket):  # type: ignore[no-untyped-def]
        nonlocal previous
        if previous is not None and state.iter >= state.start_powerSGD_iter:
            start = time.perf_counter()
            previous.wait()
            buckets.stalled += time.perf_counter() - start
        previous = hook(state, bucket)
        return previous

    return ordered


def compression_hook(
    settings: DDPSettings, counted: CountedDist, group: Any, world: int, *, cuda: bool = False
) -> tuple[Any, Hook]:
    """The hook of ``ddp.compress`` and its state, its all-reduces counted by ``counted``."""
    if settings.compress in ("bf16", "fp16"):
        torch_hook = getattr(default_hooks, f"{settings.compress}_compress_hook")
        compress = with_dist(default_hooks._compress_hook, counted)
        return group, with_dist(torch_hook, counted, _compress_hook=compress)
    if settings.compress == "powersgd":
        # before start_powerSGD_iter it reduces plainly, through default_hooks._allreduce_fut
        plain_fut = with_dist(default_hooks._allreduce_fut, counted)
        plain = Overlay(default_hooks, _allreduce_fut=plain_fut)
        hook = with_dist(powersgd.powerSGD_hook, counted, default=plain)
        ordered = hook if cuda else one_bucket_at_a_time(hook, counted.buckets)
        return powersgd_state(settings, group), ordered
    return None, plain_hook(counted, group, world)


def recorded(hook: Hook, buckets: Buckets, comm: CommRecorder, cuda: bool) -> Hook:
    """``hook`` with the step's tail recorded: on CPU the moment each bucket became ready (the
    schedule times the tail from the last), made earlier by the time backward already stood
    waiting for earlier buckets' reductions; on CUDA an event pair around the last bucket's
    reduction, the step's call."""

    def recorded_reduction(state, bucket):  # type: ignore[no-untyped-def]
        if bucket.index() == 0:  # the step's first bucket (DDP reduces them in order)
            buckets.count, buckets.stalled = 0, 0.0
            buckets.track(None)
        buckets.count += 1
        if not cuda:  # the tail is timed when backward returns (DDPSchedule.microbatch)
            buckets.last_ready = time.perf_counter() - buckets.stalled
            return hook(state, bucket)
        if not bucket.is_last():
            return hook(state, bucket)
        # the tail: from here until this bucket's reduction completes
        with comm.span(DIM, "all_reduce", buckets.nbytes) as call:
            buckets.track(call)
            future = hook(state, bucket)
        return comm.finish_async(call, Issued(future))

    return recorded_reduction


class Issued:
    """A hook's future as `CommRecorder.finish_async` takes a collective's work."""

    def __init__(self, future: Any) -> None:
        self._future = future

    def get_future(self) -> Any:
        return self._future

    def wait(self) -> bool:
        self._future.wait()
        return True


def register_comm_hook(
    ddp: DistributedDataParallel,
    settings: DDPSettings,
    *,
    link: EmulatedLink,
    comm: CommRecorder,
    buckets: Buckets,
    group: Any,
    world: int,
) -> Any:
    """Register the run's hook (``ddp.compress``), recorded and counted, on ``ddp``. Returns
    the hook's state: PowerSGD's `PowerSGDState`, the process group for bf16/fp16, None for
    the plain all-reduce."""
    cuda = comm.uses_events
    counted = CountedDist(buckets, link, world)
    state, hook = compression_hook(settings, counted, group, world, cuda=cuda)
    ddp.register_comm_hook(state, recorded(hook, buckets, comm, cuda))
    return state
