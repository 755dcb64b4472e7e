"""The ``transformer-vs-mamba`` workload: a Transformer against the state-space models
(Mamba, Mamba-2) of the same size, over sequence lengths.
"""

from greenbench.workload import Workload

WORKLOAD = Workload(
    name="transformer-vs-mamba",
    question=(
        "Does a state-space model (Mamba, Mamba-2) train more tokens per joule than a "
        "Transformer of the same parameter count, and at which sequence length does it "
        "win?"
    ),
    base={"model": {"size": "tiny"}, "data": {"lengths": "fixed"}, "strategy": "single"},
    sweep={
        "model": {"family": ["transformer", "mamba", "mamba2"]},
        "data": {"seq_len": [256, 512, 1024, 2048]},
    },
)
