"""The cp group of context parallelism and its point-to-point messages.

`CPGroup` is the process group of the ``cp`` mesh dimension, this rank's place in it, and the
`CommRecorder` every message is recorded in. `exchange` issues messages to neighbouring ranks
together (``batch_isend_irecv``) and returns a `Pending` whose `Pending.wait` blocks on them,
recording each direction as one ``send`` / ``recv`` call with the messages' bytes: the time the
rank was blocked, after whatever compute it overlapped with the transfer. Used by ring attention
(`greenbench.models.transformer.context_parallel`) and the chunked Mamba scan
(`greenbench.models.mamba.context_parallel`); see `greenbench.distributed.context_parallel` for
the whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from greenbench.distributed.comm import CommRecorder, tensor_bytes

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup


@dataclass(frozen=True, slots=True)
class CPGroup:
    """The cp process group, this rank's index in it, and where its messages are recorded."""

    group: ProcessGroup
    comm: CommRecorder
    dim: str
    rank: int
    size: int

    @classmethod
    def of(cls, group: ProcessGroup, comm: CommRecorder, dim: str = "cp") -> CPGroup:
        return cls(group, comm, dim, dist.get_rank(group), dist.get_world_size(group))

    @property
    def next(self) -> int:
        """The group rank after this one on the ring."""
        return (self.rank + 1) % self.size

    @property
    def prev(self) -> int:
        """The group rank before this one on the ring."""
        return (self.rank - 1) % self.size


class Pending:
    """Messages in flight; `wait` blocks on them, recording sends and receives on the group's
    dimension (op ``send`` / ``recv``, bytes of the messages) — the time a rank was blocked."""

    def __init__(
        self, cpg: CPGroup, sends: list[dist.Work], recvs: list[dist.Work], sent: int, got: int
    ) -> None:
        self.cpg, self.sends, self.recvs, self.sent, self.got = cpg, sends, recvs, sent, got

    def wait(self) -> None:
        comm, dim = self.cpg.comm, self.cpg.dim
        if self.sends:
            with comm.span(dim, "send", self.sent):
                for work in self.sends:
                    work.wait()
        if self.recvs:
            with comm.span(dim, "recv", self.got):
                for work in self.recvs:
                    work.wait()


def exchange(
    cpg: CPGroup,
    sends: Sequence[tuple[torch.Tensor, int]] = (),
    recvs: Sequence[tuple[torch.Tensor, int]] = (),
) -> Pending:
    """Issue point-to-point sends and receives (tensor, group rank of the peer) together.

    Messages between one pair of ranks in one direction are matched in the order given, so
    both sides must list them in the same order. Sent tensors must stay unchanged and receive
    buffers unread until `Pending.wait`."""
    if not all(t.is_contiguous() for t, _ in recvs):
        raise ValueError("receive buffers must be contiguous")
    sends = [(t.contiguous(), p) for t, p in sends]
    ops = [dist.P2POp(dist.isend, t, group=cpg.group, group_peer=p) for t, p in sends]
    ops += [dist.P2POp(dist.irecv, t, group=cpg.group, group_peer=p) for t, p in recvs]
    works = dist.batch_isend_irecv(ops) if ops else []
    return Pending(
        cpg,
        works[: len(sends)],
        works[len(sends) :],
        sum(tensor_bytes(t) for t, _ in sends),
        sum(tensor_bytes(t) for t, _ in recvs),
    )
