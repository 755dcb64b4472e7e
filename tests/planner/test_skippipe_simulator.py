"""The simulator on cases worked by hand: one microbatch on two nodes, two microbatches with
memory for one and for two, following an order against first come first served, per-node
busy and idle seconds, modelled energy, and orders that cannot be followed."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from greenbench.planner.skippipe.network import uniform_network
from greenbench.planner.skippipe.schedule import Microbatch, Schedule, Task
from greenbench.planner.skippipe.simulator import (
    SimulationStuck,
    fifo_schedule,
    simulate,
    simulate_energy,
)
from greenbench.planner.skippipe.topology import build_topology


def two_nodes(memory: int = 1):
    """Data node 0 and node 1 (stage 1, twice as slow): forwards 0.2 s and 0.4 s, the loss
    0.05 s, backwards 0.3 s and 0.6 s; a hop 0.05 s latency + 0.25 GiB at 1 GiB/s + 0.1 s."""
    return build_topology(
        ["here", "here"],
        [0, 1],
        uniform_network(("here",), latency_ms=50.0, bandwidth_gib_s=1.0),
        layers_per_stage=2,
        samples_per_microbatch=1,
        activation_bytes_per_sample=2**28,
        compute_s_per_sample_layer=0.1,
        slowdown=[1.0, 2.0],
        hop_overhead_s=0.1,
        memory_microbatches=memory,
    )


def draft(n: int) -> Schedule:
    mbs = tuple(Microbatch(i, (0, 1, 0)) for i in range(n))
    return Schedule("hand", mbs, ((), ()))


def test_one_microbatch_takes_its_round_trip() -> None:
    t = two_nodes()
    assert t.link_s(0, 1) == pytest.approx(0.4)
    r = simulate(draft(1), t, follow_order=False)
    # F0 0.2, hop, F1 0.4, hop, L 0.05, hop, B1 0.6, hop, B0 0.3
    assert r.iteration_s == pytest.approx(0.2 + 0.4 + 0.4 + 0.4 + 0.05 + 0.4 + 0.6 + 0.4 + 0.3)
    assert r.iteration_s == pytest.approx(t.round_trip_s((0, 1, 0)))
    assert r.busy_s == pytest.approx((0.55, 1.0))
    assert r.idle_s == pytest.approx((2.6, 2.15))
    assert r.stage_microbatches == (1, 1)
    assert (r.collisions, r.queued_s) == (0, 0.0)
    steps = [(iv.node, iv.phase, round(iv.start_s, 9)) for iv in sorted(r.intervals,
             key=lambda iv: iv.start_s)]  # fmt: skip
    assert steps == [(0, "F", 0.0), (1, "F", 0.6), (0, "L", 1.4), (1, "B", 1.85), (0, "B", 2.85)]


def test_memory_for_one_runs_microbatches_one_after_another() -> None:
    r = simulate(draft(2), two_nodes(memory=1), follow_order=False)
    assert r.iteration_s == pytest.approx(2 * 3.15)
    assert max(r.max_in_flight) == 1


def test_memory_for_two_overlaps_them_and_counts_the_collisions() -> None:
    r = simulate(draft(2), two_nodes(memory=2), follow_order=False)
    # microbatch 1 starts at 0.2, reaches node 1 at 0.8 while it computes microbatch 0's
    # forward (until 1.0), and its backward at 2.25 while node 1 is on microbatch 0's (until
    # 2.45): it queues twice, 0.2 s each; its last backward on the data node is 3.45..3.75
    assert r.iteration_s == pytest.approx(3.75)
    assert r.collisions == 2
    assert r.queued_s == pytest.approx(0.4)
    assert r.max_in_flight == (2, 2)


def test_following_the_first_come_first_served_orders_replays_that_run() -> None:
    t = two_nodes(memory=2)
    s = fifo_schedule(draft(3), t)
    fifo, followed = simulate(s, t, follow_order=False), simulate(s, t)
    assert followed.iteration_s == pytest.approx(fifo.iteration_s)

    def key(r):
        return [(iv.node, iv.microbatch, iv.phase, pytest.approx(iv.start_s)) for iv in r.intervals]

    assert key(followed) == key(fifo)
    assert s.order[1][:2] == (Task(0, "F"), Task(1, "F"))


def test_an_order_can_hold_a_node_idle_and_a_release_delays_a_start() -> None:
    t = two_nodes(memory=2)
    s = fifo_schedule(draft(2), t)
    # node 1 keeps microbatch 1's forward until microbatch 0's backward is done
    order1 = (Task(0, "F"), Task(0, "B"), Task(1, "F"), Task(1, "B"))
    late = replace(s, order=(s.order[0], order1))
    r = simulate(late, t)
    f1 = next(iv for iv in r.intervals if iv.node == 1 and iv.microbatch == 1 and iv.phase == "F")
    assert f1.ready_s == pytest.approx(0.8) and f1.start_s == pytest.approx(2.45)
    held = replace(s, microbatches=(s.microbatches[0], replace(s.microbatches[1], release_s=5.0)))
    first = next(iv for iv in simulate(held, t).intervals if iv.microbatch == 1)
    assert first.start_s == pytest.approx(5.0)


def test_busy_intervals_never_overlap_on_a_node() -> None:
    t = two_nodes(memory=2)
    r = simulate(draft(4), t, follow_order=False)
    for node in (0, 1):
        ivs = sorted((iv for iv in r.intervals if iv.node == node), key=lambda iv: iv.start_s)
        assert all(a.end_s <= b.start_s + 1e-9 for a, b in itertools.pairwise(ivs))


def test_modelled_energy_is_busy_and_idle_seconds_at_their_watts() -> None:
    r = simulate(draft(1), two_nodes(), follow_order=False)
    e = simulate_energy(r, busy_w=100.0, idle_w=10.0)
    assert e.node_j == pytest.approx((0.55 * 100 + 2.6 * 10, 1.0 * 100 + 2.15 * 10))
    assert e.joules == pytest.approx(202.5)
    assert e.busy_j == pytest.approx(155.0)
    assert "modelled" in e.label
    per_node = simulate_energy(r, busy_w=[100.0, 0.0], idle_w=[0.0, 10.0])
    assert per_node.joules == pytest.approx(55.0 + 21.5)
    with pytest.raises(ValueError, match="per node"):
        simulate_energy(r, busy_w=[1.0], idle_w=1.0)


def test_orders_that_wait_on_each_other_raise() -> None:
    t = two_nodes(memory=2)
    s = fifo_schedule(draft(2), t)
    stuck = replace(s, order=(s.order[0], (Task(1, "F"), Task(1, "B"), Task(0, "F"),
                                           Task(0, "B"))))  # fmt: skip
    node0 = (Task(0, "F"), Task(0, "L"), Task(1, "F"), Task(1, "L"), Task(0, "B"), Task(1, "B"))
    stuck = replace(stuck, order=(node0, stuck.order[1]))
    with pytest.raises(SimulationStuck, match="wait on each other"):
        simulate(stuck, t)
