"""The ``fsdp-vs-odc`` workload: on-demand communication (ODC) against FSDP on skewed
post-training data, over length distributions and rank counts.
"""

from greenbench.workload import Workload

WORKLOAD = Workload(
    name="fsdp-vs-odc",
    question=(
        "Does on-demand communication (ODC) train skewed post-training data faster and "
        "for fewer joules than FSDP, by letting ranks run different numbers of "
        "microbatches and meet once per minibatch instead of at every microbatch?"
    ),
    base={
        "model": {"size": "tiny"},
        # ODC's shared-memory transport serves CPU ranks of one host (its CUDA IPC
        # transport is not built), so both sides of the comparison run there
        "device": "cpu",
        "data": {
            "seq_len": 1024,
            "scale": 1.0 / 64.0,
            "global_batch": 16,
            "micro_batch": 1,
            # each strategy's own: same-count for fsdp (the paper's baseline: equal
            # microbatch counts), balanced-cost for odc
            "balance": "auto",
        },
    },
    sweep={
        "strategy": ["fsdp", "odc"],
        "data": {"lengths": ["fixed", "uniform", "swe-smith", "longalign"]},
        "nproc": [2, 4],
    },
)
