"""The loss a run to a target aims at (``train.until = target``), resolved once per workload.

An untrained model predicts the next token uniformly: its loss is ln V. No model can beat the
synthetic chain's entropy rate H (`greenbench.data.chain`), the floor. A target is stated as the
share of the gap between them a run must close (``target.gap_closed``),

    target = ln V − gap_closed · (ln V − H),

or as an absolute loss (``target.loss``); either is one absolute loss for every seed and family
of a workload whose chain is fixed (``data.chain_seed``) and whose families share a vocabulary.
"""

from __future__ import annotations

import functools
import math

from greenbench.data.chain import MarkovChain
from greenbench.errors import SpecError


@functools.lru_cache(maxsize=32)
def loss_floor(vocab_size: int, chain_seed: int) -> float:
    """The entropy rate (nats per predicted token) of the chain ``chain_seed`` seeds over
    ``vocab_size`` tokens: the lowest loss any model can reach on its data."""
    return MarkovChain(vocab_size=vocab_size, seed=chain_seed).entropy_rate_nats


def target_loss(vocab_size: int, floor: float, *, gap_closed: float, loss: float = 0.0) -> float:
    """The absolute target: ``loss`` where given (above 0), else ``gap_closed`` of the gap
    between ln V and ``floor``. A target at or below the floor, or at or above ln V, is refused
    (`SpecError`): no run could reach the one, every run starts at the other."""
    untrained = math.log(vocab_size)
    if loss > 0:
        if loss <= floor:
            raise SpecError(
                f"target.loss={loss:g} is at or below the data's entropy floor {floor:.4f} nats: "
                "no model can reach it"
            )
        if loss >= untrained:
            raise SpecError(
                f"target.loss={loss:g} is at or above ln V = {untrained:.4f}, where an untrained "
                "model starts"
            )
        return float(loss)
    if not 0.0 < gap_closed < 1.0:
        raise SpecError(
            f"target.gap_closed={gap_closed:g} must lie strictly between 0 and 1 (1 is the "
            f"entropy floor {floor:.4f} nats, which no model reaches)"
        )
    return untrained - gap_closed * (untrained - floor)
