"""The ``skippipe`` section: SkipPipe's stages, skips, scheduler, a node that stops serving, the
simulator and its network, and the heterogeneity its runs emulate (``emulate.link_*``,
``emulate.slow*``). Part of a run's identity only where the strategy is skippipe; the emulated
link (``emulate.link_*``) also for DDP where it is set (`greenbench.distributed.link`)."""

from __future__ import annotations

from typing import Any

from greenbench.config import NON_NEGATIVE, section, setting, when


def _skippipe(s: Any) -> bool:
    return s.get("strategy") == "skippipe"


def _simulated(s: Any) -> bool:
    """A simulated SkipPipe run: only it has a network to choose (a real run's nodes are its
    ranks), so real runs' identities stay as they were."""
    return _skippipe(s) and s.get("skippipe.mode") == "simulate"


SKIPPIPE = when(_skippipe)


def _link_counts(key: str) -> Any:
    """An emulated link's setting counts for SkipPipe always (as it always has) and for DDP
    where it is set (its own methods are judged over a slow link), so no stored key changes."""
    return when(lambda s: _skippipe(s) or (s.get("strategy") == "ddp" and bool(s.get(key))))


#: the schedules that send every microbatch through every stage (no skip): ``full`` feeds a
#: stage's replicas in turn, ``full-aware`` only its replicas that are not stragglers
FULL_SCHEDULES = ("full", "full-aware")


def skips(schedule: str) -> bool:
    """Whether a schedule's microbatches skip stages (``skippipe``, ``random``)."""
    return schedule not in FULL_SCHEDULES


@section("skippipe", "SkipPipe (strategy=skippipe): stages, skips, scheduler, emulated network.",
         built_in_only=True)  # fmt: skip
class SkipPipeSettings:
    mode: str = setting(
        "real",
        "real | simulate (the discrete-event simulator, labelled)",
        choices=("real", "simulate"),
        identity=SKIPPIPE,
    )
    network: str = setting(
        "local",
        "the simulated network: local (the run's own nodes on one host, emulate.link_* links) | "
        "gcp12 (SkipPipe's published 20 nodes over 12 GCP regions; skippipe.stages=5-3-3-3-3-3)",
        choices=("local", "gcp12"),
        identity=when(_simulated),
    )
    stages: str = setting("1-2-1", "nodes per stage, data nodes first", identity=SKIPPIPE)
    skip: float = setting(
        0.5, "the share of the other stages each microbatch skips", identity=SKIPPIPE
    )
    schedule: str = setting(
        "skippipe",
        "the paths' scheduler: skippipe | random (stages skipped at random, seeded by seed) | "
        "full (every stage, GPipe order, a stage's replicas in turn) | full-aware (the same, "
        "but only through a stage's replicas that are not emulate.slow_nodes)",
        choices=("skippipe", "random", "full", "full-aware"),
        identity=SKIPPIPE,
    )
    fail_node: int = setting(
        -1, "this node stops serving from step skippipe.fail_step", identity=SKIPPIPE
    )
    fail_step: int = setting(
        0, "the step skippipe.fail_node stops at", bound=NON_NEGATIVE, identity=SKIPPIPE
    )
    link_latency_ms: float = setting(
        0.0,
        "emulated link delay between nodes (skippipe; ddp's collectives too)",
        bound=NON_NEGATIVE,
        identity=_link_counts("emulate.link_latency_ms"),
        key="emulate.link_latency_ms",
    )
    link_bandwidth_gbps: float = setting(
        0.0,
        "emulated link bandwidth in Gb/s (0: no limit; skippipe; ddp's collectives too)",
        bound=NON_NEGATIVE,
        identity=_link_counts("emulate.link_bandwidth_gbps"),
        key="emulate.link_bandwidth_gbps",
    )
    slow_nodes: str = setting(
        "",
        'ranks that compute emulate.slowdown times as long: "2", "1-3"',
        identity=SKIPPIPE,
        key="emulate.slow_nodes",
    )
    slowdown: float = setting(
        1.0, "how much longer slow nodes compute", identity=SKIPPIPE, key="emulate.slowdown"
    )
