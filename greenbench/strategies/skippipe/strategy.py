"""SkipPipe's real execution: every node follows the iteration's plan, sending activations along
each microbatch's path and gradients back, on CPU ranks with gloo (or GPUs with NCCL).

Why our own: torch's pipelining schedules send every microbatch through every stage in one
fixed order; SkipPipe's microbatches take different paths, skip stages and share a stage's
replicas, which no kept library schedules.

A node (rank) holds one stage: stage 0's data nodes hold the embedding, the final norm and the
LM head (and compute the loss); stage ``s ≥ 1`` holds a run of the family's blocks
(`ModelFamily.pipeline_stage`). Every rank draws the whole minibatch (the data are a function of
the seed), so a stage node knows each microbatch's position ids without receiving them; only
data nodes count tokens. Microbatches are padded to one shape, ``(data.micro_batch,
data.seq_len)``, as in a pipeline, so every message has a known size.

Heterogeneity is emulated, as settings that are part of the run's identity:
``emulate.link_latency_ms`` and ``emulate.link_bandwidth_gbps`` delay every message between two
nodes (a receiver holds a message until ``sent + latency + bytes / bandwidth``; recorded as the
point-to-point op ``link_delay``, transfer time), and the nodes in ``emulate.slow_nodes`` compute
``emulate.slowdown`` times as long (the extra time spent busy on the device, as a slower device
would be, not asleep).

After the last task, the replicas of each stage sum their gradients (``all_reduce`` on the
dimension ``replica``), so they stay identical. The loss is divided by the minibatch's tokens,
so the gradients equal a full model's over the layers each microbatch visited.

A node that stops serving (``skippipe.fail_node`` from step ``skippipe.fail_step``) is routed
around: from that step, plans leave it out, and its process stays alive and idle (a gloo group
does not survive a dead member). This goes beyond the published code, which evaluates removed
stages only at inference.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from itertools import combinations
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from greenbench.distributed.comm import tensor_bytes
from greenbench.errors import SpecError
from greenbench.plan.skippipe.topology import PUBLISHED_STAGE_SIZES
from greenbench.strategies.base import StepTimes, Strategy, synchronize
from greenbench.strategies.skippipe.plan import Plan
from greenbench.strategies.skippipe.routes import make_plan, run_costs, stage_layers
from greenbench.vocabulary import Layout

if TYPE_CHECKING:
    from greenbench.data import DataPlan, StepBatch
    from greenbench.models import ModelBuilder

IGNORE = -100
DIM = "pp"


def parse_nodes(text: str) -> tuple[int, ...]:
    """``"1-2-1"`` → nodes per stage."""
    try:
        counts = tuple(int(p) for p in str(text).split("-") if p.strip())
    except ValueError:
        counts = ()
    if len(counts) < 2 or any(c < 1 for c in counts):
        raise SpecError(
            f"skippipe.stages={text!r} must list the nodes of each stage, data nodes first, "
            "at least two stages (e.g. '1-2-1')"
        )
    return counts


def validate_published(settings: Mapping[str, Any], counts: tuple[int, ...]) -> None:
    """A simulated run on ``skippipe.network = "gcp12"``: SkipPipe's published 20-node,
    6-stage experiment, so its stages and no failing node (the slow nodes may be any of its
    20)."""
    if counts != PUBLISHED_STAGE_SIZES:
        published = "-".join(str(c) for c in PUBLISHED_STAGE_SIZES)
        raise SpecError(
            f"skippipe.network=gcp12 simulates SkipPipe's published 20-node experiment: it needs "
            f"skippipe.stages={published}, got {settings['skippipe.stages']}"
        )
    if not 0 <= settings["skippipe.skip"] < 1:
        raise SpecError(f"skippipe.skip must be in [0, 1), got {settings['skippipe.skip']}")
    if settings["skippipe.fail_node"] >= 0:
        raise SpecError("skippipe.fail_node is not simulated on skippipe.network=gcp12")
    nodes = sum(counts)
    slow = settings["emulate.slow_nodes"]
    for part in str(slow).split("-"):
        if part.strip() and not (part.strip().isdigit() and int(part) < nodes):
            raise SpecError(f"emulate.slow_nodes={slow!r} must list nodes below {nodes} (e.g. '2')")
    if settings["emulate.slowdown"] < 1:
        raise SpecError(f"emulate.slowdown must be >= 1, got {settings['emulate.slowdown']}")


def busy_for(seconds: float, device: torch.device) -> None:
    """Compute for ``seconds`` (a slower device is busy longer, not asleep)."""
    a = torch.randn(128, 128, device=device)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a = torch.tanh(a @ a)
    synchronize(device)


class SkipPipe(Strategy):
    name = "skippipe"
    applies = frozenset({"pp"})
    fills = "pp"

    @classmethod
    def validate(cls, settings: Mapping[str, Any], layout: Layout) -> None:
        counts = parse_nodes(settings["skippipe.stages"])
        if settings["skippipe.mode"] == "simulate":
            if settings["energy.source"] != "auto":
                raise SpecError(
                    f"energy.source={settings['energy.source']}: a simulated run reads no meter "
                    "(its energy is modelled at assumed watts); leave energy.source=auto"
                )
            if settings["skippipe.network"] == "gcp12":
                validate_published(settings, counts)
                return
        elif settings["skippipe.network"] != "local":
            raise SpecError(
                f"skippipe.network={settings['skippipe.network']} is simulated only: add "
                "--set skippipe.mode=simulate (a real run's nodes are this machine's ranks)"
            )
        if sum(counts) != layout.world:
            raise SpecError(
                f"skippipe.stages={settings['skippipe.stages']} places {sum(counts)} nodes but "
                f"the run has {layout.world} ranks"
            )
        blocks = len(counts) - 1
        from greenbench.models import model_info

        layers = model_info(settings["model.family"], settings["model.size"]).n_layers
        if layers < blocks:
            raise SpecError(
                f"skippipe.stages={settings['skippipe.stages']} has {blocks} stages of blocks "
                f"but the model has {layers} layers"
            )
        if not 0 <= settings["skippipe.skip"] < 1:
            raise SpecError(f"skippipe.skip must be in [0, 1), got {settings['skippipe.skip']}")
        fail = settings["skippipe.fail_node"]
        if fail >= 0 and (fail >= layout.world or fail < counts[0]):
            raise SpecError(
                f"skippipe.fail_node={fail} must be a node of a stage of blocks "
                f"({counts[0]}…{layout.world - 1}); data nodes hold the loss"
            )
        slow = settings["emulate.slow_nodes"]
        for part in str(slow).split("-"):
            if part.strip() and not (part.strip().isdigit() and int(part) < layout.world):
                raise SpecError(
                    f"emulate.slow_nodes={slow!r} must list ranks below {layout.world} (e.g. '2')"
                )
        if settings["emulate.slowdown"] < 1:
            raise SpecError(f"emulate.slowdown must be >= 1, got {settings['emulate.slowdown']}")
        global_batch, micro = settings["data.global_batch"], settings["data.micro_batch"]
        if global_batch % micro:
            raise SpecError(
                f"data.global_batch={global_batch} is not a multiple of data.micro_batch={micro}"
            )

    def configure(self, settings: Mapping[str, Any]) -> None:
        self.settings = dict(settings)
        self.counts = parse_nodes(settings["skippipe.stages"])
        self.micro_batch = settings["data.micro_batch"]
        self.seq_len = settings["data.seq_len"]
        self.microbatches = settings["data.global_batch"] // self.micro_batch
        self.slow = {int(p) for p in str(settings["emulate.slow_nodes"]).split("-") if p.strip()}
        self.slowdown = float(settings["emulate.slowdown"])
        self.latency_s = settings["emulate.link_latency_ms"] / 1000.0
        gbps = settings["emulate.link_bandwidth_gbps"]
        self.seconds_per_byte = 8.0 / (gbps * 1e9) if gbps > 0 else 0.0
        self.step_index = 0

    # -- building ------------------------------------------------------------------------

    @property
    def node(self) -> int:
        return self.ctx.rank

    def plan_for(self, step: int) -> Plan:
        """The plan of iteration ``step``: one per set of serving nodes (made once)."""
        s = self.settings
        failed = s["skippipe.fail_node"]
        gone = frozenset({failed} if failed >= 0 and step >= s["skippipe.fail_step"] else ())
        if gone not in self.plans:
            self.plans[gone] = make_plan(
                self.counts,
                microbatches=self.microbatches,
                skip=s["skippipe.skip"],
                schedule=s["skippipe.schedule"],
                seed=s["seed"],
                removed=set(gone),
                costs=self.costs,
            )
        return self.plans[gone]

    def apply(self, builder: ModelBuilder) -> torch.nn.Module:
        family = builder.family
        if family.pipeline_stage is None:
            raise SpecError(f"{family.name} has no pipeline stages")
        model = builder.build(self.ctx.device)
        layers = len(builder.blocks(model))
        self.stage = self.stage_index_of(self.node)
        self.bounds = stage_layers(layers, len(self.counts) - 1)
        self.layers_total = layers
        self.width = builder.info.d_model
        self.costs = run_costs(self.settings, builder.info, layers)
        self.plans: dict[frozenset[int], Plan] = {}
        if self.stage == 0:
            self.embed = family.pipeline_stage(model, 0, 0, embed=True, head=False)
            self.head = family.pipeline_stage(model, layers, layers, embed=False, head=True)
            module = torch.nn.ModuleDict({"embed": self.embed, "head": self.head})
        else:
            lo, hi = self.bounds[self.stage - 1]
            module = family.pipeline_stage(model, lo, hi, embed=False, head=False)
        self.module = module
        self.replica_groups = self.make_replica_groups()
        return module

    def stage_index_of(self, node: int) -> int:
        first = 0
        for stage, count in enumerate(self.counts):
            if first <= node < first + count:
                return stage
            first += count
        raise ValueError(f"node {node} is beyond {sum(self.counts)} nodes")

    def make_replica_groups(self) -> dict[frozenset[int], Any]:
        """Process groups for each stage's replicas, and for every such set less one node (a
        node that stops serving leaves its stage's set); made by every rank, in one order."""
        groups: dict[frozenset[int], Any] = {}
        if not self.ctx.distributed:
            return groups
        first = 0
        for count in self.counts:
            nodes = list(range(first, first + count))
            first += count
            for size in (count, count - 1):
                if size < 2:
                    continue
                for subset in combinations(nodes, size):
                    groups[frozenset(subset)] = dist.new_group(list(subset))
        return groups

    # -- data --------------------------------------------------------------------------------

    def batch(self, plan: DataPlan, step: int) -> StepBatch:
        return plan.part(step, 0, 1)  # every node draws the whole minibatch

    @property
    def counts_tokens(self) -> bool:
        return self.node == 0

    @property
    def flops_fraction(self) -> float:
        """The share of the blocks' FLOPs the last iteration's paths ran (the embedding and
        head, a small share at these sizes, are counted as blocks)."""
        return self.last_fraction

    last_fraction = 1.0

    def padded(self, batch: StepBatch) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(ids, position ids, shifted labels) per microbatch, padded to one shape."""
        out = []
        rows, tokens = self.micro_batch, self.seq_len
        for mb in batch.microbatches:
            labels = F.pad(mb.labels[:, 1:], (0, 1), value=IGNORE)
            r, t = mb.input_ids.shape
            grow = (0, tokens - t, 0, rows - r)
            out.append(
                (
                    F.pad(mb.input_ids, grow).to(self.ctx.device),
                    F.pad(mb.position_ids, grow).to(self.ctx.device),
                    F.pad(labels, grow, value=IGNORE).to(self.ctx.device),
                )
            )
        if len(out) > self.microbatches:
            raise RuntimeError(f"{len(out)} microbatches for a plan of {self.microbatches}")
        while len(out) < self.microbatches:  # an all-padding microbatch: no tokens, no loss
            ids, pos, labels = out[0]
            out.append((ids.clone(), pos.clone(), torch.full_like(labels, IGNORE)))
        return out

    # -- one iteration ---------------------------------------------------------------------

    def train_step(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: StepBatch,
    ) -> tuple[float, StepTimes]:
        start = time.perf_counter()
        mark = self.comm.mark()
        plan = self.plan_for(self.step_index)
        layers = {s + 1: hi - lo for s, (lo, hi) in enumerate(self.bounds)} | {0: 0}
        self.last_fraction = plan.visited_fraction(layers, self.layers_total)
        optimizer.zero_grad(set_to_none=True)
        data = self.padded(batch)
        scale = 1.0 / batch.global_tokens
        loss = self.run_tasks(plan, data, scale)
        self.sum_replicas(plan)
        optimizer.step()
        synchronize(self.ctx.device)
        self.step_index += 1
        calls = [c for c in self.comm.since(mark) if c.events is None]
        times = StepTimes()
        times.wait_s = math.fsum(c.seconds for c in calls if c.waits)
        times.comm_s = math.fsum(c.seconds for c in calls if not c.waits)
        times.compute_s = time.perf_counter() - start - times.wait_s - times.comm_s
        return loss, times

    def run_tasks(self, plan: Plan, data: list, scale: float) -> float:
        node = self.node
        shape = (self.micro_batch, self.seq_len, self.width)
        saved: dict[int, tuple[torch.Tensor, Any]] = {}
        pending: list[Any] = []
        loss_sum = 0.0
        for kind, m in plan.order.get(node, ()):
            route = plan.route(m)
            ids, pos, labels = data[m]
            t0 = time.perf_counter()
            if kind == "E":
                hidden, _ = self.embed(ids, pos)
                saved[m] = (hidden, None)
                self.slow_down(t0)
                pending.append(self.send(hidden.detach(), route[1], m, "fwd"))
            elif kind == "F":
                at = route.index(node, 1)
                x = self.recv(shape, route[at - 1], m, "fwd").requires_grad_(True)
                t0 = time.perf_counter()
                out, _ = self.module(x, pos)
                saved[m] = (x, out)
                self.slow_down(t0)
                pending.append(self.send(out.detach(), route[at + 1], m, "fwd"))
            elif kind == "L":
                x = self.recv(shape, route[-2], m, "fwd").requires_grad_(True)
                t0 = time.perf_counter()
                logits = self.head(x, pos)
                loss = F.cross_entropy(
                    logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE,
                    reduction="sum",
                )  # fmt: skip
                (loss * scale).backward()
                loss_sum += float(loss.detach())
                self.slow_down(t0)
                pending.append(self.send(x.grad, route[-2], m, "bwd"))
            elif kind == "B":
                at = route.index(node, 1)
                grad = self.recv(shape, route[at + 1], m, "bwd")
                t0 = time.perf_counter()
                x, out = saved.pop(m)
                torch.autograd.backward(out, grad)
                self.slow_down(t0)
                pending.append(self.send(x.grad, route[at - 1], m, "bwd"))
            elif kind == "G":
                grad = self.recv(shape, route[1], m, "bwd")
                t0 = time.perf_counter()
                hidden, _ = saved.pop(m)
                torch.autograd.backward(hidden, grad)
                self.slow_down(t0)
        for work in pending:
            work.wait()
        return loss_sum

    def slow_down(self, t0: float) -> None:
        if self.node in self.slow and self.slowdown > 1:
            synchronize(self.ctx.device)
            busy_for((time.perf_counter() - t0) * (self.slowdown - 1), self.ctx.device)

    # -- messages ------------------------------------------------------------------------

    def tag(self, m: int, direction: str) -> int:
        return 2 * m + (direction == "bwd")

    def send(self, tensor: torch.Tensor, peer: int, m: int, direction: str) -> Any:
        """Send ``tensor`` to ``peer`` with its send time (for the emulated link delay)."""
        stamp = torch.tensor([time.time()], dtype=torch.float64, device=tensor.device)
        payload = tensor.contiguous()
        tag = self.tag(m, direction)
        with self.comm.span(DIM, "send", tensor_bytes(payload)):
            works = [
                dist.isend(payload, peer, tag=tag),
                dist.isend(stamp, peer, tag=tag + 1_000_000),
            ]
        return _Works(works, (payload, stamp))

    def recv(self, shape: tuple[int, ...], peer: int, m: int, direction: str) -> torch.Tensor:
        """Receive from ``peer``: the wait is waiting (the bubble); the emulated link delay, if
        any, is transfer (``link_delay``)."""
        out = torch.empty(shape, device=self.ctx.device)
        stamp = torch.empty(1, dtype=torch.float64, device=self.ctx.device)
        tag = self.tag(m, direction)
        with self.comm.span(DIM, "recv", tensor_bytes(out), waits=True):
            dist.recv(out, peer, tag=tag)
            dist.recv(stamp, peer, tag=tag + 1_000_000)
        delay = self.latency_s + tensor_bytes(out) * self.seconds_per_byte
        if delay > 0:
            arrive = float(stamp.item()) + delay
            with self.comm.span(DIM, "link_delay", tensor_bytes(out)):
                time.sleep(max(0.0, arrive - time.time()))
        return out

    def sum_replicas(self, plan: Plan) -> None:
        """Sum gradients over the serving replicas of this node's stage."""
        serving = {n for nodes in plan.stage_nodes for n in nodes}
        if self.node not in serving:
            return
        replicas = frozenset(plan.stage_nodes[self.stage_index_of(self.node)])
        group = self.replica_groups.get(replicas)
        if group is None or len(replicas) < 2:
            return
        for p in self.module.parameters():
            grad = p.grad if p.grad is not None else torch.zeros_like(p)
            with self.comm.span("replica", "all_reduce", tensor_bytes(grad)):
                dist.all_reduce(grad, group=group)
            p.grad = grad


class _Works:
    """Sends in flight, with the tensors they read kept alive until they are done."""

    def __init__(self, works: list[Any], keep: tuple[torch.Tensor, ...]) -> None:
        self.works, self.keep = works, keep

    def wait(self) -> None:
        for work in self.works:
            work.wait()
