"""Errors, Spearman's ρ and regret (`greenbench.planner.scoring`) on hand-worked examples."""

from __future__ import annotations

import pytest

from greenbench.errors import SpecError
from greenbench.planner.scoring import median_abs, regret, relative_error, spearman


def test_spearman_on_a_hand_example() -> None:
    predicted = [1.0, 2.0, 3.0, 4.0, 5.0]
    measured = [10.0, 30.0, 20.0, 40.0, 50.0]  # ranks 1 3 2 4 5: d² = 0 1 1 0 0
    assert spearman(predicted, measured) == pytest.approx(1 - 6 * 2 / (5 * (25 - 1)))  # 0.9
    assert spearman(predicted, measured[::-1]) == pytest.approx(-0.9)
    assert spearman([1.0, 2.0, 3.0], [5.0, 6.0, 70.0]) == pytest.approx(1.0)  # ranks only
    assert spearman([1.0, 2.0], [1.0, 2.0]) is None  # too few pairs
    assert spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None  # one side constant
    with pytest.raises(ValueError):
        spearman([1.0, 2.0, 3.0], [1.0, 2.0])


def test_regret_on_a_hand_example() -> None:
    assert regret([1.2, 1.0, 1.5]) == pytest.approx(0.2)  # the second pick was fastest
    assert regret([1.0, 1.2, 1.5]) == 0.0
    assert regret([1.1, None, 1.0]) == pytest.approx(0.1)  # a failed run passed over
    assert regret([None, 1.0]) is None  # the first pick measured nothing
    with pytest.raises(SpecError):
        regret([])


def test_errors() -> None:
    assert relative_error(1.5, 1.0) == pytest.approx(0.5)
    assert relative_error(1.0, None) is None
    assert median_abs([-0.3, 0.1, None, 0.2]) == pytest.approx(0.2)
    assert median_abs([None]) is None
