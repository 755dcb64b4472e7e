"""FSDP2's all-gather and reduce-scatter carried by ODC's shared memory, meeting as collectives do.

`SharedMemoryGroup` gives the ranks of one host the means ODC's transport uses
(`greenbench.strategies.odc.transport`): every rank maps one anonymous shared-memory file
(``memfd_create``) that its peers map too (the descriptor passed over a Unix socket,
``SCM_RIGHTS``), so moving bytes is a copy between processes. Unlike ODC's gets and pushes, every
call is a **collective**: it returns only once every rank of the group has entered it (a
*meeting*: each rank sends one message to every peer on its socket and waits for one from
each). So FSDP2 driven through `SharedMemoryAllGather` / `SharedMemoryReduceScatter` (its public
``set_custom_all_gather`` / ``set_custom_reduce_scatter`` hooks) keeps its engine, per-layer
collectives in lockstep, and changes only its transport: gloo over loopback TCP becomes ODC's
shared memory. That separates the two things ODC changes at once.

A call writes this rank's contribution into its own buffer, meets, then reads the peers'. The
buffer alternates between two halves from call to call: a rank writes a half again two calls
later, after a meeting every peer entered only once done reading that half, so one meeting per
call suffices. Every rank must make the same calls in the same order (as with any collective).
"""

from __future__ import annotations

import mmap
import os
import socket
import struct
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

_HELLO = struct.Struct("<i")
_TOKEN = b"m"


class SharedMemoryGroup:
    """``world`` ranks of one host, each with a shared buffer of ``capacity`` bytes per half.

    Args:
        rank, world: this rank and the group's size.
        capacity: the largest contribution one call writes (bytes).
        token: a name shared by the ranks of one run and no other (its sockets' prefix).
        connect: called once every rank listens, before connecting (a barrier across ranks).
    """

    def __init__(
        self,
        rank: int,
        world: int,
        capacity: int,
        token: str,
        connect: Callable[[], Any] | None = None,
    ) -> None:
        self.rank, self.world, self.capacity = rank, world, capacity
        self.calls = 0
        self._fd = os.memfd_create(f"greenbench-shm-collective-{rank}", os.MFD_CLOEXEC)
        os.ftruncate(self._fd, max(2 * capacity, 1))
        self._memory = self._map(self._fd, 2 * capacity)
        self._token = token
        self._peers: dict[int, torch.Tensor] = {rank: self._memory}
        self._conns: dict[int, socket.socket] = {}
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(self._address(rank))
        listener.listen(world)
        if connect is not None:
            connect()
        try:
            for peer in range(rank + 1, world):  # connect up, accept from below: no cycle
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                conn.connect(self._address(peer))
                conn.send(_HELLO.pack(rank))
                self._conns[peer] = conn
            for _ in range(rank):
                conn, _ = listener.accept()
                self._conns[_HELLO.unpack(conn.recv(_HELLO.size))[0]] = conn
            for conn in self._conns.values():
                socket.send_fds(conn, [_TOKEN], [self._fd])
            for peer, conn in self._conns.items():
                _, fds, _, _ = socket.recv_fds(conn, 1, 1)
                if not fds:
                    raise RuntimeError(f"rank {peer} sent no shared memory")
                try:
                    self._peers[peer] = self._map(fds[0], 2 * capacity)
                finally:
                    for fd in fds:
                        os.close(fd)
        finally:
            listener.close()

    @staticmethod
    def _map(fd: int, nbytes: int) -> torch.Tensor:
        if nbytes == 0:
            return torch.zeros(0, dtype=torch.uint8)
        return torch.frombuffer(mmap.mmap(fd, nbytes), dtype=torch.uint8, count=nbytes)

    def _address(self, rank: int) -> bytes:
        return f"\0greenbench-shm-collective-{self._token}-{rank}".encode()

    def _half(self, rank: int, nbytes: int) -> torch.Tensor:
        start = (self.calls % 2) * self.capacity
        return self._peers[rank][start : start + nbytes]

    def meet(self) -> None:
        """Return once every rank of the group has called `meet` as often as this one."""
        for conn in self._conns.values():
            conn.send(_TOKEN)
        for peer, conn in self._conns.items():
            if not conn.recv(1):
                raise RuntimeError(f"rank {peer} left the shared-memory group")

    def all_gather(self, output: torch.Tensor, input: torch.Tensor) -> None:
        """``output`` (``world × input``, flat) gets every rank's ``input`` in rank order."""
        n = input.numel() * input.element_size()
        self._check(n)
        self._half(self.rank, n).copy_(input.reshape(-1).view(torch.uint8))
        self.meet()
        out = output.reshape(-1).view(torch.uint8)
        for peer in range(self.world):
            out[peer * n : (peer + 1) * n].copy_(self._half(peer, n))
        self.calls += 1

    def reduce_scatter(self, output: torch.Tensor, input: torch.Tensor) -> None:
        """``output`` gets the sum over ranks of this rank's chunk of ``input`` (``world`` equal
        chunks, flat), added in rank order."""
        n = input.numel() * input.element_size()
        self._check(n)
        self._half(self.rank, n).copy_(input.reshape(-1).view(torch.uint8))
        self.meet()
        chunk = output.numel() * output.element_size()
        at = self.rank * chunk
        out = output.reshape(-1)
        for peer in range(self.world):
            part = self._half(peer, n)[at : at + chunk].view(output.dtype)
            if peer == 0:
                out.copy_(part)
            else:
                out.add_(part)
        self.calls += 1

    def _check(self, nbytes: int) -> None:
        if nbytes > self.capacity:
            raise RuntimeError(
                f"a collective of {nbytes} bytes exceeds the shared buffer's {self.capacity}"
            )

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def open_group(rank: int, world: int, capacity: int) -> SharedMemoryGroup:
    """A `SharedMemoryGroup` of the default process group's ranks (a token broadcast from rank
    0 names its sockets; a barrier before connecting)."""
    import secrets

    token = [secrets.token_hex(8) if rank == 0 else None]
    dist.broadcast_object_list(token, src=0)
    return SharedMemoryGroup(rank, world, capacity, str(token[0]), connect=dist.barrier)


def padded_group_bytes(groups: list[list[torch.nn.Parameter]], world: int) -> int:
    """The largest reduce-scatter input FSDP2 builds for ``groups`` (each a sharded module's own
    parameters), in float32 bytes: every parameter padded along dim 0 to a multiple of ``world``,
    one row of slack per parameter and rank."""
    largest = 0
    for params in groups:
        numel = 0
        for p in params:
            rows = p.shape[0] if p.dim() else 1
            rest = p.numel() // max(rows, 1) if p.dim() else 1
            numel += (-(-rows // world) + 1) * world * rest
        largest = max(largest, numel)
    return largest * 4


try:  # FSDP2's collective interfaces: public hooks, private classes (as strategies/fsdp.py)
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
        DefaultAllGather,
        DefaultReduceScatter,
    )
except ImportError:  # pragma: no cover - another torch layout
    DefaultAllGather = DefaultReduceScatter = None  # type: ignore[assignment,misc]


def fsdp_collectives(shm: SharedMemoryGroup) -> tuple[type, type]:
    """FSDP2 all-gather and reduce-scatter classes over ``shm`` (each made with no argument,
    as `greenbench.strategies.fsdp` records them), called by keyword as FSDP2 calls them.
    Reductions are sums (FSDP is told to sum)."""
    if DefaultAllGather is None:
        raise RuntimeError("this torch has no FSDP2 custom collectives to carry over shared memory")

    class SharedMemoryAllGather(DefaultAllGather):  # type: ignore[misc,valid-type]
        def __call__(
            self,
            output_tensor: torch.Tensor,
            input_tensor: torch.Tensor,
            group: Any = None,
            async_op: bool = False,
        ) -> None:  # type: ignore[override]
            shm.all_gather(output_tensor, input_tensor)

    class SharedMemoryReduceScatter(DefaultReduceScatter):  # type: ignore[misc,valid-type]
        def __call__(
            self,
            output_tensor: torch.Tensor,
            input_tensor: torch.Tensor,
            group: Any = None,
            op: Any = None,
            async_op: bool = False,
        ) -> None:  # type: ignore[override]
            shm.reduce_scatter(output_tensor, input_tensor)

    return SharedMemoryAllGather, SharedMemoryReduceScatter
