"""The settings check the data-parallel strategies share (without torch: the spec runs it)."""

from __future__ import annotations

from greenbench.config import Config
from greenbench.errors import SpecError
from greenbench.vocabulary import Layout


def check_split(global_batch: int, parts: int, *, held_out: bool = False) -> None:
    """SpecError unless a minibatch of ``global_batch`` documents (the held-out set's with
    ``held_out``) splits into ``parts``."""
    if global_batch % parts:
        what = f"eval.docs={global_batch}" if held_out else f"data.global_batch={global_batch}"
        raise SpecError(f"{what} must be divisible by the number of data-parallel ranks ({parts})")


def check_data_parallel(config: Config, layout: Layout) -> None:
    """Every data-parallel rank gets an equal share of the minibatch's documents, and of the
    held-out set's where the run trains to a target."""
    check_split(config.data.global_batch, layout.dp)
    if config.train is not None and config.train.until == "target" and config.eval is not None:
        check_split(config.eval.docs, layout.dp, held_out=True)


def check_ranks(strategy: str, layout: Layout) -> None:
    """SpecError where a data-parallel strategy is given one rank: it would start and fail
    without a process group; ``single`` trains the same minibatches on one."""
    if layout.world < 2:
        raise SpecError(
            f"strategy={strategy} needs 2 ranks or more (nproc × nnodes is 1): strategy=single "
            "trains the same on one"
        )
