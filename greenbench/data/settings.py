"""The ``data`` section: the synthetic post-training data, its lengths, batches and how ranks'
shares of it are balanced."""

from __future__ import annotations

from greenbench.config import ALWAYS, POSITIVE, section, setting


def _lengths() -> list[str]:
    from greenbench.data.lengths import LENGTH_DISTRIBUTIONS

    return list(LENGTH_DISTRIBUTIONS)


def _cost_models() -> list[str]:
    from greenbench.data.packing import COST_MODELS

    return list(COST_MODELS)


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
        "what a microbatch costs, for balancing ranks",
        registry=_cost_models,
        identity=ALWAYS,
    )
    balance: str = setting(
        "auto",
        "auto (the strategy's own: balanced-cost for odc) | same-count | sampler | balanced-cost",
        choices=("auto", "same-count", "sampler", "balanced-cost"),
        identity=ALWAYS,
    )
