"""The ``convergence`` workload: energy and time to a common target loss, so setups that do
different work per token (a skip schedule, another model family, another way of sharing the
minibatch) are compared at equal quality. Every configuration trains from initialisation until
its loss on a held-out set reaches the same target (``train.until = target``), on one fixed
chain (``data.chain_seed``) whose entropy floor sets the target, so every seed and family aims
at the same loss. The suite (`suites/convergence.toml`) picks the comparisons: the three
families on one rank, DDP against FSDP and ODC at two ranks (which must reach the same loss at
every step), and SkipPipe against the straggler-aware full pipeline.
"""

from greenbench.workload import Workload

WORKLOAD = Workload(
    name="convergence",
    question=(
        "Which setup reaches the same held-out loss with the least energy and time: which "
        "model family, which data-parallel strategy, and does skipping pipeline stages save "
        "energy once its tokens must reach the same loss?"
    ),
    base={
        "model": {"size": "tiny", "family": "transformer"},
        "strategy": "single",
        "data": {
            "lengths": "fixed",
            "seq_len": 128,
            "global_batch": 8,
            "micro_batch": 8,
            "chain_seed": 0,
        },
        "train": {"until": "target"},
        # 0.6 of the gap between ln V and the chain's entropy floor; the budget bounds a run
        # that does not get there (stored "not reached" with its best loss)
        "target": {"gap_closed": 0.6, "max_steps": 600, "max_s": 300.0},
        "eval": {"every": 10, "docs": 64},
    },
    sweep={"model": {"family": ["transformer", "mamba", "mamba2"]}},
)
