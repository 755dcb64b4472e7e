"""The ``comm-efficient`` workload: what the standard ways of spending less on data-parallel
communication save in bytes, time and joules, and over which link.

Each configuration is DDP with one method from the ``ddp`` section (`greenbench.strategies.
ddp_settings`): bf16 or PowerSGD compression of the gradient all-reduce, local SGD or DiLoCo
(parameters averaged every ``ddp.period`` steps), or bounded staleness. The suite
(`suites/comm-efficient.toml`) runs each at 2 and 4 ranks, on the host's own transport and over
an emulated 1 Gb/s, 10 ms link (`greenbench.distributed.link`), in windows of whole periods
(16 steps). Compression and infrequent synchronisation change what the model learns: their
quality is judged by energy to a target loss in the convergence suite, never by J/token alone.
"""

from greenbench.workload import Workload

WORKLOAD = Workload(
    name="comm-efficient",
    question=(
        "How many bytes per step do gradient compression, local SGD, DiLoCo and bounded "
        "staleness save against DDP, and what does that save in time and energy on a fast "
        "and on a slow link?"
    ),
    base={
        "model": {"size": "tiny", "family": "transformer"},
        "strategy": "ddp",
        "nproc": 2,
        "data": {"lengths": "fixed", "seq_len": 128, "global_batch": 8, "micro_batch": 2},
        # windows of whole periods (16 steps: local SGD and DiLoCo at H=16 average once)
        "train": {"steps": 16, "warmup_steps": 2, "min_window_s": 0.0},
    },
    sweep={"nproc": [2, 4]},
)
