"""The ``hybrid`` workload: the ways of splitting a model over four devices (data, tensor,
pipeline, context parallel and their mixes), for a Transformer and for Mamba.
"""

from greenbench.workload import Workload

WORKLOAD = Workload(
    name="hybrid",
    question=(
        "Which way of splitting a model over four devices (data, tensor, pipeline or "
        "context parallel, or a mix) trains fastest, holds the least per device and "
        "costs the fewest joules per token, for a Transformer and for Mamba?"
    ),
    base={
        "model": {"size": "tiny"},
        # each layout's own strategy: ddp for dpr4, fsdp for dps4, hybrid for the rest
        "strategy": "auto",
        "data": {"lengths": "fixed", "seq_len": 512, "global_batch": 8, "micro_batch": 1},
    },
    sweep={
        "model": {"family": ["transformer", "mamba"]},
        "layout": ["dpr4", "dps4", "tp2-dps2", "pp2-dps2", "pp4", "cp2-dps2", "tp2-pp2"],
    },
)
