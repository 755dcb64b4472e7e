"""The ``ddp`` section: how replicated data parallelism spends less on communication, and its
check. Every setting counts in a run's identity only away from its default, so every DDP
configuration stored before the section keeps its key.

Three families of method, one at a time:

- **compression** (``ddp.compress``): a DDP communication hook reduces a smaller form of each
  gradient bucket (bf16, fp16, or PowerSGD's low-rank factors P and Q);
- **infrequent synchronisation** (``ddp.sync``): local SGD (ranks step alone and average their
  parameters every ``ddp.period`` steps) or DiLoCo (an inner optimizer for ``ddp.period``
  steps, then an outer Nesterov step on the averaged change);
- **bounded staleness** (``ddp.staleness``): a rank applies averaged gradients at most ``s``
  steps old, their all-reduce overlapping the next steps (``0``: DDP itself).
"""

from __future__ import annotations

import math

from greenbench.config import NON_NEGATIVE, POSITIVE, Config, section, setting, setting_of
from greenbench.errors import SpecError
from greenbench.models import FAMILIES, ModelInfo, model_info
from greenbench.strategies.checks import check_data_parallel, check_ranks
from greenbench.vocabulary import Layout

COMPRESSIONS = ("none", "bf16", "fp16", "powersgd")
SYNCS = ("every-step", "local-sgd", "diloco")

#: PowerSGD's ``min_compression_rate``: an n×m matrix is compressed at rank r only where
#: ``(n + m) · r · rate < n · m``, its factors under half its elements (torch's default).
#: Every matrix of the tiny Transformer is compressed at any rank up to 63: its smallest,
#: 256×256, holds 128 times its factors' elements at r = 1 and 32 times at r = 4 (Mamba's
#: 512×4 convolution weights, the one exception among the tiny presets' matrices, only at r = 1).
MIN_COMPRESSION_RATE = 2.0


@section("ddp", "DDP (strategy=ddp): compression, infrequent synchronisation, staleness.",
         built_in_only=True)  # fmt: skip
class DDPSettings:
    compress: str = setting(
        "none",
        "the gradient all-reduce's form: none | bf16 | fp16 (torch's compression hooks) | "
        "powersgd (low-rank factors of rank ddp.powersgd_rank, error feedback, warm start)",
        choices=COMPRESSIONS,
    )
    powersgd_rank: int = setting(
        1, "PowerSGD's rank r: P (n×r) and Q (m×r) reduced per n×m matrix", bound=POSITIVE
    )
    powersgd_start: int = setting(
        2,
        "PowerSGD's start_powerSGD_iter: plain all-reduce before it (> 1: error feedback needs "
        "one uncompressed step first)",
        bound=POSITIVE,
    )
    sync: str = setting(
        "every-step",
        "every-step (gradients all-reduced each step) | local-sgd (torch's PostLocalSGDOptimizer "
        "and PeriodicModelAverager: parameters averaged every ddp.period steps) | diloco (inner "
        "AdamW for ddp.period steps, then an outer Nesterov step on the averaged change)",
        choices=SYNCS,
    )
    period: int = setting(
        4, "steps between parameter synchronisations (local-sgd, diloco): H", bound=NON_NEGATIVE
    )
    local_warmup: int = setting(
        0,
        "local-sgd: steps of plain DDP (gradients all-reduced) before local steps begin",
        bound=NON_NEGATIVE,
    )
    outer_lr: float = setting(
        0.7, "diloco: the outer Nesterov step's learning rate", bound=POSITIVE
    )
    outer_momentum: float = setting(
        0.9, "diloco: the outer Nesterov step's momentum", bound=NON_NEGATIVE
    )
    staleness: int = setting(
        0,
        "bounded staleness s: a rank applies averaged gradients at most s steps old, their "
        "all-reduce overlapping the next s steps (0: DDP)",
        bound=NON_NEGATIVE,
    )

    @property
    def method(self) -> str:
        """The method in a few words ("" for DDP itself): ``bf16``, ``fp16``, ``PowerSGD r=4``,
        ``local SGD H=16``, ``DiLoCo H=16``, ``staleness 1``: how a run's name and the
        report call it."""
        if self.compress == "powersgd":
            return f"PowerSGD r={self.powersgd_rank}"
        if self.compress != "none":
            return self.compress
        if self.sync != "every-step":
            name = {"local-sgd": "local SGD", "diloco": "DiLoCo"}[self.sync]
            return f"{name} H={self.period}"
        if self.staleness > 0:
            return f"staleness {self.staleness}"
        return ""


def check_ddp(config: Config, layout: Layout) -> None:
    """SpecError for ``ddp`` settings that cannot run: one method at a time, a period of at
    least one step, PowerSGD's start after one uncompressed step and a rank that compresses
    some matrix of the model (`check_powersgd_rank`), a run to a target with infrequent
    synchronisation evaluating where the replicas agree."""
    check_data_parallel(config, layout)
    check_ranks("ddp", layout)
    ddp = config[DDPSettings]
    if ddp is None:
        return
    if ddp.period < 1:
        raise SpecError(f"ddp.period must be at least 1 step (got {ddp.period})")
    methods = [
        name
        for name, used in (
            (f"ddp.compress={ddp.compress}", ddp.compress != "none"),
            (f"ddp.sync={ddp.sync}", ddp.sync != "every-step"),
            (f"ddp.staleness={ddp.staleness}", ddp.staleness > 0),
        )
        if used
    ]
    if len(methods) > 1:
        raise SpecError(f"one communication-saving method at a time: {' and '.join(methods)}")
    if ddp.compress == "powersgd" and ddp.powersgd_start < 2:
        raise SpecError(
            "ddp.powersgd_start must be above 1: PowerSGD's error feedback needs one "
            "uncompressed step first"
        )
    if ddp.compress == "powersgd" and config.model.family in FAMILIES:
        check_powersgd_rank(ddp.powersgd_rank, model_info(config.model.family, config.model.size))
    check_periodic_evaluation(config, ddp)


def check_periodic_evaluation(config: Config, ddp: DDPSettings) -> None:
    """SpecError for a run to a target whose evaluations would fall between synchronisations:
    with local SGD or DiLoCo the replicas hold the same parameters only after step counts that
    are multiples of ``ddp.period`` (`greenbench.strategies.ddp_periodic`; local SGD's warm-up
    is placed so, whatever its length), so ``eval.every`` must be one."""
    train, evaluation = config.train, config.eval
    if ddp.sync == "every-step" or train is None or train.until != "target" or evaluation is None:
        return
    if evaluation.every % ddp.period:
        every = setting_of(type(evaluation), "every").key
        period = setting_of(DDPSettings, "period").key
        raise SpecError(
            f"{every}={evaluation.every} must be a multiple of {period}={ddp.period} with "
            f"ddp.sync={ddp.sync}: the replicas agree only right after a synchronisation"
        )


def compressed(rows: int, cols: int, rank: int) -> bool:
    """Whether PowerSGD compresses a rows×cols matrix at ``rank`` (torch's rule, the rank
    capped at the matrix's smaller side, with `MIN_COMPRESSION_RATE`)."""
    r = min(rows, cols, rank)
    return (rows + cols) * r * MIN_COMPRESSION_RATE < rows * cols


def model_matrices(info: ModelInfo) -> list[tuple[int, int]]:
    """The distinct shapes of a model's weight matrices as PowerSGD views them (a tensor as
    its first dimension by the rest; a Conv1d weight (C, 1, K) as C×K), from its torch-free
    card: the embedding and LM head, and the blocks' projections (a family not named here: its
    embedding and head only)."""
    d, vocab = info.d_model, info.vocab_size
    shapes = [(vocab, d)]
    if info.family == "transformer":
        ffn = info.d_ffn or 0
        shapes += [(d, d), (info.kv_dim, d), (ffn, d), (d, ffn)]
    elif info.family == "mamba":
        inner, state, dt = info.d_inner or 0, info.d_state or 0, info.dt_rank or 0
        shapes += [
            (2 * inner, d),  # in_proj
            (inner, info.d_conv or 0),  # conv1d
            (dt + 2 * state, inner),  # x_proj
            (inner, dt),  # dt_proj
            (inner, state),  # A_log
            (d, inner),  # out_proj
        ]
    elif info.family == "mamba2":
        inner, heads = info.d_inner or 0, info.n_heads or 0
        bc = 2 * (info.n_groups or 0) * (info.d_state or 0)
        shapes += [(2 * inner + bc + heads, d), (inner + bc, info.d_conv or 0), (d, inner)]
    return sorted(set(shapes))


def largest_rank(rows: int, cols: int) -> int:
    """The largest rank at which PowerSGD compresses a rows×cols matrix (0: none): below its
    smaller side, and ``(rows + cols) · r · rate < rows · cols`` (`compressed`)."""
    below = math.ceil(rows * cols / ((rows + cols) * MIN_COMPRESSION_RATE)) - 1
    return max(0, min(rows - 1, cols - 1, below))


def check_powersgd_rank(rank: int, info: ModelInfo) -> None:
    """SpecError where PowerSGD at ``rank`` would compress none of the model's matrices (every
    one reduced whole: plain DDP at PowerSGD's cost)."""
    most = max(largest_rank(rows, cols) for rows, cols in model_matrices(info))
    if rank > most:
        raise SpecError(
            f"ddp.powersgd_rank={rank} compresses no matrix of {info.family}/{info.size} "
            f"(PowerSGD compresses an n×m matrix where (n+m)·r·{MIN_COMPRESSION_RATE:g} < n·m, "
            f"r below its smaller side): use a rank of at most {most}"
        )
