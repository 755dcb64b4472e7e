"""The schedule's rules: paths (stages, swaps, length), even shares, orders, memory, and orders
that cannot all be followed; on hand-made schedules of the 4-node topology."""

from __future__ import annotations

from dataclasses import replace

import pytest

from greenbench.errors import SpecError
from greenbench.planner.skippipe.schedule import (
    InvalidSchedule,
    IterationShape,
    Microbatch,
    Schedule,
    Task,
    runner_order,
    stage_orders,
    swaps,
    validate,
    violations,
)
from greenbench.planner.skippipe.simulator import fifo_schedule
from greenbench.planner.skippipe.topology import small_topology

T = small_topology()  # data node 0; stage 1: nodes 1, 2; stage 2: node 3; memory 2
FULL = IterationShape(microbatches_per_data_node=2, stages_per_path=3, max_swaps=0)


def scheduled(*paths: tuple[int, ...]) -> Schedule:
    mbs = tuple(Microbatch(i, p) for i, p in enumerate(paths))
    return fifo_schedule(Schedule("test", mbs, tuple(() for _ in T.nodes)), T)


def test_swaps_count_adjacent_stage_exchanges() -> None:
    assert swaps([1, 2, 3]) == 0
    assert swaps([1, 3, 2, 5]) == 1
    assert swaps([2, 1, 4, 3]) == 2
    assert swaps([3, 1]) is None  # stages two apart
    assert swaps([3, 2, 1]) is None


def test_stage_orders_of_the_published_setup() -> None:
    orders = stage_orders(6, 4, 1)
    assert len(orders) == 22  # 10 subsets of 3 of 5 stages, 12 with one adjacent swap
    assert (1, 3, 2) in orders and (2, 1, 4) in orders and (3, 1, 2) not in orders
    assert len(stage_orders(6, 4, 0)) == 10


def test_skip_ratio_to_stages_per_path() -> None:
    assert IterationShape.from_skip_ratio(6, 1 / 3, 6).stages_per_path == 4
    assert IterationShape.from_skip_ratio(6, 0.0, 6).stages_per_path == 6
    assert IterationShape.from_skip_ratio(3, 1 / 3, 4).stages_per_path == 2
    assert IterationShape.from_skip_ratio(3, 0.9, 4).stages_per_path == 2  # at least one
    with pytest.raises(SpecError):
        IterationShape.from_skip_ratio(6, 1.0, 6)
    with pytest.raises(SpecError):
        IterationShape(0, 3)


def test_a_valid_schedule_passes() -> None:
    s = scheduled((0, 1, 3, 0), (0, 2, 3, 0))
    assert violations(s, T, FULL) == []
    assert validate(s, T, FULL) is s
    assert s.stage_visits(T) == (2, 2, 2)
    assert s.node_visits(4) == (2, 1, 1, 2)


def test_microbatch_neighbours_and_steps() -> None:
    mb = Microbatch(0, (0, 2, 3, 0))
    assert mb.next_node(0) == 2 and mb.next_node(3) == 0
    assert mb.previous_node(3) == 2 and mb.previous_node(0) is None
    assert mb.steps() == [(0, "F"), (2, "F"), (3, "F"), (0, "L"), (3, "B"), (2, "B"), (0, "B")]


@pytest.mark.parametrize(
    ("paths", "shape", "message"),
    [
        (((0, 1, 3, 1), (0, 2, 3, 0)), FULL, "start and end at one data node"),
        (((0, 1, 2, 0), (0, 2, 3, 0)), FULL, "visits a stage twice"),
        (((0, 3, 1, 0), (0, 3, 2, 0)), FULL, "adjacent-stage swaps"),
        (((0, 1, 0), (0, 2, 3, 0)), FULL, "visits 2 stages, not 3"),
        (((0, 1, 0), (0, 2, 0)), IterationShape(2, 2), "uneven shares"),
        (((0, 1, 3, 0),), FULL, "sends 1 microbatches, not 2"),
        (((0, 1, 3, 0), (0, 7, 3, 0)), FULL, "outside"),
    ],
)
def test_broken_paths_are_named(paths, shape, message) -> None:
    mbs = tuple(Microbatch(i, p) for i, p in enumerate(paths))
    s = Schedule("broken", mbs, tuple(() for _ in T.nodes))
    assert any(message in v for v in violations(s, T, shape)), violations(s, T, shape)
    with pytest.raises(InvalidSchedule, match="broken"):
        validate(s, T, shape)


def test_memory_cap_is_checked_along_each_order() -> None:
    s = scheduled((0, 1, 3, 0), (0, 1, 3, 0), (0, 2, 3, 0), (0, 2, 3, 0))
    shape = replace(FULL, microbatches_per_data_node=4)
    assert violations(s, T, shape) == []
    # node 3 forwards all four before any backward: four held at once, memory is 2
    tasks = [Task(i, "F") for i in range(4)] + [Task(i, "B") for i in range(4)]
    greedy = replace(s, order=(*s.order[:3], tuple(tasks)))
    assert any("holds 4 microbatches" in v for v in violations(greedy, T, shape))


def test_orders_must_list_every_task_and_keep_forward_first() -> None:
    s = scheduled((0, 1, 3, 0), (0, 2, 3, 0))
    missing = replace(s, order=(s.order[0][:-1], *s.order[1:]))
    assert any("each of its tasks once" in v for v in violations(missing, T, FULL))
    backwards = replace(s, order=(s.order[0], tuple(reversed(s.order[1])), *s.order[2:]))
    assert any("before its forward" in v for v in violations(backwards, T, FULL))


def test_orders_that_wait_on_each_other_are_refused() -> None:
    s = scheduled((0, 1, 3, 0), (0, 1, 3, 0))
    # node 1 insists on microbatch 1 first, node 0 sends microbatch 0 first and holds
    # microbatch 1's forward until microbatch 0's loss, which needs node 1: a cycle
    node0 = (Task(0, "F"), Task(0, "L"), Task(1, "F"), Task(1, "L"), Task(0, "B"), Task(1, "B"))
    node1 = (Task(1, "F"), Task(0, "F"), Task(0, "B"), Task(1, "B"))
    stuck = replace(s, order=(node0, node1, *s.order[2:]))
    assert any("cannot all be followed" in v for v in violations(stuck, T, FULL))


def test_runner_order_uses_the_runners_task_names() -> None:
    s = scheduled((0, 1, 3, 0), (0, 2, 3, 0))
    order = runner_order(s, T)
    assert [kind for kind, _ in order[0]].count("E") == 2
    assert {kind for kind, _ in order[0]} == {"E", "L", "G"}
    assert {kind for kind, _ in order[3]} == {"F", "B"}
    assert order[2] == (("F", 1), ("B", 1))
