"""The sections of a run to a target loss (``train.until = target``): how often and on how much
held-out data the model is evaluated (``eval``), and the target with its budget (``target``).
Part of a run's identity only where it trains to a target."""

from __future__ import annotations

from typing import Any

from greenbench.config import NON_NEGATIVE, POSITIVE, Config, section, setting, when
from greenbench.errors import SpecError

#: ``train.until``'s values: a measured window of steps (every run before it), or a target loss
UNTIL = ("window", "target")


def _to_target(s: Any) -> bool:
    return s.get("train.until") == "target"


TO_TARGET = when(_to_target)


@section("eval", "Evaluation on the held-out set of a run to a target loss.", built_in_only=True)
class EvalSettings:
    every: int = setting(
        10, "optimizer steps between evaluations (and before the first)", bound=POSITIVE,
        identity=TO_TARGET,
    )  # fmt: skip
    docs: int = setting(
        64,
        "documents in the held-out set (drawn from the training data's chain, from a stream "
        "training never draws from)",
        bound=POSITIVE,
        identity=TO_TARGET,
    )


@section("target", "The loss a run to a target aims at, and its budget.", built_in_only=True)
class TargetSettings:
    gap_closed: float = setting(
        0.6,
        "the share of the gap between ln V (untrained) and the data's entropy floor to close",
        bound=POSITIVE,
        identity=TO_TARGET,
    )
    loss: float = setting(
        0.0,
        "an absolute target loss in nats per token (0: from target.gap_closed)",
        bound=NON_NEGATIVE,
        identity=TO_TARGET,
    )
    max_steps: int = setting(
        1000, "the most optimizer steps a run to a target trains", bound=POSITIVE,
        identity=TO_TARGET,
    )  # fmt: skip
    max_tokens: int = setting(
        0, "the most tokens it trains (0: no limit)", bound=NON_NEGATIVE, identity=TO_TARGET
    )
    max_s: float = setting(
        600.0, "the most seconds of training (0: no limit)", bound=NON_NEGATIVE,
        identity=TO_TARGET,
    )  # fmt: skip
    max_j: float = setting(
        0.0, "the most joules of training (0: no limit)", bound=NON_NEGATIVE, identity=TO_TARGET
    )

    def check(self, config: Config) -> None:
        if config.train.until != "target":
            return
        if config.data is None or config.model is None:
            raise SpecError(
                "train.until=target needs greenbench's own data (its held-out set and entropy "
                "floor): a user workload has none"
            )
        if config.emulate.gpu:
            raise SpecError(
                "train.until=target does not run on an emulated GPU (its steps take a modelled "
                "time, its evaluations none): leave emulate.gpu empty"
            )
        if config.run.strategy == "skippipe" and config.skippipe.mode == "simulate":
            raise SpecError(
                "train.until=target trains a model: a simulated SkipPipe run (skippipe.mode="
                "simulate) trains none"
            )
        resolved_target(config)


def resolved_target(config: Config) -> float:
    """The absolute loss ``config``'s run to a target aims at (`greenbench.data.target`), from
    its family's vocabulary and its data's chain (``data.chain_seed``, or the run's seed)."""
    from greenbench.data.target import loss_floor, target_loss
    from greenbench.models import model_info

    vocab = model_info(config.model.family, config.model.size).vocab_size
    chain_seed = config.data.chain_seed if config.data.chain_seed >= 0 else config.run.seed
    floor = loss_floor(vocab, chain_seed)
    t = config.target
    return target_loss(vocab, floor, gap_closed=t.gap_closed, loss=t.loss)
