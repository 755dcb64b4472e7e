"""The ``fsdp-vs-odc`` workload: on-demand communication (ODC) against FSDP on skewed
post-training data, over length distributions and rank counts.

Its sweep runs stock FSDP2 and ODC. ODC changes two things at once against FSDP2 on this
machine, the transport (shared-memory copies instead of gloo over loopback) and the engine and
schedule (on-demand gets and pushes, ranks decoupled and balanced by cost), so `VARIANTS` adds
the two configurations between them, as settings over the same base: FSDP2 whose collectives
travel through ODC's shared memory (still meeting as collectives), and ODC in lockstep on the
same-count split. ``benchmarks/odc.py`` runs all four and decomposes ODC ÷ FSDP2 into
transport × engine × decoupled balancing.
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

#: the decomposition's four variants, each a settings layer over this workload (in order:
#: (a) stock FSDP2, (b) FSDP2's engine on ODC's transport, (c) ODC's engine in lockstep on the
#: same-count split, (d) ODC); names as `greenbench.reporting.odc.VARIANTS`
VARIANTS = {
    "fsdp": {"strategy": "fsdp"},
    "fsdp-shm": {"strategy": "fsdp", "fsdp": {"transport": "shared-memory"}},
    "odc-lockstep": {
        "strategy": "odc",
        "odc": {"meet": "microbatch"},
        "data": {"balance": "same-count"},
    },
    "odc": {"strategy": "odc"},
}
