"""Communication records: every collective or point-to-point call a strategy makes.

A strategy wraps each call it issues in `CommRecorder.span` (or reports a time it measured
itself with `CommRecorder.add`), naming the mesh dimension or group it ran on, the operation
and its bytes. After a measured window the worker exchanges every rank's per-call seconds and
splits each collective into transfer and waiting: the last rank to arrive waited for no one, so
the shortest of the ranks' times is the transfer and the rest is time spent waiting for others
(`greenbench.rank.window.settle_calls`). This is where a data-parallel strategy's waiting comes
from: no strategy adds a barrier of its own to measure it, so DDP's waiting is in its gradient
all-reduce (and buffer broadcast), FSDP's in FSDP2's all-gathers and reduce-scatters. Where the
ranks issued different sequences of collectives, no call can be matched with its peers': their
seconds count as transfer and the window says its waiting is unknown
(`greenbench.rank.window.unsplit_note`), never a silent zero. Calls marked ``waits`` (pipeline
receives, where a stage idles for its neighbour; the barriers of a strategy whose algorithm has
them, as ODC's) are waiting through and through. The records are stored summed per (dimension,
operation), and their totals are the run's ``comm_s`` and ``wait_s``.

Timing: on CPU, gloo's collectives run synchronously, so a call's wall-clock duration is the time
the rank was blocked in it. On CUDA, NCCL runs asynchronously on its own streams, so a span
records CUDA events on the current stream around the call, and an asynchronous call's end is
recorded when its work completes (`CommRecorder.finish_async`); events are read after the
window, when the device has been synchronised. Bytes: what the operation moves per rank — an
all-gather's gathered output, a reduce-scatter's full input, an all-reduce's tensor, a
point-to-point message.

Why our own: torch's profiler can time collectives, but it costs far more than a clock read per
call and its records do not say which mesh dimension a call ran on.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

#: one-sided or point-to-point operations: ranks issue them in their own numbers and order, so
#: the time in them is never split into transfer and waiting as a collective's is (waiting in a
#: point-to-point schedule is recorded as its own ``waits`` call); ``link_delay`` is the emulated
#: network time of a message between two nodes (SkipPipe's heterogeneous links)
POINT_TO_POINT_OPS = frozenset({"get", "push", "push_flush", "send", "recv", "link_delay"})


@dataclass(slots=True)
class Call:
    """One recorded call. ``seconds`` is known at once on CPU and after `resolve` on CUDA."""

    dim: str
    op: str
    nbytes: int
    seconds: float = 0.0
    waits: bool = False
    events: tuple[Any, Any] | None = None

    def resolve(self) -> None:
        if self.events is not None:
            start, end = self.events
            self.seconds = start.elapsed_time(end) / 1000.0  # ms
            self.events = None


@dataclass(slots=True)
class CommRecorder:
    """Collects this rank's calls in issue order; `take` hands them over and starts anew."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    calls: list[Call] = field(default_factory=list)

    @property
    def uses_events(self) -> bool:
        return self.device.type == "cuda"

    @contextlib.contextmanager
    def span(self, dim: str, op: str, nbytes: int, *, waits: bool = False) -> Iterator[Call]:
        """Time the call issued inside the block (synchronous on CPU; a CUDA event pair)."""
        call = Call(dim, op, int(nbytes), waits=waits)
        if self.uses_events:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            yield call
            if call.events is None:  # no finish_async inside the block: the call ends here
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                call.events = (start, end)
            else:  # finish_async inside the block: its completion event is the end
                call.events = (start, call.events[1])
        else:
            t0 = time.perf_counter()
            yield call
            call.seconds = time.perf_counter() - t0
        self.calls.append(call)

    def finish_async(self, call: Call, work: Any) -> Any:
        """For an asynchronous CUDA call: record the call's end when ``work`` completes (its
        future's callback runs on a stream that waits for the collective). Returns the future
        to chain on. On CPU the work is waited for here."""
        if not self.uses_events:
            work.wait()
            return work.get_future()
        end = torch.cuda.Event(enable_timing=True)
        # the start stays the span's (set already when the span closed before this call)
        call.events = (call.events[0] if call.events else None, end)

        def record(fut: Any) -> Any:
            end.record()
            return fut.value()

        return work.get_future().then(record)

    def add(self, dim: str, op: str, nbytes: int, seconds: float, *, waits: bool = False) -> None:
        """A call whose blocked time the strategy measured itself (e.g. DDP's bucket tail)."""
        self.calls.append(Call(dim, op, int(nbytes), float(seconds), waits))

    def mark(self) -> int:
        """A position in the record, for `since`."""
        return len(self.calls)

    def since(self, mark: int) -> list[Call]:
        return self.calls[mark:]

    def take(self) -> list[Call]:
        """Every call since the last take, with CUDA times resolved (synchronises the device)."""
        if self.uses_events and self.calls:
            torch.cuda.synchronize(self.device)
        out = list(self.calls)
        for call in out:
            call.resolve()
        self.calls.clear()
        return out


def tensor_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
