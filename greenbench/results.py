"""What a run produces: per-rank measurements, per-repeat aggregates, the run record.

These dataclasses are the boundary between workers, the launcher and the store. They carry
plain numbers (no tensors) and serialise with ``to_dict``/``from_dict`` (JSON-safe), because
ranks hand them to the launcher across process boundaries. A run's ``runs`` row is a
`RunRecord` when it begins (what ran, on what, where) and a `RunOutcome` when it ends.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from greenbench.energy.base import EnergyWindow
from greenbench.vocabulary import Layout


@dataclass(frozen=True, slots=True)
class CommRecord:
    """One rank's calls of one operation on one mesh dimension (or group) in one window:
    how many, the bytes they moved, the seconds the rank was blocked in them, and how much of
    that was waiting for other ranks (the rest is transfer). See `greenbench.distributed.comm`."""

    dim: str
    op: str
    calls: int
    bytes: int
    seconds: float
    wait_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ValPoint:
    """One evaluation of a run to a target (`TargetOutcome`): after ``step`` optimizer steps,
    ``tokens`` trained tokens, ``seconds`` and ``joules`` of training (evaluation left out), the
    validation loss of the whole model on the held-out set (nats per token). ``step``,
    ``tokens`` and ``val_loss`` are the run's, the same on every rank (``tokens`` all ranks'
    together, as a repeat's ``tokens`` counts them); ``seconds`` and ``joules`` are this rank's
    own (its meter's cumulative training joules). ``joules`` is None where the meter could not
    be read."""

    step: int
    tokens: int
    seconds: float
    joules: float | None
    val_loss: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class TargetOutcome:
    """How one rank's run to a target loss went (``train.until = target``): the absolute target
    it aimed at, whether the validation loss reached it, the steps and tokens trained when it
    did (or when the budget ended the run), the best validation loss seen, the evaluations'
    own seconds and joules (kept out of the training figures), why the run stopped, and the
    validation curve. The run's window (`RankResult.seconds`, ``energy``) is the training to
    that point, so time and energy to target are the window's when ``reached``. Every rank
    reports the same target, ``reached``, ``steps``, ``tokens`` (the run's) and curve losses;
    ``eval_s`` and ``eval_energy_j`` are its own (`greenbench.aggregate` combines them)."""

    target_loss: float
    reached: bool
    steps: int
    tokens: int
    best_val_loss: float
    eval_s: float
    eval_energy_j: float | None
    #: "reached" | "max_steps" | "max_tokens" | "max_s" | "max_j"
    stopped_by: str
    curve: tuple[ValPoint, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["curve"] = [p.to_dict() for p in self.curve]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TargetOutcome:
        d = dict(d)
        d["curve"] = tuple(ValPoint(**p) for p in d.get("curve", ()))
        return cls(**d)


@dataclass(frozen=True, slots=True)
class RankResult:
    """One rank's measured window for one repeat."""

    rank: int
    local_rank: int
    host: str
    repeat: int
    tokens: int  # real (non-padding) tokens this rank trained on in the window
    seconds: float  # wall time of the measured window
    compute_s: float  # time in forward/backward/optimizer
    comm_s: float  # time blocked in communication beyond waiting: the transfer
    #: time waiting for other ranks: in a collective, the time beyond the last-arriving rank's
    #: (`greenbench.rank.window.settle_calls`); calls recorded as waiting through and through
    #: (pipeline receives, a strategy's own barriers, as ODC's)
    wait_s: float
    step_times_s: tuple[float, ...]
    peak_mem_bytes: int
    flops: float  # analytic model FLOPs of the work done in the window, PaLM's convention
    loss: float  # mean training loss over the window's steps
    n_microbatches: int
    energy: EnergyWindow | None  # None when this rank reads no meter (see energy.select)
    comm: tuple[CommRecord, ...] = ()  # this rank's communication in the window, per dim/op
    #: what this rank read beside its own devices over the same window (local rank 0 only):
    #: RAPL's CPU and DRAM on a GPU run, the node's own meter (IPMI, Redfish); never added
    #: into ``energy`` (`greenbench.energy.node`)
    extra_energy: tuple[EnergyWindow, ...] = ()
    #: model state this rank held, counted from tensors (`greenbench.rank.state_memory`):
    #: parameters, gradients, optimizer state, and the peak of what autograd saved; None where
    #: not counted (results written before these fields existed)
    param_bytes: int | None = None
    grad_bytes: int | None = None
    optim_bytes: int | None = None
    activation_bytes: int | None = None
    #: the tokens' share of full-model work this rank's paths ran, summed over the window's
    #: steps (a step's tokens × the share of the (token, block) work it ran:
    #: `greenbench.strategies.base.Strategy.flops_fraction`); None: every token ran every block
    useful_tokens: float | None = None
    #: the window's model FLOPs under the causal convention (`greenbench.vocabulary.flops`);
    #: None where unknown (a user's workload, results written before the field existed)
    flops_causal: float | None = None
    #: why waiting inside collectives is unknown in this window ("" when it is known: the
    #: ranks issued different collectives, `greenbench.rank.window.unsplit_note`); it reaches
    #: the repeat's note
    comm_note: str = ""
    #: a run to a target loss (``train.until = target``): how it went; None for a window run
    target: TargetOutcome | None = None

    @property
    def state_bytes(self) -> int | None:
        """Model state this rank held: parameters + gradients + optimizer state + activations
        (None when not counted)."""
        parts = (self.param_bytes, self.grad_bytes, self.optim_bytes, self.activation_bytes)
        if any(p is None for p in parts):
            return None
        return sum(p for p in parts if p is not None)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["step_times_s"] = list(self.step_times_s)
        d["energy"] = self.energy.to_dict() if self.energy else None
        d["comm"] = [c.to_dict() for c in self.comm]
        d["extra_energy"] = [w.to_dict() for w in self.extra_energy]
        d["target"] = self.target.to_dict() if self.target else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RankResult:
        d = dict(d)
        d["step_times_s"] = tuple(d["step_times_s"])
        d["energy"] = EnergyWindow.from_dict(d["energy"]) if d.get("energy") else None
        d["comm"] = tuple(CommRecord(**c) for c in d.get("comm", ()))
        d["extra_energy"] = tuple(EnergyWindow.from_dict(w) for w in d.get("extra_energy", ()))
        d["target"] = TargetOutcome.from_dict(d["target"]) if d.get("target") else None
        return cls(**d)


@dataclass(frozen=True, slots=True)
class RepeatResult:
    """One repeat of one configuration, aggregated over ranks (the `results` table row)."""

    repeat: int
    tokens: int
    seconds: float
    tokens_per_s: float
    energy_source: str
    energy_measured: bool
    energy_j: float | None
    energy_net_j: float | None
    energy_gpu_j: float | None
    energy_cpu_j: float | None
    energy_dram_j: float | None
    idle_power_w: float | None
    joules_per_token: float | None
    net_joules_per_token: float | None
    flops: float  # model FLOPs, PaLM's convention (full attention)
    mfu: float | None  # from ``flops``: PaLM's convention
    peak_mem_bytes: int
    step_time_p50_s: float
    step_time_p95_s: float
    wait_fraction: float
    wait_energy_j: float | None
    co2_g: float | None
    loss: float
    energy_note: str = ""
    #: why MFU is unknown (the achieved rate beat the peak), or how the peak was re-measured
    mfu_note: str = ""
    step_times_s: tuple[float, ...] = ()
    #: the most model state one rank held (`RankResult.state_bytes`, max over ranks); None when
    #: a rank did not count it. Unlike ``peak_mem_bytes`` (a process's resident set on CPU), it
    #: is what the planner's memory model predicts
    state_bytes: int | None = None
    #: the run's GPUs' power per device: the window's mean (GPU energy ÷ seconds ÷ devices) and
    #: the highest sample of any one (where the meter sampled power); None on CPU runs
    gpu_power_avg_w: float | None = None
    gpu_power_peak_w: float | None = None
    #: the node's own meter over the window (IPMI DCMI, Redfish), beside ``energy_j``, never in
    #: it; source None when no node meter was read, energy None (with the note) when it was asked
    #: and did not answer: unavailable, never a silent zero
    energy_node_j: float | None = None
    energy_node_source: str | None = None
    energy_node_note: str = ""
    #: where ``energy_cpu_j``/``energy_dram_j`` came from when not from the run's own meter
    #: (RAPL read beside the GPUs of a GPU run); None otherwise
    energy_host_source: str | None = None
    #: why the idle baseline is unreliable ("" when it is not): sampled while the machine was
    #: busy, or above the window's mean power; net energy is then None, never negative
    #: (`greenbench.vocabulary.trust`)
    idle_note: str = ""
    #: the share of the window's (token, block) work that ran: 1 where every token ran every
    #: block, below 1 where microbatches skip stages (SkipPipe's ``skippipe``/``random``);
    #: ``useful_tokens`` = ``tokens`` × it, the tokens as full-model work; ``useful_flops`` the
    #: model FLOPs of that work (what ``flops`` counts too, every strategy scaling its FLOPs by
    #: the blocks it ran); useful tokens/s and J per useful token follow from them. None where
    #: not known (FLOPs unknown, or results stored before they were counted)
    visited_share: float | None = None
    useful_tokens: float | None = None
    useful_flops: float | None = None
    useful_tokens_per_s: float | None = None
    joules_per_useful_token: float | None = None
    #: model FLOPs and MFU under the causal convention (`greenbench.vocabulary.flops`); None
    #: where unknown (a user's workload, a rank that did not count it); MFU None above 1 too
    flops_causal: float | None = None
    mfu_causal: float | None = None
    #: a run to a target loss (`TargetOutcome`, ``train.until = target``), None for a window
    #: run: the absolute target, whether the repeat reached it, and, only when it did, the
    #: steps, tokens, seconds and joules (gross, and net of idle as ``energy_net_j`` is) to it:
    #: the repeat's own figures, its window being the training up to the target; never a
    #: figure for a target not reached. The best validation loss, why the run stopped
    #: (`TargetOutcome.stopped_by`), and the evaluations' own seconds (the slowest rank's) and
    #: joules (summed as ``energy_j`` is), kept out of every training figure
    target_loss: float | None = None
    target_reached: bool | None = None
    steps_to_target: int | None = None
    tokens_to_target: int | None = None
    seconds_to_target: float | None = None
    energy_to_target_j: float | None = None
    energy_to_target_net_j: float | None = None
    best_val_loss: float | None = None
    target_stopped_by: str | None = None
    eval_s: float | None = None
    eval_energy_j: float | None = None
    #: the validation curve over the ranks (`greenbench.aggregate`): stored in ``val_curve``,
    #: one row per evaluation, not in the ``results`` row
    val_curve: tuple[ValPoint, ...] = ()
    #: a fault-tolerant run (checkpoints, an injected failure; `greenbench.rank.resilient`),
    #: None for any other: the failures it survived, every measured token it trained (those
    #: trained again after a restart included; ``tokens`` counts each step once), goodput
    #: (``tokens`` ÷ ``tokens_trained``), the work redone and the restarts in seconds (wall
    #: clock) and joules (summed over the ranks' meters), ``energy_lost_j`` their sum, and its
    #: checkpoints: how many, the seconds training waited for them, their joules and bytes.
    #: Every figure is part of ``seconds`` and ``energy_j``, which run from the first measured
    #: step to the last across restarts
    failures: int | None = None
    tokens_trained: int | None = None
    goodput: float | None = None
    redone_s: float | None = None
    redone_j: float | None = None
    restart_s: float | None = None
    restart_j: float | None = None
    energy_lost_j: float | None = None
    ckpt_count: int | None = None
    ckpt_s: float | None = None
    ckpt_j: float | None = None
    ckpt_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["step_times_s"] = list(self.step_times_s)
        d["val_curve"] = [p.to_dict() for p in self.val_curve]
        return d


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One event of a run (the ``run_events`` table): a checkpoint saved or loaded, a failure,
    a restart, work redone, a dead node detected or routed around.

    ``step``: the measured steps completed when it happened (0-based, warm-up not counted);
    ``rank``: the rank it concerns (None: the run's ranks together); ``t_s``: seconds from the
    run's first measured step; ``seconds`` its duration (wall clock, the slowest rank's);
    ``joules`` summed over the ranks' meters (None: unknown); ``tokens`` and ``bytes`` where it
    moved some. ``note`` says what is estimated or left out."""

    repeat: int
    kind: str  # checkpoint | load | failure | restart | redone | detected | rerouted
    step: int | None = None
    rank: int | None = None
    t_s: float | None = None
    seconds: float | None = None
    joules: float | None = None
    tokens: int | None = None
    bytes: int | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: ``RunEvent.kind``'s values
EVENT_KINDS = ("checkpoint", "load", "failure", "restart", "redone", "detected", "rerouted")


@dataclass(frozen=True, slots=True)
class HarnessCost:
    """What greenbench itself cost a run, in wall seconds (``runs.harness_*``; None: not
    known, or not part of this kind of run).

    - ``startup_s``: from the start of the run's turn to its first training step (a whole
      process: to the command's start). The turn of a session's first configuration starts
      with the greenbench process (imports, checks, calibrations included); a later one's
      when the one before it ended.
    - ``ranks_s``: of that, from starting the rank processes to the first step (interpreter,
      imports, process group, building the model, data and optimizer).
    - ``calibration_s``: measuring the MFU peak for this run (0: a cached figure; one measured
      again after the run, because the run beat it, is counted too, inside ``teardown_s``).
    - ``baseline_s``: sampling idle power for this run (0: a baseline reused, then
      ``baseline_age_s`` says how old it was when the run began; None: no baseline).
    - ``teardown_s``: from the end of the last measured window to the outcome ready to store
      (gathering, the ranks' exit, aggregation).
    """

    startup_s: float | None = None
    ranks_s: float | None = None
    calibration_s: float | None = None
    baseline_s: float | None = None
    baseline_age_s: float | None = None
    teardown_s: float | None = None

    def row(self) -> dict[str, float | None]:
        """The ``runs`` columns that hold it."""
        return {
            "harness_startup_s": self.startup_s,
            "harness_ranks_s": self.ranks_s,
            "harness_calibration_s": self.calibration_s,
            "harness_baseline_s": self.baseline_s,
            "idle_baseline_age_s": self.baseline_age_s,
            "harness_teardown_s": self.teardown_s,
        }


def seconds_between(start: float | None, end: float | None) -> float | None:
    """``end − start`` (wall clock, seconds) where both are known and in order; None
    otherwise (a clock stepped back between them says nothing)."""
    if start is None or end is None or end < start:
        return None
    return end - start


@dataclass(slots=True)
class RunOutcome:
    """What the launcher hands the store for one configuration."""

    status: str  # "ok" | "failed" | "interrupted"
    repeats: list[RepeatResult] = field(default_factory=list)
    ranks: list[RankResult] = field(default_factory=list)
    error: str | None = None
    failed_rank: int | None = None
    peak_flops: float | None = None
    peak_flops_source: str | None = None
    hardware: dict[str, Any] = field(default_factory=dict)
    #: what went wrong without losing the result (e.g. a rank that crashed at exit)
    warnings: list[str] = field(default_factory=list)
    error_tail: str | None = None  # the failing rank's last lines of output
    log_path: str | None = None  # where the worker logs were kept
    contended: bool | None = None  # the machine was shared while it ran (None: not watched)
    #: how busy: cores other processes kept busy meanwhile, and how many other greenbench runs
    #: and ranks were seen (a count; never which)
    others_busy_cores: float | None = None
    other_greenbench: int | None = None
    #: checkpoints, failures, restarts and the work they cost (`RunEvent`; ``run_events``)
    events: list[RunEvent] = field(default_factory=list)
    #: what the harness itself cost (start-up, calibration, idle baseline, teardown)
    harness: HarnessCost = field(default_factory=HarnessCost)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """The ``runs`` row a run begins with (status ``running``): which configuration, what ran
    it, on what machine and at what carbon intensity, under which power limit.

    One is built per run (the launcher's runners, `greenbench.launcher.runners.record`; a user's own
    measurement, `greenbench.measuring.record`) and stored as `row` gives it; what the run ends
    with is its `RunOutcome`. Columns nobody knows stay None (NULL)."""

    run_id: str
    suite: str | None
    workload: str
    config_name: str
    config_key: str
    config: str  # the configuration as JSON
    model_family: str | None
    model_size: str | None
    strategy: str
    layout: Layout
    rank_cpu_quota: bool
    device: str
    nproc: int
    nnodes: int
    precision: str
    seq_len: int | None
    lengths: str | None
    region: str
    label: str | None
    started_at: dt.datetime
    simulated: bool = False
    device_type: str | None = None
    kernels: Mapping[str, str] | None = None  # role → kernel
    carbon_intensity_g_per_kwh: float | None = None
    git_sha: str | None = None
    git_branch: str | None = None  # None: outside a checkout, or a detached HEAD outside CI
    host: str | None = None
    hardware: str | None = None  # JSON
    versions: str | None = None  # JSON
    power_limit_w: float | None = None
    power_limit_default_w: float | None = None
    power_limit_via: str | None = None
    power_limit_note: str | None = None
    #: the configuration's key without its seed (`greenbench.settings.seed_group_of`): runs that
    #: differ only in their seed share it, and are pooled over seeds by it
    seed_group: str | None = None

    def row(self) -> dict[str, Any]:
        """The ``runs`` columns, as the store's ``begin_run`` takes them."""
        row = {f.name: getattr(self, f.name) for f in fields(self)}
        row |= {"status": "running", "layout": self.layout.text, **self.layout.degrees()}
        if self.kernels is not None:
            row["kernels"] = json.dumps(dict(self.kernels), sort_keys=True)
        return row
