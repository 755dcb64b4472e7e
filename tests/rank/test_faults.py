"""Injected faults fire on their rank only, before the step or at their microbatch."""

from __future__ import annotations

import pytest

from greenbench.rank.faults import Faults


def test_a_fault_at_step_start_fires_on_arming() -> None:
    faults = Faults(fail_rank=1)
    assert faults.arm(0) is None  # another rank: nothing happens
    with pytest.raises(RuntimeError, match="injected failure on rank 1"):
        faults.arm(1)


def test_a_fault_at_a_microbatch_fires_there() -> None:
    hook = Faults(fail_rank=0, at_microbatch=2).arm(0)
    assert hook is not None
    hook(0)
    hook(1)
    with pytest.raises(RuntimeError, match=r"debug\.fail_rank"):
        hook(2)
