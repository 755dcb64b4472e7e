"""The sections of a fault-tolerant run: its checkpoints (``ckpt``) and the failure injected
into it (``fault``).

A checkpointed run saves its sharded model, optimizer, data position and every RNG state with
``torch.distributed.checkpoint`` every ``ckpt.every`` measured steps; ``fault.kill_rank=R@S``
SIGKILLs rank R's process at measured step S (warm-up not counted), and torchrun restarts the
ranks (up to ``fault.max_restarts`` times) from the last checkpoint. SkipPipe instead carries on
without the killed node (its survivors detect it within ``fault.detect_s``). Every setting counts
in a run's identity only away from its default, so every configuration stored before the
sections keeps its key; where the checkpoints go and how many restarts are allowed never do.
"""

from __future__ import annotations

from pathlib import Path

from greenbench.config import NEVER, NON_NEGATIVE, POSITIVE, Config, section, setting
from greenbench.errors import SpecError

#: ``ckpt.mode``'s values: the save blocks training (``dcp.save``), or only its staging does
#: (``dcp.async_save``: written by a background thread while training goes on)
CKPT_MODES = ("sync", "async")

#: ``ckpt.every``'s value for a run without checkpoints
NO_CHECKPOINTS = -1

#: the strategies a run with checkpoints or a restart may use
CHECKPOINTED = ("single", "ddp", "fsdp", "odc", "hybrid")


@section("ckpt", "Checkpoints of a run (torch.distributed.checkpoint).", built_in_only=True)
class CkptSettings:
    every: int = setting(
        NO_CHECKPOINTS,
        "measured steps between checkpoints (-1: none; a restarted run then starts over)",
    )
    mode: str = setting(
        "sync",
        "sync (dcp.save: training waits for the write) | async (dcp.async_save: training "
        "waits for the copy to memory, a thread writes)",
        choices=CKPT_MODES,
    )
    dir: str = setting(
        "",
        "the folder a run makes its own checkpoint folder in, removed after the run ('': the "
        "run's working folder)",
        identity=NEVER,
    )

    def check(self, config: Config) -> None:
        if self.every == 0 or self.every < NO_CHECKPOINTS:
            raise SpecError(
                f"ckpt.every={self.every}: checkpoint every N >= 1 measured steps, or -1 for none"
            )
        if self.every != NO_CHECKPOINTS:
            check_fault_tolerant(config, f"ckpt.every={self.every}")


@section("fault", "A failure injected into a run, and what survives it.", built_in_only=True)
class FaultSettings:
    kill_rank: str = setting(
        "",
        "R@S: SIGKILL rank R's process at measured step S (0-based, warm-up not counted: "
        "after S measured steps); torchrun restarts the ranks from the last checkpoint "
        "(SkipPipe's survivors carry on without it)",
    )
    max_restarts: int = setting(
        3,
        "torchrun's --max-restarts: worker-group restarts before the run fails",
        bound=NON_NEGATIVE,
        identity=NEVER,
    )
    detect_s: float = setting(
        5.0,
        "SkipPipe: seconds a node waits on a peer before it counts it as gone",
        bound=POSITIVE,
    )

    def check(self, config: Config) -> None:
        kill = kill_of(config)
        if kill is None:
            return
        rank, step = kill
        run = config.run
        world = run.nproc * run.nnodes if isinstance(run.nproc, int) else None
        if world is not None and rank >= world:
            raise SpecError(
                f"fault.kill_rank={self.kill_rank}: rank {rank} is beyond the run's "
                f"{world} rank{'s' if world != 1 else ''} (0 … {world - 1})"
            )
        steps = config.train.steps
        if step >= steps:
            raise SpecError(
                f"fault.kill_rank={self.kill_rank}: step {step} is beyond the run's {steps} "
                f"measured steps (0 … {steps - 1}; train.steps)"
            )
        if run.strategy != "skippipe":
            check_fault_tolerant(config, f"fault.kill_rank={self.kill_rank}")


def kill_of(config: Config) -> tuple[int, int] | None:
    """``fault.kill_rank`` as (rank, measured step), None when no rank is killed; SpecError
    when it is not ``R@S``."""
    fault = config.fault
    text = "" if fault is None else fault.kill_rank.strip()
    if not text:
        return None
    rank, at, step = text.partition("@")
    if not at or not rank.strip().isdigit() or not step.strip().isdigit():
        raise SpecError(
            f"fault.kill_rank={text!r}: write RANK@STEP (e.g. 1@3: rank 1 at measured step 3)"
        )
    return int(rank), int(step)


def checkpoint_folder(root: str, out: Path) -> Path:
    """The run's own checkpoint folder: in its working folder ``out``, or, where ``ckpt.dir``
    names a folder (``root``), a folder of the same name in it (removed with the run's)."""
    return out / "checkpoints" if not root else Path(root).expanduser() / out.name


def fault_tolerant(config: Config) -> bool:
    """Whether ``config``'s run is checkpointed or restarted after an injected failure (it then
    trains through `greenbench.rank.resilient`); SkipPipe's surviving a dead node is not."""
    ckpt = config.ckpt
    if ckpt is not None and ckpt.every != NO_CHECKPOINTS:
        return True
    return kill_of(config) is not None and config.run.strategy != "skippipe"


def check_fault_tolerant(config: Config, what: str) -> None:
    """SpecError where ``what`` (a checkpoint interval, a killed rank) cannot apply to
    ``config``'s run: one measured window on one node, of a strategy whose whole state
    ``torch.distributed.checkpoint`` saves."""
    run, train = config.run, config.train
    if run.strategy not in CHECKPOINTED:
        raise SpecError(
            f"{what}: checkpoints and restarts apply to strategy="
            f"{', '.join(CHECKPOINTED)}, not strategy={run.strategy}"
        )
    if train.until != "window":
        raise SpecError(f"{what}: a run to a target is not checkpointed (train.until=window)")
    if run.repeats != 1:
        raise SpecError(
            f"{what}: a checkpointed run is one repeat (run.repeats=1; --seeds repeats it)"
        )
    if run.nnodes != 1:
        raise SpecError(f"{what}: checkpoints and restarts run on one node (nnodes=1)")
    if config.emulate.gpu:
        raise SpecError(f"{what}: not on an emulated GPU (leave emulate.gpu empty)")
    ddp = config.ddp
    if run.strategy == "ddp" and ddp is not None:
        plain = ddp.compress in ("none", "bf16", "fp16") and ddp.sync == "every-step"
        if not plain or ddp.staleness:
            raise SpecError(
                f"{what}: DDP's PowerSGD, local SGD, DiLoCo and staleness keep state outside "
                "the model and optimizer, which is not checkpointed"
            )
