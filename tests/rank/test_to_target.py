"""A run to a target loss on one rank (`greenbench.rank.to_target`): it stops at the first
evaluation at or below the target, stores ``not reached`` with its best loss when its budget
ends first, keeps evaluation out of the training figures, and a target below the data's floor
is refused before anything runs."""

from __future__ import annotations

import itertools
import math

import pytest

from greenbench.errors import SpecError
from greenbench.launcher.resolve import resolve_spec
from greenbench.rank import worker
from greenbench.settings.target import resolved_target
from greenbench.spec import expand

BASE = {
    "model.family": "transformer", "model.size": "tiny", "device": "cpu", "precision": "fp32",
    "data.seq_len": 64, "data.global_batch": 8, "data.micro_batch": 4, "data.chain_seed": 0,
    "train.until": "target", "train.lr": 3e-3, "eval.every": 5, "eval.docs": 16,
    "repeats": 1, "energy.source": "estimate", "energy.idle_s": 0.0,
}  # fmt: skip


def spec_of(**settings: object):
    (spec,) = expand("transformer-vs-mamba", [{**BASE, **settings}])
    return resolve_spec(spec)


def test_a_run_stops_at_the_first_evaluation_that_reaches_the_target():
    spec = spec_of(**{"target.gap_closed": 0.15, "target.max_steps": 200})
    (result,) = worker.run_rank(spec)
    out = result.target
    assert out is not None and out.reached and out.stopped_by == "reached"
    assert out.target_loss == pytest.approx(resolved_target(spec.config))
    curve = out.curve
    # evaluated before training (an untrained model's loss is about ln V) and every 5 steps
    assert curve[0].step == 0 and curve[0].val_loss == pytest.approx(math.log(1024), abs=0.2)
    assert [p.step for p in curve] == list(range(0, 5 * len(curve), 5))
    assert curve[-1].val_loss <= out.target_loss < min(p.val_loss for p in curve[:-1])
    assert out.steps == curve[-1].step == len(result.step_times_s)
    assert out.best_val_loss == curve[-1].val_loss
    assert out.tokens == curve[-1].tokens == result.tokens  # one rank: every token its own
    # the training figures hold training only: the evaluations' time is measured beside them
    assert out.eval_s > 0 and result.seconds == pytest.approx(curve[-1].seconds)
    assert sum(result.step_times_s) <= result.seconds
    assert result.energy is not None
    assert result.energy.seconds == pytest.approx(result.seconds, rel=1e-3)
    assert curve[-1].joules == pytest.approx(result.energy.energy_j)
    assert all(a.joules < b.joules for a, b in itertools.pairwise(curve))


def test_a_run_out_of_budget_is_stored_not_reached_with_its_best_loss():
    spec = spec_of(**{"target.gap_closed": 0.95, "target.max_steps": 10})
    (result,) = worker.run_rank(spec)
    out = result.target
    assert out is not None and not out.reached and out.stopped_by == "max_steps"
    assert out.steps == 10 and [p.step for p in out.curve] == [0, 5, 10]
    assert out.best_val_loss == min(p.val_loss for p in out.curve) > out.target_loss


def test_each_repeat_trains_from_initialisation():
    spec = spec_of(**{"target.gap_closed": 0.95, "target.max_steps": 5, "repeats": 2})
    first, second = worker.run_rank(spec)
    assert (first.repeat, second.repeat) == (0, 1)
    assert second.target.curve[0].val_loss == pytest.approx(first.target.curve[0].val_loss)
    assert [p.val_loss for p in second.target.curve] == pytest.approx(
        [p.val_loss for p in first.target.curve], abs=1e-5
    )


def test_a_target_below_the_entropy_floor_is_refused():
    with pytest.raises(SpecError, match="entropy floor"):
        spec_of(**{"target.loss": 1.0})
    with pytest.raises(SpecError, match="between 0 and 1"):
        spec_of(**{"target.gap_closed": 1.0})
