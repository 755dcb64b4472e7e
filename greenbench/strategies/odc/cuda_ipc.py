"""ODC between the GPUs of one node: shards and mailboxes in device memory shared by CUDA IPC.

`CudaIpcTransport` is `SharedMemoryTransport` with its memory on the GPU. Each rank allocates one
device tensor holding its parameter shards and one mailbox of ``SLOTS`` slots per sender (the
same layout); at setup the ranks exchange, once, its CUDA IPC handle (torch's
``reduce_tensor``, all-gathered with ``all_gather_object``) and every rank maps every peer's
tensor (``rebuild_cuda_tensor``). So:

* a **get** is a device-to-device copy out of the owner's mapped shards, on the caller's
  current stream, with nothing asked of the owner (one-sided);
* a **push** copies the slice into a free slot of the sender's mailbox in the owner's memory, on
  the sender's **side stream**, records that slot's **IPC event** after the copy, and tells the
  owner on the same Unix socket as the shared-memory transport (unit, slot, elements); the
  owner's **drain thread** makes its own stream wait for that event, adds the slot into the
  owner's fp32 accumulator (private to the owner: no other process writes it), waits for its
  stream to finish and acknowledges, which frees the slot;
* `flush` waits for every acknowledgement, as with shared memory.

Why it is race-free (each shared byte has one writer at a time, and each reader starts after
its writer's work is complete on the device, not only issued):

* **a mailbox slot** (sender → owner, slot s) is written only by the sender, between the
  acknowledgement of its previous use and the message for this one, and read only by the
  owner's drain, between that message and its acknowledgement. The message is sent after the
  copy's event is recorded, and the drain's stream waits for the event before reading (a CUDA
  stream wait on an IPC event waits for the record made before the call); the drain
  synchronises its stream before acknowledging, so the sender's next copy into the slot starts
  after the read has finished. A sender's side stream first waits for its compute stream, where
  the gradient was made, and the gradient is kept from reuse until the copy ends
  (``record_stream``);
* **an accumulator** is written by the drain (its stream) and by the owner's own pushes (the
  compute stream), both under one host lock: the drain's stream waits, under the lock, for an
  event recorded after the last own push, and the drain finishes its stream before releasing
  the lock, so the two streams never add at once. `zero_accumulators` zeroes them and
  synchronises the device before the minibatch's barrier, when no push can arrive;
* **a shard** is written only by its owner's optimizer, between the barrier after a minibatch's
  pushes and the barrier before the next minibatch (or an evaluation, or a read-back). ODC
  synchronises the device before each of these barriers, so the step is complete in device
  memory before any peer can copy from the shard, and no step starts while a peer may read it.

What a dead peer leaves: its connections close, and a rank waiting on it fails naming it, as
with shared memory. Its device memory stays until every process that mapped it exits (the CUDA
driver's rule for IPC memory).

Costs worth knowing: mapping a peer's memory on another GPU opens a context there in this
process (the CUDA runtime's IPC rule); a get or push between GPUs goes over the peer link
(NVLink, or PCIe) as one copy. Memory allocated with ``expandable_segments`` cannot be shared
this way in every torch release: it is left at torch's default here.

**This transport has never run on a GPU**: it was built where no GPU was, from torch's IPC code
(``torch/multiprocessing/reductions.py``) and CUDA's documented IPC rules; its tests are marked
``cuda`` and wait for one.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.distributed as dist
from torch.multiprocessing.reductions import rebuild_cuda_tensor, reduce_tensor

from greenbench.strategies.odc.transport import SLOTS, PeerLost, SharedMemoryTransport


class CudaIpcTransport(SharedMemoryTransport):
    """`Transport` between CUDA ranks of one node (see the module docstring).

    Every rank of ``group`` constructs it at the same time (it all-gathers over ``group``).

    Args:
        rank, world: this rank's index in ``group`` and the group's size.
        shard_numels: elements of one shard of each unit (the same on every rank).
        token: a name shared by the ranks of this group and no other (its sockets' prefix).
        device: this rank's GPU.
        group: the process group of the ranks sharing the parameters (None: the default one);
            used only at setup, to exchange the IPC handles.
    """

    def __init__(
        self,
        rank: int,
        world: int,
        shard_numels: list[int],
        token: str,
        device: torch.device,
        group: Any = None,
    ) -> None:
        if device.type != "cuda":
            raise ValueError(f"CudaIpcTransport shares CUDA memory: device {device} is not CUDA")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self._group = group
        self._side = torch.cuda.Stream(device)  # this rank's pushes into its owners' mailboxes
        self._drain_stream = torch.cuda.Stream(device)  # its drain's adds into its accumulators
        self._own_added = torch.cuda.Event()  # after this rank's last push to itself
        #: (owner, slot) → the event recorded after this rank's copy into that mailbox slot
        self._sent: dict[tuple[int, int], torch.cuda.Event] = {}
        #: (sender, slot) → that sender's event for its slot in this rank's mailbox, opened here
        self._arrived: dict[tuple[int, int], torch.cuda.Event] = {}
        self._mapped: dict[int, torch.Tensor] = {}
        self._opened = threading.Event()  # peers' memory and events are open: serve connections
        super().__init__(rank, world, shard_numels, token, connect=self._exchange)

    # ------------------------------------------------------------------ setup

    def _allocate(self, numel: int) -> torch.Tensor:
        """This rank's memory on its GPU (one allocation: one IPC handle covers all of it)."""
        return torch.zeros(max(numel, 1), device=self.device)[:numel]

    def _exchange(self) -> None:
        """All-gather every rank's memory handle and its push events' handles; map the peers'
        memory and open the events peers will record for this rank's mailboxes."""
        with torch.cuda.device(self.device):
            for owner in range(self.world):
                if owner != self.rank:
                    for slot in range(SLOTS):
                        event = torch.cuda.Event(interprocess=True)  # created on this device
                        self._sent[owner, slot] = event
            torch.cuda.synchronize(self.device)  # the zeroed memory is written before it is read
            # one share per peer: each carries its own reference count, which that peer's
            # mapping releases when it lets go (as torch's queues share a tensor twice)
            peers = [p for p in range(self.world) if p != self.rank]
            memory = {p: reduce_tensor(self._memory)[1] for p in peers}
            events = {key: event.ipc_handle() for key, event in self._sent.items()}
            mine = (memory, self.device.index, events)
            everyone: list[Any] = [None] * self.world
            dist.all_gather_object(everyone, mine, group=self._group)
            for peer, (shares, index, peer_events) in enumerate(everyone):
                if peer == self.rank:
                    continue
                self._mapped[peer] = rebuild_cuda_tensor(*shares[self.rank])
                for slot in range(SLOTS):
                    handle = peer_events[self.rank, slot]
                    self._arrived[peer, slot] = torch.cuda.Event.from_ipc_handle(
                        torch.device("cuda", index), handle
                    )
        self._opened.set()

    def _send_memory(self, conn: Any) -> None:
        """Nothing to pass on the connection (the handles were all-gathered): once this rank
        has opened its peers' events, say so, and the peer may push."""
        if not self._opened.wait(timeout=600.0):
            raise PeerLost(f"rank {self.rank} never finished opening its peers' memory")
        conn.send(b"m")

    def _receive_memory(self, conn: Any, peer: int) -> torch.Tensor:
        if not conn.recv(1):
            raise PeerLost(f"rank {peer} closed its connection during setup")
        return self._mapped[peer]

    # ------------------------------------------------------------------ pushes

    def _add_own(self, unit: int, grad: torch.Tensor) -> None:
        with self._lock:
            self._accs[unit].add_(grad)
            # the drain's next add waits for this one
            self._own_added.record(torch.cuda.current_stream(self.device))

    def _deliver(self, owner: int, slot: int, grad: torch.Tensor) -> None:
        """Copy on the side stream, after the compute stream that made ``grad``; the slot's
        event is recorded after the copy, before the owner is told (the caller sends)."""
        box = self._mailbox(self._peers[owner], self.rank, owner, slot)[: grad.numel()]
        self._side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._side):
            box.copy_(grad)
            self._sent[owner, slot].record(self._side)
        grad.record_stream(self._side)  # its memory is not reused before the copy has read it

    def _apply(self, sender: int, slot: int, unit: int, incoming: torch.Tensor) -> None:
        """On the drain's stream, after the sender's copy and this rank's own last push; done
        on the device before this returns (and the slot is acknowledged)."""
        stream = self._drain_stream
        with self._lock:
            stream.wait_event(self._arrived[sender, slot])
            stream.wait_event(self._own_added)
            with torch.cuda.stream(stream):
                self._accs[unit].add_(incoming)
            stream.synchronize()

    # ------------------------------------------------------------------ minibatches, closing

    def zero_accumulators(self) -> None:
        """Zeroed, and the device synchronised: ODC calls this after the optimizer step and
        before the minibatch's barrier, so the new shards are in memory before peers read."""
        super().zero_accumulators()
        torch.cuda.synchronize(self.device)

    def close(self) -> None:
        """Stop serving, then let go of the peers' memory and events (after this rank's
        copies into them have finished)."""
        torch.cuda.synchronize(self.device)
        super().close()
        self._peers.clear()
        self._mapped.clear()
        self._arrived.clear()
