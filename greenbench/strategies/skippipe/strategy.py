"""SkipPipe's real execution: every node follows the iteration's plan, sending activations along
each microbatch's path and gradients back, on CPU ranks with gloo (or GPUs with NCCL).

Why our own: torch's pipelining schedules send every microbatch through every stage in one
fixed order; SkipPipe's microbatches take different paths, skip stages and share a stage's
replicas, which no kept library schedules.

A node (rank) holds one stage: stage 0's data nodes hold the embedding, the final norm and the
LM head (and compute the loss); stage ``s ≥ 1`` holds a run of the family's blocks
(`ModelCard.pipeline_stage`). Every rank draws the whole minibatch (the data are a function of
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
does not survive a dead member). A node really killed (``fault.kill_rank``) is survived by the
others: they notice, regroup in a gloo group of their own and route around it from then on
(`survivors`). A stage whose every node is gone is skipped by the paths and by evaluation. This
goes beyond the published code, which evaluates removed stages only at inference.

Evaluation on the held-out set (`SkipPipe.evaluate`) runs the whole model, whatever the schedule
skips in training: every microbatch goes forward through every stage, at a serving node of each
(the replicas of a stage hold the same weights; a stopped node's fall behind, so it is left
out), and the data nodes' losses are added over the world.
"""

from __future__ import annotations

import time
from itertools import combinations
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from greenbench.distributed.comm import CommRecorder, tensor_bytes
from greenbench.distributed.device import DistContext, StepTimes, synchronize
from greenbench.errors import SpecError
from greenbench.strategies.assignment import DataAssignment, WholeMinibatch
from greenbench.strategies.base import Strategy
from greenbench.strategies.schedule import BeforeMicrobatch, StepSchedule, step_times
from greenbench.strategies.skippipe.checks import parse_nodes
from greenbench.strategies.skippipe.plan import Plan
from greenbench.strategies.skippipe.routes import make_plan, run_costs, stage_layers
from greenbench.strategies.skippipe.survivors import survival_of

if TYPE_CHECKING:
    from greenbench.config import Config
    from greenbench.data import StepBatch
    from greenbench.data.settings import DataSettings
    from greenbench.models import ModelBuilder
    from greenbench.sources.contract import Loss
    from greenbench.strategies.skippipe.settings import SkipPipeSettings

IGNORE = -100
DIM = "pp"


def busy_for(seconds: float, device: torch.device) -> None:
    """Compute for ``seconds`` (a slower device is busy longer, not asleep)."""
    a = torch.randn(128, 128, device=device)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a = torch.tanh(a @ a)
    synchronize(device)


class SkipPipe(Strategy):
    name = "skippipe"

    def configure(self, config: Config) -> None:
        sp: SkipPipeSettings = config.skippipe
        data: DataSettings = config.data
        self.skippipe, self.data, self.seed = sp, data, config.run.seed
        self.counts = parse_nodes(sp.stages)
        self.micro_batch = data.micro_batch
        self.seq_len = data.seq_len
        self.microbatches = data.global_batch // self.micro_batch
        self.slow = {int(p) for p in str(sp.slow_nodes).split("-") if p.strip()}
        self.slowdown = float(sp.slowdown)
        self.latency_s = sp.link_latency_ms / 1000.0
        gbps = sp.link_bandwidth_gbps
        self.seconds_per_byte = 8.0 / (gbps * 1e9) if gbps > 0 else 0.0
        self.step_index = 0
        # a node really killed (fault.kill_rank): the survivors' side (`survivors.Survival`)
        self.survival = (
            survival_of(config, self.ctx.rank, self.ctx.world_size)
            if self.ctx.distributed
            else None
        )
        self.waited_s = 0.0  # how long the last receive or send waited (a detection's wait)
        self.loss_per_token = 0.0  # the last finished iteration's (a lost one's estimate)
        self.lost_steps: list[int] = []

    # -- building ------------------------------------------------------------------------

    @property
    def node(self) -> int:
        return self.ctx.rank

    def plan_for(self, step: int) -> Plan:
        """The plan of iteration ``step``: one per set of serving nodes (made once)."""
        sp = self.skippipe
        failed = sp.fail_node
        gone = frozenset({failed} if failed >= 0 and step >= sp.fail_step else ())
        if self.survival is not None:
            gone |= self.survival.gone
        if gone not in self.plans:
            self.plans[gone] = make_plan(
                self.counts,
                microbatches=self.microbatches,
                skip=sp.skip,
                schedule=sp.schedule,
                seed=self.seed,
                removed=set(gone),
                costs=self.costs,
            )
        return self.plans[gone]

    def parallelize(self, model: ModelBuilder) -> torch.nn.Module:  # type: ignore[override]
        """This node's stage of a model family's preset (a built-in model source: its family
        cuts stages)."""
        builder = model
        family = builder.family
        if family.pipeline_stage is None:
            raise SpecError(f"{family.name} has no pipeline stages")
        built = builder.build(self.ctx.device)
        layers = len(builder.blocks(built))
        self.stage = self.stage_index_of(self.node)
        self.bounds = stage_layers(layers, len(self.counts) - 1)
        self.layers_total = layers
        self.width = builder.info.d_model
        self.costs = run_costs(self.skippipe, self.data, builder.info, layers)
        self.plans: dict[frozenset[int], Plan] = {}
        if self.stage == 0:
            self.embed = family.pipeline_stage(built, 0, 0, embed=True, head=False)
            self.head = family.pipeline_stage(built, layers, layers, embed=False, head=True)
            module = torch.nn.ModuleDict({"embed": self.embed, "head": self.head})
        else:
            lo, hi = self.bounds[self.stage - 1]
            module = family.pipeline_stage(built, lo, hi, embed=False, head=False)
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
        survival = self.survival
        first, gone, timeout = 0, frozenset[int](), None
        if survival is not None:  # in the current group's numbering; a replica's wait bounded
            gone, timeout = survival.gone, survival.timeout
        for count in self.counts:
            nodes = [n for n in range(first, first + count) if n not in gone]
            first += count
            for size in (len(nodes), len(nodes) - 1):
                if size < 2:
                    continue
                for subset in combinations(nodes, size):
                    ranks = [self.peer(n) for n in subset]
                    groups[frozenset(subset)] = dist.new_group(ranks, timeout=timeout)
        return groups

    def peer(self, node: int) -> int:
        """``node``'s rank in the current process group (its own, until survivors regroup)."""
        return node if self.survival is None else self.survival.peer(node)

    # -- data --------------------------------------------------------------------------------

    @property
    def assignment(self) -> DataAssignment:
        return WholeMinibatch()  # every node draws the whole minibatch

    def schedule(self, loss: Loss) -> StepSchedule:
        return SkipPipeSchedule(self.ctx, self.comm, loss, self)

    @property
    def counts_tokens(self) -> bool:
        return self.node == 0

    @property
    def flops_fraction(self) -> float:
        """The share of the blocks' FLOPs the last iteration's paths ran, weighted by each
        microbatch's tokens (`Plan.visited_share`; the embedding and head, a small share at
        these sizes, are counted as blocks). It is also the share of the step's tokens that
        count as useful (`greenbench.rank.window.WindowTally`)."""
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

    def iteration(self, optimizer: torch.optim.Optimizer, batch: StepBatch) -> float:
        """One iteration of the plan: every task of this node, the replicas' gradients summed,
        the optimizer step; returns the summed loss (on data nodes)."""
        survival = self.survival
        if survival is not None:
            survival.before(self.step_index)  # the victim dies here, at its step
            if survival.noticed():  # the launcher's notice, with no message to wait for
                self.recover(None)
            if self.step_index < survival.resume:
                return self.lost(optimizer, batch)
            if survival.gone and self.step_index == survival.resume:
                self.note_rerouting()
        plan = self.plan_for(self.step_index)
        layers = {s + 1: hi - lo for s, (lo, hi) in enumerate(self.bounds)} | {0: 0}
        tokens = [mb.n_tokens for mb in batch.microbatches]
        tokens += [0] * (len(plan.paths) - len(tokens))  # all-padding microbatches
        self.last_fraction = plan.visited_share(layers, self.layers_total, tokens)
        optimizer.zero_grad(set_to_none=True)
        data = self.padded(batch)
        scale = 1.0 / batch.global_tokens
        try:
            loss = self.run_tasks(plan, data, scale)
            self.sum_replicas(plan)
        except RuntimeError as exc:  # gloo's errors; survived only where a node is killed
            if survival is None or survival.gone:
                raise
            self.recover(exc)
            return self.lost(optimizer, batch)
        optimizer.step()
        self.loss_per_token = loss / max(batch.n_tokens, 1)
        synchronize(self.ctx.device)
        self.step_index += 1
        return loss

    def recover(self, error: BaseException | None) -> None:
        """Regroup with the survivors (`Survival.recover`), then make the replicas' groups
        again in the new numbering."""
        assert self.survival is not None
        self.survival.recover(self.step_index, error, self.waited_s)
        self.replica_groups = self.make_replica_groups()
        if self.node == 0:
            self.note_rerouting()

    def lost(self, optimizer: torch.optim.Optimizer, batch: StepBatch) -> float:
        """An iteration lost to the failure: its gradients dropped, no optimizer step, no
        block counted as run. Its loss (on the data node) is an estimate, the last finished
        iteration's per token over this batch's tokens, so the window's mean loss is not
        pulled down by iterations that computed none."""
        assert self.survival is not None
        optimizer.zero_grad(set_to_none=True)
        self.last_fraction = 0.0
        self.lost_steps.append(self.survival.measured(self.step_index))
        self.survival.lost_tokens += batch.n_tokens
        self.step_index += 1
        if self.node == 0:
            self.note_rerouting()
        return self.loss_per_token * batch.n_tokens if self.node == 0 else 0.0

    def note_rerouting(self) -> None:
        """The data node's record of the rerouting: the measured step from which plans leave
        the dead node out, the iterations lost before it and their tokens, the nodes that
        serve and the stages no path visits any more (their blocks unused from then on, in
        training and evaluation)."""
        survival = self.survival
        assert survival is not None
        plan = self.plan_for(max(self.step_index, survival.resume))
        skipped = [s for s, nodes in enumerate(plan.stage_nodes) if not nodes]
        survival.rerouted({
            "step": survival.measured(survival.resume),
            "lost": list(self.lost_steps),
            "tokens": survival.lost_tokens,
            "t": time.time(),
            "serving": sorted(n for nodes in plan.stage_nodes for n in nodes),
            "skipped": [
                {"stage": s, "layers": list(self.bounds[s - 1])} for s in skipped
            ],
        })  # fmt: skip

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
            self.wait(work)
        return loss_sum

    # -- evaluation ----------------------------------------------------------------------

    def eval_routes(self, count: int) -> list[tuple[int, ...]]:
        """Each of ``count`` held-out microbatches' route through the WHOLE model, whatever
        the schedule skips in training: a data node, then one node of every other stage in
        order, back to the data node; the serving nodes of each stage (this step's plan,
        stragglers included, a stopped node not) take microbatches in turn."""
        stages = self.plan_for(self.step_index).stage_nodes
        routes = []
        for m in range(count):
            data = stages[0][m % len(stages[0])]
            # a stage with no node left is skipped: its blocks are gone (`note_rerouting`)
            path = tuple(nodes[m % len(nodes)] for nodes in stages[1:] if nodes)
            routes.append((data, *path, data))
        return routes

    def evaluate(self, batch: StepBatch) -> float:
        """The summed loss of the held-out set, which every node holds whole, through every
        stage (forward only, no skip); the data nodes' sums added over the world. Each
        microbatch goes at its own shape (every node knows it); messages and emulated links
        as in training. A node visits its microbatches in order, a data node embedding all of
        its before it computes any loss, so blocking receives meet sends already issued."""
        node = self.node
        routes = self.eval_routes(len(batch.microbatches))
        data = [
            (
                mb.input_ids.to(self.ctx.device),
                mb.position_ids.to(self.ctx.device),
                F.pad(mb.labels[:, 1:], (0, 1), value=IGNORE).to(self.ctx.device),
            )
            for mb in batch.microbatches
        ]
        pending: list[Any] = []
        loss = torch.zeros((), device=self.ctx.device, dtype=torch.float64)
        with torch.no_grad():
            for m, route in enumerate(routes):
                ids, pos, _ = data[m]
                t0 = time.perf_counter()
                if route[0] == node:
                    hidden, _ = self.embed(ids, pos)
                    self.slow_down(t0)
                    pending.append(self.send(hidden, route[1], m, "fwd"))
                if node in route[1:-1]:
                    at = route.index(node, 1)
                    x = self.recv((*ids.shape, self.width), route[at - 1], m, "fwd")
                    t0 = time.perf_counter()
                    out, _ = self.module(x, pos)
                    self.slow_down(t0)
                    pending.append(self.send(out, route[at + 1], m, "fwd"))
            for m, route in enumerate(routes):
                if route[0] != node:
                    continue
                ids, pos, labels = data[m]
                x = self.recv((*ids.shape, self.width), route[-2], m, "fwd")
                t0 = time.perf_counter()
                logits = self.head(x, pos)
                loss += F.cross_entropy(
                    logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE,
                    reduction="sum",
                ).double()  # fmt: skip
                self.slow_down(t0)
        for work in pending:
            self.wait(work)
        if self.ctx.distributed:
            with self.comm.span("world", "all_reduce", tensor_bytes(loss)):
                dist.all_reduce(loss)
        return float(loss)

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
                dist.isend(payload, self.peer(peer), tag=tag),
                dist.isend(stamp, self.peer(peer), tag=tag + 1_000_000),
            ]
        return _Works(works, (payload, stamp))

    def recv(self, shape: tuple[int, ...], peer: int, m: int, direction: str) -> torch.Tensor:
        """Receive from ``peer``: the wait is waiting (the bubble); the emulated link delay, if
        any, is transfer (``link_delay``)."""
        out = torch.empty(shape, device=self.ctx.device)
        stamp = torch.empty(1, dtype=torch.float64, device=self.ctx.device)
        tag = self.tag(m, direction)
        with self.comm.span(DIM, "recv", tensor_bytes(out), waits=True):
            if self.survival is None:
                dist.recv(out, peer, tag=tag)
                dist.recv(stamp, peer, tag=tag + 1_000_000)
            else:  # a wait of fault.detect_s at most: then the peer counts as gone
                self.wait(dist.irecv(out, self.peer(peer), tag=tag))
                self.wait(dist.irecv(stamp, self.peer(peer), tag=tag + 1_000_000))
        delay = self.latency_s + tensor_bytes(out) * self.seconds_per_byte
        if delay > 0:
            arrive = float(stamp.item()) + delay
            with self.comm.span(DIM, "link_delay", tensor_bytes(out)):
                time.sleep(max(0.0, arrive - time.time()))
        return out

    def wait(self, work: Any) -> None:
        """Wait for a send or receive; where a node may be killed, for ``fault.detect_s`` at
        most, noting how long it waited when it fails (the detection's wait)."""
        if self.survival is None:
            work.wait()
            return
        t0 = time.perf_counter()
        try:
            work.wait(self.survival.timeout)
        except RuntimeError:
            self.waited_s = time.perf_counter() - t0
            raise

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


class SkipPipeSchedule(StepSchedule):
    """The step is the node's tasks in the iteration's plan (`SkipPipe.iteration`), not the
    shared microbatch loop: the loss is the model family's next-token loss on the data nodes,
    each microbatch's position in the plan its own. A ``before_microbatch`` hook is not called
    (the plan has no one microbatch loop)."""

    def __init__(
        self, ctx: DistContext, comm: CommRecorder, loss: Loss, skippipe: SkipPipe
    ) -> None:
        super().__init__(ctx, comm, loss)
        self.skippipe = skippipe

    def train_step(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: StepBatch,
        before_microbatch: BeforeMicrobatch | None = None,
    ) -> tuple[float, StepTimes]:
        start = time.perf_counter()
        mark = self.comm.mark()
        loss = self.skippipe.iteration(optimizer, batch)
        return loss, step_times(self.comm, mark, time.perf_counter() - start)

    def evaluate(self, model: torch.nn.Module, batch: StepBatch) -> tuple[float, int]:
        """The whole model's held-out loss through every stage (`SkipPipe.evaluate`: no stage
        skipped, whatever the schedule)."""
        return self.skippipe.evaluate(batch), batch.global_tokens


class _Works:
    """Sends in flight, with the tensors they read kept alive until they are done."""

    def __init__(self, works: list[Any], keep: tuple[torch.Tensor, ...]) -> None:
        self.works, self.keep = works, keep

    def wait(self, timeout: Any = None) -> None:
        for work in self.works:
            if timeout is None:
                work.wait()
            else:
                work.wait(timeout)
