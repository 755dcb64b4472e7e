"""How ODC ranks reach each other's shards anywhere: point-to-point messages to a server thread.

`P2PTransport` serves the `Transport` calls with ``torch.distributed`` sends and receives on
process groups of its own (gloo for CPU tensors, NCCL for CUDA ones), so ranks on different
hosts, or on GPUs, can run ODC. Its owner-side work is done by **server threads**, one per peer:

* every ordered pair (requester → owner) has a **channel**, a two-rank process group used for
  nothing else. The owner's server thread for that requester keeps one receive posted on it for
  a fixed-size **header** (kind, unit, elements): the requester sends the header, and for a
  push the gradient slice right after it (a second message whose size the header gave);
* a **get** is a header; the server thread replies with the owner's shard on the same channel,
  and the requester receives it straight into its buffer;
* a **push** is a header and the slice; the server thread adds the slice into the owner's fp32
  accumulator under one lock (the only writer besides the owner's own pushes, as with shared
  memory) and acknowledges. A requester keeps at most ``SLOTS`` pushes per owner in flight (a
  slice stays referenced until its owner has it) and `flush` waits for every acknowledgement;
* `close` sends each owner a **stop** header (the poison that ends its server thread for this
  rank) and waits for its own server threads to be stopped by their peers in turn.

Why a channel per ordered pair: NCCL has no receive from any source, so a server must post one
receive per peer, and a receive left posted holds its communicator's stream: any other operation
queued behind it on that stream would wait for the peer's next request. On a channel the only
operation that can stay pending is the owner's header receive; every other one (the requester's
header and slice, the owner's reply, the requester's receive of it) is issued once the peer's
matching one is on its way. Requests and replies on a channel stay in order because a requester
issues each request's messages under a per-owner lock and the server answers in arrival order;
the compute thread's collectives use the default group, never these, so nothing races them.

The same code runs on gloo (tested here: two and four ranks, and two "nodes" of one machine)
and is written for NCCL (untested: no GPUs where it was built). On CUDA every tensor it sends or
receives stays on the device; only the three-number header is read by the host. The server
thread applies pushes on a stream of its own and waits for it before acknowledging, so an
acknowledgement means the accumulator holds the slice.

A peer that dies closes its connections; the rank waiting on it (for a reply, an
acknowledgement, or to send) fails with `PeerLost` naming it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from greenbench.strategies.odc.transport import PeerLost, Transport

SLOTS = 2  # pushes per (sender, owner) in flight: a sender may run two pushes ahead of its owner
_GET, _PUSH, _STOP = 0, 1, 2
_HEADER = 3  # kind, unit, elements
#: how long a posted receive may wait: a server idles through evaluation, checkpoints, the end
#: of a run, so its receive must not time out; a dead peer is found by its closed connection
IDLE_TIMEOUT = timedelta(hours=24)
#: how long `P2PTransport.close` waits for the peers to stop this rank's servers: they close
#: moments apart when a run ends; a rank failing alone must still exit (its servers are daemons)
CLOSE_WAIT_S = 60.0
_POLL_S = 1e-4  # how often a CUDA wait looks at its operation (NCCL's wait does not block)


class P2PTransport(Transport):
    """`Transport` over point-to-point messages (see the module docstring).

    Every rank of ``ranks`` constructs it at the same time (it creates process groups).

    Args:
        rank: this rank's index in ``ranks`` (its data-parallel rank).
        ranks: the global ranks sharing the parameters, by data-parallel rank.
        shard_numels: elements of one shard of each unit (the same on every rank).
        device: where shards, accumulators and messages live (CPU: gloo; CUDA: NCCL).
    """

    def __init__(
        self, rank: int, ranks: list[int], shard_numels: list[int], device: torch.device
    ) -> None:
        self.rank, self.world, self.ranks = rank, len(ranks), list(ranks)
        self.device = device
        self._cuda = device.type == "cuda"
        self._shards = [torch.zeros(n, device=device) for n in shard_numels]
        self._accs = [torch.zeros(n, device=device) for n in shard_numels]
        self._slot_numel = max(shard_numels, default=0)
        self._lock = threading.Lock()  # the accumulators' one writer at a time
        backend = "nccl" if self._cuda else "gloo"
        # channel (requester, owner): every rank creates every group, in the same order
        self._channels: dict[tuple[int, int], Any] = {}
        for requester in range(self.world):
            for owner in range(self.world):
                if requester != owner:
                    group = dist.new_group(
                        [self.ranks[requester], self.ranks[owner]],
                        timeout=IDLE_TIMEOUT,
                        backend=backend,
                    )
                    if rank in (requester, owner):
                        self._channels[requester, owner] = group
        self._owner_locks = {o: threading.Lock() for o in range(self.world) if o != rank}
        self._in_flight: dict[int, deque[tuple[Any, ...]]] = {
            o: deque() for o in range(self.world) if o != rank
        }
        self._error: BaseException | None = None
        self._closed = False
        self._servers = [
            threading.Thread(
                target=self._serve, args=(peer,), name=f"odc-p2p-{rank}-{peer}", daemon=True
            )
            for peer in range(self.world)
            if peer != rank
        ]
        for server in self._servers:
            server.start()

    # ------------------------------------------------------------------ the calls

    def shard(self, unit: int) -> torch.Tensor:
        return self._shards[unit]

    def accumulator(self, unit: int) -> torch.Tensor:
        return self._accs[unit]

    def zero_accumulators(self) -> None:
        with self._lock:
            for acc in self._accs:
                acc.zero_()

    def get(self, owner: int, unit: int, out: torch.Tensor) -> None:
        if owner == self.rank:
            out.copy_(self._shards[unit])
            return
        self._raise_if_failed()
        numel = out.numel()
        target = out if out.is_contiguous() else torch.empty_like(out)
        with self._owner_locks[owner]:
            sent = self._send(owner, self._header(_GET, unit, numel))
            reply = self._irecv(owner, target)
        self._wait(owner, sent, "sending a get")
        self._wait(owner, reply, "waiting for a shard")
        if target is not out:
            out.copy_(target)

    def push(self, owner: int, unit: int, grad: torch.Tensor) -> None:
        self._raise_if_failed()
        if owner == self.rank:
            with self._lock:
                self._accs[unit].add_(grad)
            return
        in_flight = self._in_flight[owner]
        while len(in_flight) >= SLOTS:
            self._settle(owner, in_flight.popleft())
        grad = grad.contiguous()
        ack = torch.zeros(1, dtype=torch.int64, device=self.device)
        with self._owner_locks[owner]:
            header = self._header(_PUSH, unit, grad.numel())
            works = (self._send(owner, header), self._send(owner, grad), self._irecv(owner, ack))
        in_flight.append((works, header, grad, ack))  # referenced until the owner has them

    def flush(self) -> None:
        for owner, in_flight in self._in_flight.items():
            while in_flight:
                self._settle(owner, in_flight.popleft())
        self._raise_if_failed()

    def close(self) -> None:
        """Stop each owner's server for this rank (after this rank's pushes), then wait for the
        peers to stop this rank's servers in turn; a dead peer's server has already ended."""
        if self._closed:
            return
        self._closed = True
        for owner in self._in_flight:
            try:
                while self._in_flight[owner]:
                    self._settle(owner, self._in_flight[owner].popleft())
                with self._owner_locks[owner]:
                    stop = self._send(owner, self._header(_STOP, 0, 0))
                self._wait(owner, stop, "stopping its server")
            except PeerLost:
                continue  # its server is gone with it
        for server in self._servers:
            server.join(timeout=CLOSE_WAIT_S)

    # ------------------------------------------------------------------ messages

    def _header(self, kind: int, unit: int, numel: int) -> torch.Tensor:
        return torch.tensor([kind, unit, numel], dtype=torch.int64, device=self.device)

    def _send(self, peer: int, tensor: torch.Tensor) -> Any:
        group = self._group(peer)
        try:
            return dist.isend(tensor, dst=self.ranks[peer], group=group)
        except RuntimeError as exc:
            raise PeerLost(f"rank {peer} is gone (sending to it failed: {exc})") from exc

    def _irecv(self, peer: int, tensor: torch.Tensor) -> Any:
        group = self._group(peer)
        try:
            return dist.irecv(tensor, src=self.ranks[peer], group=group)
        except RuntimeError as exc:
            raise PeerLost(f"rank {peer} is gone (receiving from it failed: {exc})") from exc

    def _group(self, peer: int) -> Any:
        """The channel between this rank and ``peer``: the one this rank requests on when called
        from the requesting side, the one it serves on from a server thread."""
        serving = threading.current_thread() in self._servers
        return self._channels[(peer, self.rank) if serving else (self.rank, peer)]

    def _wait(self, peer: int, work: Any, doing: str) -> None:
        """Wait for one operation with ``peer``; its failure names the peer."""
        try:
            if self._cuda:  # NCCL's wait only orders the current stream: poll the host side
                while not work.is_completed():
                    time.sleep(_POLL_S)
            work.wait()
        except RuntimeError as exc:
            raise PeerLost(f"rank {peer} is gone ({doing}: {exc})") from exc

    def _settle(self, owner: int, push: tuple[Any, ...]) -> None:
        """Wait for one push to ``owner`` to be sent, applied and acknowledged."""
        (header, slice_, ack), *_ = push
        self._wait(owner, header, "sending a push")
        self._wait(owner, slice_, "sending a gradient slice")
        self._wait(owner, ack, "waiting for its acknowledgement")

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise PeerLost(f"rank {self.rank}'s server thread failed: {self._error}")

    # ------------------------------------------------------------------ serving

    def _serve(self, peer: int) -> None:
        """The server thread for ``peer``: answer its gets, apply its pushes, until it stops
        (or dies: nothing more will come from it)."""
        stream = torch.cuda.Stream(self.device) if self._cuda else None
        incoming = torch.empty(self._slot_numel, device=self.device)
        ack = torch.ones(1, dtype=torch.int64, device=self.device)
        try:
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                while True:
                    header = torch.empty(_HEADER, dtype=torch.int64, device=self.device)
                    self._wait(peer, self._irecv(peer, header), "serving it")
                    kind, unit, numel = header.tolist()
                    if kind == _STOP:
                        return
                    if kind == _GET:
                        if stream is not None:  # the owner's step (default stream) comes first
                            stream.wait_stream(torch.cuda.default_stream(self.device))
                        reply = self._send(peer, self._shards[unit][:numel])
                        self._wait(peer, reply, "replying to it")
                        continue
                    part = incoming[:numel]
                    self._wait(peer, self._irecv(peer, part), "receiving its push")
                    with self._lock:
                        self._accs[unit].add_(part)
                        if stream is not None:
                            stream.synchronize()  # acknowledged means applied
                    self._wait(peer, self._send(peer, ack), "acknowledging its push")
        except PeerLost:
            return  # the peer died: the ranks that need it fail when they wait on it
        except BaseException as exc:  # surfaced to the training thread at its next call
            self._error = exc
