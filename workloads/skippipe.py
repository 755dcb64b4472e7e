"""The ``skippipe`` workload: skip-scheduled pipeline parallelism against a full pipeline and a
straggler-aware full pipeline, and random skip at the same skip ratio, on emulated slow links,
with and without a straggling node.
"""

from greenbench.workload import Workload

WORKLOAD = Workload(
    name="skippipe",
    question=(
        "With heterogeneous or failing nodes, how much iteration time and energy per useful "
        "token does skip-scheduled pipeline parallelism save over a straggler-aware full "
        "pipeline and over random skip, and what does it cost in loss?"
    ),
    base={
        "model": {"size": "tiny", "family": "transformer"},
        "strategy": "skippipe",
        "nproc": 4,
        "data": {"lengths": "fixed", "seq_len": 256, "global_batch": 8, "micro_batch": 1},
        # a data node, stage 1 (blocks 0-1) on two nodes, stage 2 (blocks 2-3) on one
        "skippipe": {"stages": "1-2-1", "skip": 0.5},
        # links between nodes: 10 ms and 1 Gb/s; a straggler computes 3x as long
        "emulate": {"link_latency_ms": 10.0, "link_bandwidth_gbps": 1.0, "slowdown": 3.0},
    },
    # the full pipeline (a stage's replicas in turn), the straggler-aware one (only replicas
    # that are not the straggler), random skip and SkipPipe at the same skip ratio
    sweep={
        "skippipe": {"schedule": ["full", "full-aware", "random", "skippipe"]},
        "emulate": {"slow_nodes": ["", "2"]},
    },
)
