"""The ``data`` section: the synthetic post-training data, its lengths, batches and how ranks'
shares of it are balanced."""

from __future__ import annotations

from greenbench.config import (
    ALWAYS,
    AWAY_FROM_DEFAULT,
    NEVER,
    NON_NEGATIVE,
    POSITIVE,
    section,
    setting,
)


def _lengths() -> list[str]:
    from greenbench.data.lengths import LENGTH_DISTRIBUTIONS

    return list(LENGTH_DISTRIBUTIONS)


def _cost_models() -> list[str]:
    from greenbench.data.packing import COST_MODELS, MEASURED

    return [*COST_MODELS, MEASURED]


@section("data", "The synthetic, learnable data each step trains on.", built_in_only=True)
class DataSettings:
    lengths: str = setting(
        "fixed", "the document-length distribution", registry=_lengths, identity=ALWAYS
    )
    seq_len: int = setting(256, "tokens per packed row", bound=POSITIVE, identity=ALWAYS)
    global_batch: int = setting(
        8, "sequences per optimizer step, over all ranks", bound=POSITIVE, identity=ALWAYS
    )
    micro_batch: int = setting(4, "packed rows per microbatch", bound=POSITIVE, identity=ALWAYS)
    scale: float = setting(
        1.0 / 32.0,
        "length scale for post-training distributions on CPU",
        bound=POSITIVE,
        identity=ALWAYS,
    )
    cost_model: str = setting(
        "linear",
        "what a microbatch costs, for balancing ranks (measured: a·s² + b·s fitted on this "
        "machine for the run's model, stored and reused)",
        registry=_cost_models,
        identity=ALWAYS,
    )
    cost_a: float = setting(
        0.0,
        "a of data.cost_model=measured (seconds; 0 with cost_b 0: the launcher fills in the "
        "stored fit, measuring it first where none is stored)",
        bound=NON_NEGATIVE,
        identity=NEVER,
    )
    cost_b: float = setting(
        0.0, "b of data.cost_model=measured (seconds)", bound=NON_NEGATIVE, identity=NEVER
    )
    chain_seed: int = setting(
        -1,
        "seeds the Markov chain the data is drawn from (its transitions, so its loss floor); "
        "-1: the run's seed. A fixed chain lets runs of different seeds learn the same data",
        identity=AWAY_FROM_DEFAULT,
    )
    balance: str = setting(
        "auto",
        "auto (the strategy's own: balanced-cost for odc) | same-count | sampler | balanced-cost",
        choices=("auto", "same-count", "sampler", "balanced-cost"),
        identity=ALWAYS,
    )
