"""A rank's checkpoints: its whole training state saved and loaded with
``torch.distributed.checkpoint`` (DCP).

What a checkpoint holds: the model and the optimizer as DCP's ``get_state_dict`` gives them
(FSDP2's and tensor parallelism's DTensors saved sharded, each rank writing its own shards; a
replicated tensor written once), the measured steps trained (the data position: every batch is
a function of the seed and its step), and every rank's RNG states (torch's, CUDA's, Python's and
NumPy's, under the rank's own key). A strategy that shards by hand (ODC's flat shards) has its
state saved under its rank's key (`Strategy.local_state`); a pipeline stage's under its stage's.

Saves are synchronous (``dcp.save``: training waits for the write) or asynchronous
(``dcp.async_save``: training waits while the state is copied to memory; a thread writes it,
over a gloo group of its own, while training goes on; the next save, a load and the run's end
wait for it). A checkpoint is complete once DCP wrote its ``.metadata`` (the coordinator writes
it last), so one cut short by a failure is never loaded.
"""

from __future__ import annotations

import os
import random
import shutil
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

from greenbench.distributed.device import DistContext
from greenbench.strategies.base import Strategy

#: a checkpoint's folder in the run's checkpoint folder: ``step-000012``
STEP_PREFIX = "step-"
#: DCP's file its coordinator writes last: a checkpoint without it is incomplete
METADATA = ".metadata"


class CheckpointError(RuntimeError):
    """The run's checkpoint folder cannot be written (its reason in the message)."""


def _save_errors() -> tuple[type[BaseException], ...]:
    from torch.distributed.checkpoint.api import CheckpointException

    return (Exception, CheckpointException)  # DCP's is a BaseException: every rank's errors


SAVE_ERRORS = _save_errors()


def step_folder(root: Path, steps: int) -> Path:
    return root / f"{STEP_PREFIX}{steps:06d}"


def latest_complete(root: Path) -> int | None:
    """The measured steps of the newest complete checkpoint under ``root``, or None."""
    if not root.is_dir():
        return None
    done = [
        int(p.name[len(STEP_PREFIX) :])
        for p in root.glob(f"{STEP_PREFIX}*")
        if (p / METADATA).is_file() and p.name[len(STEP_PREFIX) :].isdigit()
    ]
    return max(done, default=None)


def check_writable(root: Path) -> None:
    """Make ``root`` and write a probe file in it, or raise CheckpointError with the reason
    (a run that cannot checkpoint fails before it trains)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".probe-{os.getpid()}"
        probe.write_bytes(b"\0" * 4096)
        probe.unlink()
    except OSError as exc:
        raise CheckpointError(f"checkpoint folder {root} cannot be written: {exc}") from None


def folder_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (0 when it is gone)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def state_bytes(state: Any) -> int:
    """Bytes of the tensors this rank holds in ``state`` (a DTensor's local shard)."""
    if isinstance(state, dict):
        return sum(state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state)
    if isinstance(state, torch.Tensor):
        local = state.to_local() if hasattr(state, "to_local") else state
        return local.numel() * local.element_size()
    return 0


def why_not_saved(path: Path, state: dict[str, Any], exc: BaseException) -> str:
    """Why a checkpoint could not be written, for the run's error: the disk's free space where
    it cannot hold this rank's share (DCP reports a short write as a file-format error), else
    the error's first line."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        return f"checkpoint {path} could not be written: {first}"
    need = state_bytes(state)
    if need and free < need:
        return (
            f"checkpoint {path} could not be written: No space left on device ({free} bytes "
            f"free, this rank's share needs {need}): {first}"
        )
    return f"checkpoint {path} could not be written ({free} bytes free): {first}"


def rng_state(device: torch.device) -> dict[str, Any]:
    """Every RNG state of this process."""
    import numpy as np

    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    import numpy as np

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


class Checkpoints:
    """The checkpoints of one rank's run in ``root`` (every rank passes the same folder)."""

    def __init__(self, root: Path, ctx: DistContext, *, asynchronous: bool) -> None:
        self.root = root
        self.ctx = ctx
        self.asynchronous = asynchronous
        self._pending: Future | None = None
        self._pending_steps: int | None = None
        self._group: Any = None
        if asynchronous and ctx.distributed:
            import torch.distributed as dist

            # the background write's collectives must not interleave with training's
            self._group = dist.new_group(backend="gloo")

    def _state(
        self, strategy: Strategy, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        rank = self.ctx.rank
        local = strategy.local_state(model, optimizer)
        if local is not None:
            train: dict[str, Any] = {f"rank{rank}": local}
        else:
            model_sd, optim_sd = get_state_dict(model, optimizer)
            train = {strategy.state_key: {"model": model_sd, "optim": optim_sd}}
        return {"train": train, "rng": {f"rank{rank}": rng_state(self.ctx.device)}}

    def save(
        self,
        steps: int,
        strategy: Strategy,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
    ) -> None:
        """Save the state after ``steps`` measured steps (an asynchronous save returns once
        the state is copied; the previous one is waited for first)."""
        import torch.distributed.checkpoint as dcp

        self.wait()
        state = self._state(strategy, model, optimizer)
        state["steps"] = steps
        path = step_folder(self.root, steps)
        try:
            if self.asynchronous:
                self._pending = dcp.async_save(state, checkpoint_id=path, process_group=self._group)
                self._pending_steps = steps
            else:
                dcp.save(state, checkpoint_id=path)
        except SAVE_ERRORS as exc:
            raise CheckpointError(why_not_saved(path, state, exc)) from exc

    def wait(self) -> int | None:
        """Wait for an asynchronous save still writing; return its steps (None: none was)."""
        pending, steps = self._pending, self._pending_steps
        self._pending = self._pending_steps = None
        if pending is None:
            return None
        try:
            pending.result()
        except SAVE_ERRORS as exc:
            raise CheckpointError(
                why_not_saved(step_folder(self.root, steps or 0), {}, exc)
            ) from exc
        return steps

    def load(
        self,
        steps: int,
        strategy: Strategy,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
    ) -> None:
        """Restore the model, optimizer and RNG states saved after ``steps`` measured steps."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        self.wait()
        state = self._state(strategy, model, optimizer)
        state["steps"] = -1
        dcp.load(state, checkpoint_id=step_folder(self.root, steps))
        if state["steps"] != steps:
            raise CheckpointError(
                f"checkpoint {step_folder(self.root, steps)} holds step {state['steps']}"
            )
        train = state["train"]
        local = train.get(f"rank{self.ctx.rank}")
        if local is not None and strategy.local_state(model, optimizer) is not None:
            strategy.load_local_state(model, optimizer, local)
        else:
            saved = train[strategy.state_key]
            set_state_dict(
                model, optimizer, model_state_dict=saved["model"], optim_state_dict=saved["optim"]
            )
        set_rng_state(state["rng"][f"rank{self.ctx.rank}"], self.ctx.device)

    def remove(self) -> None:
        """Remove every checkpoint (after the run)."""
        self.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def final_parameters(
    strategy: Strategy,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    ctx: DistContext,
    path: Path,
) -> None:
    """Write every rank's parameters, unsharded, to ``path`` from rank 0 (``debug.save_final``:
    tests compare a restarted run with an uninterrupted one). A strategy that shards by hand
    gives its shards under its rank's key, a pipeline stage its model under its stage's."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    local = strategy.local_state(model, optimizer)
    if local is not None:
        mine = {f"rank{ctx.rank}.{i}": t.detach().cpu() for i, t in enumerate(local["shards"])}
    else:
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        mine = {f"{strategy.state_key}.{k}": v.detach().cpu() for k, v in full.items()}
    parts: list[Any] = [mine]
    if ctx.distributed:
        import torch.distributed as dist

        parts = [None] * ctx.world_size if ctx.rank == 0 else []
        dist.gather_object(mine, parts if ctx.rank == 0 else None, dst=0)
    if ctx.rank == 0:
        merged: dict[str, torch.Tensor] = {}
        for part in parts:
            merged.update(part)
        torch.save(merged, path)
