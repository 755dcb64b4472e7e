"""What ODC needs of a transport (`Transport`), and the one for CPU ranks of one host: shared
memory and a drain thread.

`Transport` is what the ODC strategy needs: read an owner's parameter shard (`get`), hand a
gradient slice to its owner for accumulation (`push`), and know that every push this rank made
has been applied (`flush`). `SharedMemoryTransport` implements it within one host:

* every rank maps one anonymous shared-memory file (``memfd_create``) holding its parameter
  shards and one mailbox of ``SLOTS`` slots per sender; peers receive the file descriptor over a
  Unix socket (``SCM_RIGHTS``) and map it, so a **get** is a one-sided copy out of the owner's
  memory, with nothing asked of the owner;
* a **push** copies the slice into a free slot of the sender's mailbox in the owner's memory and
  sends a small message on the sender's socket to the owner; the owner's **drain thread** adds
  the slot into the owner's fp32 accumulator (the only writer of the accumulators besides the
  owner's own pushes, under one lock, so accumulation never races) and acknowledges, which frees
  the slot. A sender waits only when all its slots to that owner are still unread;
* `flush` waits for every acknowledgement, so after a barrier every push of the minibatch has
  been applied.

Nothing is left behind by a killed rank: the memory has no name (it is freed with the last
process that maps it) and the sockets live in the abstract namespace (gone with their process).
A peer that dies closes its sockets, and a rank waiting on it fails at once naming it.

Across hosts, and on CUDA, `greenbench.strategies.odc.p2p.P2PTransport` serves the same calls
with torch.distributed point-to-point messages to a server thread on each owner (chosen with
``odc.transport = p2p``); the shared memory here stays the default on one host's CPU ranks. GPUs
of one node share device memory the same way with
`greenbench.strategies.odc.cuda_ipc.CudaIpcTransport` (``odc.transport = cuda-ipc``), which keeps
this transport's mailboxes, connections and drain thread and changes only where the memory lives
and how a slot is known to be written and read (`_allocate`, `_deliver`, `_apply`).

Why our own: no kept library offers one-sided reads and owner-applied accumulation between
processes; torch.distributed.rpc (TensorPipe) is in maintenance and was avoided on purpose.
"""

from __future__ import annotations

import mmap
import os
import selectors
import socket
import struct
import threading
from abc import ABC, abstractmethod
from collections import deque

import torch

SLOTS = 2  # mailbox slots per (sender, owner): a sender may run two pushes ahead of a drain
_MSG = struct.Struct("<iii")  # unit, slot, numel
_HELLO = struct.Struct("<i")  # the connecting rank
_FLOAT = 4


class PeerLost(RuntimeError):
    """A peer closed its connection (it died or failed)."""


class Transport(ABC):
    """One rank's view of the other ranks' shards (see the module docstring)."""

    @abstractmethod
    def shard(self, unit: int) -> torch.Tensor:
        """This rank's parameter shard of ``unit`` (fp32, 1-D; the optimizer updates it)."""

    @abstractmethod
    def accumulator(self, unit: int) -> torch.Tensor:
        """This rank's fp32 gradient accumulator for its shard of ``unit``."""

    @abstractmethod
    def get(self, owner: int, unit: int, out: torch.Tensor) -> None:
        """Copy ``owner``'s shard of ``unit`` into ``out``."""

    @abstractmethod
    def push(self, owner: int, unit: int, grad: torch.Tensor) -> None:
        """Add ``grad`` (a shard-sized slice) into ``owner``'s accumulator for ``unit``."""

    @abstractmethod
    def flush(self) -> None:
        """Return once every push this rank made has been applied by its owner."""

    @abstractmethod
    def zero_accumulators(self) -> None:
        """Zero this rank's accumulators (before a minibatch, when no push can arrive)."""

    @abstractmethod
    def close(self) -> None:
        """Stop serving and release what the transport holds."""


class SharedMemoryTransport(Transport):
    """`Transport` within one host (see the module docstring).

    Args:
        rank, world: this rank and the number of ranks sharing the parameters.
        shard_numels: elements of one shard of each unit (the same on every rank).
        token: a name shared by the ranks of one run and no other (its sockets' prefix).
        connect: called once every rank listens, before connecting (a barrier across ranks).
    """

    def __init__(
        self,
        rank: int,
        world: int,
        shard_numels: list[int],
        token: str,
        connect: object = None,
    ) -> None:
        self.rank, self.world = rank, world
        self.offsets = [0]
        for n in shard_numels:
            self.offsets.append(self.offsets[-1] + n)
        self.slot_numel = max(shard_numels, default=0)
        self.params_numel = self.offsets[-1]
        total = self.params_numel + (world - 1) * SLOTS * self.slot_numel
        self._fd = -1
        self._memory = self._allocate(total)
        self._accs = [self._memory.new_zeros(n) for n in shard_numels]
        self._lock = threading.Lock()
        self._token = token
        self._peers: dict[int, torch.Tensor] = {}
        self._conns: dict[int, socket.socket] = {}
        self._free: dict[int, deque[int]] = {}
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._listener.bind(self._address(rank))
        self._listener.listen(world)
        self._server = threading.Thread(target=self._serve, name=f"odc-drain-{rank}", daemon=True)
        self._server.start()
        if callable(connect):
            connect()
        for peer in range(world):
            if peer != rank:
                self._connect(peer)

    # ------------------------------------------------------------------ layout of the memory

    def _allocate(self, numel: int) -> torch.Tensor:
        """This rank's memory (shards, then mailboxes): an anonymous shared-memory file."""
        self._fd = os.memfd_create(f"greenbench-odc-{self.rank}", os.MFD_CLOEXEC)
        os.ftruncate(self._fd, max(numel, 1) * _FLOAT)
        return self._map(self._fd, numel)

    @staticmethod
    def _map(fd: int, numel: int) -> torch.Tensor:
        if numel == 0:
            return torch.zeros(0)
        buffer = mmap.mmap(fd, numel * _FLOAT)
        return torch.frombuffer(buffer, dtype=torch.float32, count=numel)

    def _address(self, rank: int) -> bytes:
        return f"\0greenbench-odc-{self._token}-{rank}".encode()

    def _mailbox(self, memory: torch.Tensor, sender: int, owner: int, slot: int) -> torch.Tensor:
        """Slot ``slot`` of ``sender``'s mailbox inside ``owner``'s memory."""
        index = sender if sender < owner else sender - 1
        start = self.params_numel + (index * SLOTS + slot) * self.slot_numel
        return memory[start : start + self.slot_numel]

    def _shard_in(self, memory: torch.Tensor, unit: int) -> torch.Tensor:
        return memory[self.offsets[unit] : self.offsets[unit + 1]]

    # ------------------------------------------------------------------ the calls

    def shard(self, unit: int) -> torch.Tensor:
        return self._shard_in(self._memory, unit)

    def accumulator(self, unit: int) -> torch.Tensor:
        return self._accs[unit]

    def zero_accumulators(self) -> None:
        with self._lock:
            for acc in self._accs:
                acc.zero_()

    def get(self, owner: int, unit: int, out: torch.Tensor) -> None:
        memory = self._memory if owner == self.rank else self._peers[owner]
        out.copy_(self._shard_in(memory, unit))

    def push(self, owner: int, unit: int, grad: torch.Tensor) -> None:
        self._raise_if_failed()
        if owner == self.rank:
            self._add_own(unit, grad)
            return
        free = self._free[owner]
        while not free:
            free.append(self._await_ack(owner))
        slot = free.popleft()
        self._deliver(owner, slot, grad)
        try:
            self._conns[owner].send(_MSG.pack(unit, slot, grad.numel()))
        except OSError as exc:
            raise PeerLost(f"rank {owner} is gone (push failed: {exc})") from exc

    def _add_own(self, unit: int, grad: torch.Tensor) -> None:
        """A push to this rank itself: added at once, under the accumulators' lock."""
        with self._lock:
            self._accs[unit].add_(grad)

    def _deliver(self, owner: int, slot: int, grad: torch.Tensor) -> None:
        """Put ``grad`` into free slot ``slot`` of this rank's mailbox at ``owner``, before
        the owner is told: a plain copy into its shared memory."""
        self._mailbox(self._peers[owner], self.rank, owner, slot)[: grad.numel()].copy_(grad)

    def flush(self) -> None:
        for owner, free in self._free.items():
            while len(free) < SLOTS:
                free.append(self._await_ack(owner))
        self._raise_if_failed()

    def _await_ack(self, owner: int) -> int:
        try:
            data = self._conns[owner].recv(_HELLO.size)
        except OSError as exc:
            raise PeerLost(f"rank {owner} is gone (waiting for its drain: {exc})") from exc
        if not data:
            raise PeerLost(f"rank {owner} closed its connection while this rank pushed to it")
        return _HELLO.unpack(data)[0]

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise PeerLost(f"rank {self.rank}'s drain thread failed: {self._error}")

    # ------------------------------------------------------------------ connections

    def _connect(self, peer: int) -> None:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(self._address(peer))
        conn.send(_HELLO.pack(self.rank))
        self._peers[peer] = self._receive_memory(conn, peer)
        self._conns[peer] = conn
        self._free[peer] = deque(range(SLOTS))

    def _receive_memory(self, conn: socket.socket, peer: int) -> torch.Tensor:
        """``peer``'s memory, mapped here: its file descriptor arrives on the connection."""
        _, fds, _, _ = socket.recv_fds(conn, 1, 1)
        if not fds:
            raise PeerLost(f"rank {peer} sent no shared memory")
        try:
            return self._map(fds[0], self._memory.numel())
        finally:
            for fd in fds:
                os.close(fd)

    def _send_memory(self, conn: socket.socket) -> None:
        """Give a connecting peer this rank's memory (its file descriptor)."""
        socket.send_fds(conn, [b"m"], [self._fd])

    def _serve(self) -> None:
        """The drain thread: accept each peer, give it this rank's memory, then apply its
        pushes in arrival order and acknowledge each."""
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ, None)
        try:
            while not self._stop.is_set():
                for key, _ in selector.select(timeout=0.2):
                    if key.data is None:
                        self._accept(selector)
                    elif not self._drain(key.fileobj, key.data):  # type: ignore[arg-type]
                        selector.unregister(key.fileobj)
                        key.fileobj.close()  # type: ignore[union-attr]
        except BaseException as exc:  # surfaced to the training thread at its next push
            self._error = exc
        finally:
            selector.close()

    def _accept(self, selector: selectors.BaseSelector) -> None:
        conn, _ = self._listener.accept()
        sender = _HELLO.unpack(conn.recv(_HELLO.size))[0]
        self._send_memory(conn)
        selector.register(conn, selectors.EVENT_READ, sender)

    def _drain(self, conn: socket.socket, sender: int) -> bool:
        data = conn.recv(_MSG.size)
        if not data:
            return False  # the sender closed (finished or died): nothing more will arrive
        unit, slot, n = _MSG.unpack(data)
        self._apply(sender, slot, unit, self._mailbox(self._memory, sender, self.rank, slot)[:n])
        conn.send(_HELLO.pack(slot))
        return True

    def _apply(self, sender: int, slot: int, unit: int, incoming: torch.Tensor) -> None:
        """Add a mailbox slot into the accumulator; done when this returns (then it is
        acknowledged and the sender may reuse the slot)."""
        with self._lock:
            self._accs[unit].add_(incoming)

    def close(self) -> None:
        self._stop.set()
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        self._server.join(timeout=5.0)
        self._listener.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
