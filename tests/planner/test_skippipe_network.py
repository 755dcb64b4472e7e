"""The 12-region matrix, the link model, and topologies: SkipPipe's published figures, the
NL–London decision, the 4-node layout and the allocation search."""

from __future__ import annotations

import itertools

import pytest

from greenbench.errors import SpecError
from greenbench.planner.skippipe.network import (
    NL_LONDON_CORRECTED_GIB_S,
    NL_LONDON_PUBLISHED_GIB_S,
    REGIONS,
    gcp_network,
    link_delay_s,
    uniform_network,
)
from greenbench.planner.skippipe.topology import (
    PUBLISHED_REGION_ORDER,
    PUBLISHED_STAGE_SIZES,
    allocate_stages,
    build_topology,
    published_topology,
    small_topology,
)

# two samples of 16,777,324 bytes, the published schedule's message
MESSAGE = 2 * 16_777_324


def test_matrix_is_symmetric_and_complete() -> None:
    net = gcp_network()
    assert len(REGIONS) == 12
    for i, j in itertools.product(range(12), repeat=2):
        assert net.latency_ms[i][j] == net.latency_ms[j][i]
        assert net.bandwidth_gib_s[i][j] == net.bandwidth_gib_s[j][i]
        assert net.bandwidth_gib_s[i][j] > 0
    assert net.link("Iowa", "Iowa") == (1.0, 2.0)


def test_published_figures() -> None:
    net = gcp_network(published_nl_london=True)
    assert net.link("Australia", "Belgium") == (129.0, 0.00982666015625)
    assert net.link("Oregon", "LA") == (12.4, 0.1185302734375)
    assert net.link("Canada", "Singapore") == pytest.approx((107.0, 0.01193847))
    # the published schedule's delays: Belgium–Germany and NL–London, with its 0.35 s per hop
    assert net.delay_s("Belgium", "Germany", MESSAGE) + 0.35 == pytest.approx(0.4828668089306)
    assert net.delay_s("NL", "London", MESSAGE) + 0.35 == pytest.approx(132.3144123449581)


def test_nl_london_is_corrected_by_default() -> None:
    assert NL_LONDON_PUBLISHED_GIB_S == 0.00023681640625  # 0.2425 MiB/s
    assert gcp_network().link("London", "NL") == (4.8, NL_LONDON_CORRECTED_GIB_S)
    assert gcp_network(published_nl_london=True).link("NL", "London")[1] == (
        NL_LONDON_PUBLISHED_GIB_S
    )


def test_link_delay_is_latency_plus_size_over_bandwidth() -> None:
    assert link_delay_s(100.0, 1.0, 2**30) == pytest.approx(1.1)
    net = uniform_network(("a", "b"), latency_ms=10.0, bandwidth_gib_s=0.5)
    assert net.delay_s("a", "b", 2**29) == pytest.approx(1.01)
    with pytest.raises(ValueError, match="unknown region"):
        net.delay_s("a", "Mars", 1)


def test_published_topology() -> None:
    t = published_topology()
    assert len(t.nodes) == 20 and t.n_stages == 6
    assert [len(t.stage_nodes(s)) for s in range(6)] == list(PUBLISHED_STAGE_SIZES)
    assert [t.nodes[d].region for d in t.data_nodes] == [
        "Belgium", "Iowa", "Japan", "London", "Australia",
    ]  # fmt: skip
    assert t.forward_s(0) == pytest.approx(0.055 * 4 * 2)
    assert t.backward_s(7) == pytest.approx(1.5 * 0.44)
    assert t.loss_s(0) == pytest.approx(0.25 * 0.44)
    same_region = [a for a in range(20) for b in range(20) if a != b and (
        t.nodes[a].region == t.nodes[b].region)]  # fmt: skip
    assert t.link_s(same_region[0], same_region[0]) == 0.0
    assert t.link_s(0, 12) == pytest.approx(0.3666251005828381)  # Belgium–Belgium


def test_small_topology_is_the_four_rank_layout() -> None:
    t = small_topology(slowdown=[1, 1, 3, 1])
    assert [n.stage for n in t.nodes] == [0, 1, 1, 2]
    assert t.data_nodes == (0,)
    assert t.stage_nodes(1) == (1, 2)
    assert t.forward_s(2) == pytest.approx(3 * t.forward_s(1))


def test_round_trip_of_one_microbatch() -> None:
    t = small_topology(latency_ms=0.0, bandwidth_gib_s=1e9)
    f = 0.01 * 2  # s per sample and layer × layers × samples
    assert t.round_trip_s((0, 1, 3, 0)) == pytest.approx(3 * f * 2.5 + 0.25 * f, rel=1e-6)


def test_tuned_allocation_beats_node_order_and_is_deterministic() -> None:
    tuned = published_topology(allocation="tuned", seed=3)
    assert tuned == published_topology(allocation="tuned", seed=3)
    plain = build_topology(
        [PUBLISHED_REGION_ORDER[i % 12] for i in range(20)],
        [0] * 5 + [s for s in range(1, 6) for _ in range(3)],
        tuned.network,
        layers_per_stage=4, samples_per_microbatch=2, activation_bytes_per_sample=16_777_324,
        compute_s_per_sample_layer=0.055, hop_overhead_s=0.35,
    )  # fmt: skip

    def slowest(t):  # the full pipelines' slowest round trip, data node d on pipeline d % 3
        rest = [t.stage_nodes(s) for s in range(1, 6)]
        return max(
            t.round_trip_s((d, *(m[i % 3] for m in rest), d)) for i, d in enumerate(t.data_nodes)
        )

    assert slowest(tuned) < slowest(plain)
    columns = allocate_stages(plain, PUBLISHED_STAGE_SIZES, seed=3, restarts=1)
    assert sorted(n for c in columns for n in c) == list(range(20))


def test_invalid_topologies_are_refused() -> None:
    net = uniform_network()
    kwargs = dict(layers_per_stage=1, samples_per_microbatch=1, activation_bytes_per_sample=1,
                  compute_s_per_sample_layer=0.1)  # fmt: skip
    with pytest.raises(SpecError, match="stage 0"):
        build_topology(["local"] * 2, [0, 2], net, **kwargs)
    with pytest.raises(SpecError, match="one of each"):
        build_topology(["local"] * 2, [0], net, **kwargs)
    with pytest.raises(ValueError, match="unknown region"):
        build_topology(["Mars", "local"], [0, 1], net, **kwargs)
    with pytest.raises(SpecError, match="allocation"):
        published_topology(allocation="genetic")
