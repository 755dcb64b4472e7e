"""The ``fault-tolerance`` workload: what a failure costs a checkpointed run in seconds and
joules, and how the interval between checkpoints trades their cost against the work a failure
throws away.

DDP at 2 ranks (the smallest run where a killed rank takes a live one down with it, as a
failed node does: torchrun restarts both) trains the tiny Transformer for 16 measured steps,
checkpointing every 2, 4 or 8 (the sweep); rank 1 is SIGKILLed after 15 measured steps in every
configuration, so the last checkpoint before the failure lies 1, 3 and 7 steps back, and those
steps are trained again after the restart. Each run stores its checkpoints' seconds, joules and
bytes, the work redone and the restart (`greenbench.results.RepeatResult`'s fault figures and
its ``run_events``); the report's section sets them beside the Young/Daly interval computed
from the measured checkpoint cost and failure rate (`greenbench.reporting.young_daly`). A
checkpointed run is one repeat; ``--seeds K`` gives each interval K runs to judge on.
"""

from greenbench.workload import Workload

#: the measured step the failure is injected at, the same in every configuration: one less
#: than a multiple of every interval, so the work redone grows with the interval (every - 1)
KILL_AT = 15

WORKLOAD = Workload(
    name="fault-tolerance",
    question=(
        "What does a failure cost a checkpointed run in seconds and joules (work redone, "
        "restart), what do its checkpoints cost, and which checkpoint interval wastes least: "
        "the one Young and Daly's model computes from the measured costs?"
    ),
    base={
        "model": {"size": "tiny", "family": "transformer"},
        "strategy": "ddp",
        "nproc": 2,
        # a checkpointed run is one repeat
        "repeats": 1,
        "data": {"lengths": "fixed", "seq_len": 128, "global_batch": 8, "micro_batch": 2},
        # exactly 16 measured steps (no lengthened window): the kill and the checkpoints are
        # placed in steps
        "train": {"steps": KILL_AT + 1, "warmup_steps": 2, "min_window_s": 0.0},
        "fault": {"kill_rank": f"1@{KILL_AT}"},
    },
    sweep={"ckpt": {"every": [2, 4, 8]}},
)
