"""The ``power-limit`` workload: GPU power limits, energy per token against speed, and
Zeus's choice beside them.
"""

from greenbench.workload import Workload

WORKLOAD = Workload(
    name="power-limit",
    question=(
        "How much energy per token does a lower GPU power limit save, and what does it "
        "cost in speed? The energy–time Pareto over limits, the lowest-J/token limit "
        "within 10 % of full speed, and Zeus's choice beside it"
    ),
    base={
        # a GPU size: on a machine without GPUs, emulate.gpu and a tiny model try it
        "model": {"size": "125m"},
        "strategy": "single",
        "data": {"lengths": "fixed", "seq_len": 1024, "global_batch": 8, "micro_batch": 4},
        # long windows: NVML's counter steps every ~100 ms, and a limit settles in ~1 s
        "train": {"min_window_s": 5.0},
    },
    sweep={
        "model": {"family": ["transformer", "mamba"]},
        "gpu": {"power_limit_frac": [1.0, 0.85, 0.7, 0.55]},
    },
)
