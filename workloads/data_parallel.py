"""The ``data-parallel`` workload: how long data-parallel ranks (DDP, FSDP) wait on skewed
post-training sequence lengths, and what the waiting costs.
"""

from greenbench.workload import Workload

WORKLOAD = Workload(
    name="data-parallel",
    question=(
        "How much time do data-parallel ranks spend waiting when post-training sequence "
        "lengths are skewed, and what does that waiting cost in joules?"
    ),
    base={
        "model": {"size": "tiny"},
        "strategy": "ddp",
        "nproc": 2,
        "data": {
            # LongAlign at 1/64 scale spans ~110–900 tokens: rows of 1024 keep documents whole
            "seq_len": 1024,
            "scale": 1.0 / 64.0,
            "global_batch": 16,
            "micro_batch": 1,
            # what a plain DDP/FSDP script does: DistributedSampler's split, equal
            # microbatch counts; "same-count" balances ranks' costs first (ODC's baseline)
            "balance": "sampler",
        },
    },
    sweep={"strategy": ["ddp", "fsdp"], "data": {"lengths": ["fixed", "longalign"]}},
)
