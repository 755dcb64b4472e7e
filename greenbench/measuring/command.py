"""``greenbench measure -- COMMAND``: the energy of any command as a whole, labelled so.

The meter's window opens just before the command starts and closes when it exits, so the figure
covers everything it did (interpreter start-up, imports, data loading, compilation, evaluation),
and is stored as a whole-process measurement (`greenbench.measuring.record.PROCESS_NOTE`), never
as a training window. Its meter reads what a rank 0 reads (`greenbench.energy.select`): the
node's CPU and DRAM on a CPU run (a counter, else the labelled estimate, which models the whole
machine's load), every visible GPU on a CUDA run.

Tokens, for tokens/s and joules per token, come from ``--tokens N``, or from a small file the
program writes: its path is in ``$GREENBENCH_TOKENS_FILE`` (or ``--tokens-file``), and it holds
one whole number. Without either, tokens are unknown and so are the per-token figures.

With ``--idle-s`` > 0 the node's idle power is subtracted for net energy: a baseline taken on a
quiet machine within ``--idle-max-age-s`` (600 s by default, as a suite's
``energy.idle_max_age_s``) is reused, else it is sampled now, watched for contention
(`greenbench.launcher.idle`).

The command starts as soon as greenbench can meter it: nothing on the way imports torch (``auto``
asks NVML whether there is a GPU, `greenbench.hardware.nvidia`), numpy or the database; what
greenbench cost before the command started and after it ended is stored with the run
(``runs.harness_*``).

A command that cannot start, or an option out of range (``--idle-s`` from 0 to 60 s, as a
suite's ``energy.idle_s``), is bad input (one line, exit 2, nothing written); one that exits
non-zero is stored as failed, without results, and its exit status is passed on; one killed by a
signal is stored as failed with the signal's name and exits as a shell reports it, 128 + the
signal's number (137 for SIGKILL).
"""

from __future__ import annotations

import math
import os
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from greenbench.energy.settings import IDLE_MAX_AGE_S
from greenbench.errors import SpecError
from greenbench.results import seconds_between

if TYPE_CHECKING:
    from greenbench.energy.base import EnergyWindow
    from greenbench.launcher.idle import IdleBaseline

TOKENS_ENV = "GREENBENCH_TOKENS_FILE"


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What ``greenbench measure`` did: the command's exit status, the stored run, its figures."""

    exit_code: int  # the command's, or 128 + the signal that killed it
    run_id: str
    seconds: float
    tokens: int | None
    energy_j: float | None
    energy_label: str
    note: str = ""
    signal: str | None = None  # the name of the signal that killed the command, if one did

    def line(self) -> str:
        """One line for the terminal: what was stored, and its whole-process figures."""
        status = "ok" if self.exit_code == 0 else f"failed (exit status {self.exit_code})"
        if self.signal:
            status = f"failed (killed by {self.signal}, exit status {self.exit_code})"
        parts = [f"{status}  {self.run_id}  whole process: {self.seconds:.2f} s"]
        if self.energy_j is not None:
            parts.append(f"{self.energy_j:.4g} J ({self.energy_label})")
        if self.tokens:
            parts.append(f"{self.tokens / self.seconds:,.0f} tok/s")
            if self.energy_j is not None:
                parts.append(f"{self.energy_j / self.tokens:.3g} J/token")
        if self.note:
            parts.append(self.note)
        return "  ".join(parts)


def read_tokens(path: Path) -> tuple[int | None, str]:
    """(tokens, note) from the file a program wrote; None with the reason when unusable."""
    if not path.exists():
        return None, f"the command wrote no tokens file ({path}): tokens unknown"
    text = path.read_text(errors="replace").strip()
    try:
        tokens = int(text)
    except ValueError:
        return None, f"tokens file {path} holds {text[:40]!r}, not a whole number: tokens unknown"
    if tokens < 0:
        return None, f"tokens file {path} holds {tokens} < 0: tokens unknown"
    return tokens, ""


def measure_command(
    argv: list[str],
    *,
    db: Path,
    label: str | None = None,
    name: str | None = None,
    tokens: int | None = None,
    tokens_file: Path | None = None,
    device: str = "auto",
    energy_source: str = "auto",
    region: str = "world",
    idle_s: float = 0.0,
    idle_max_age_s: float = IDLE_MAX_AGE_S,
) -> CommandResult:
    """Run ``argv`` under a meter and store the whole process's energy (module docstring)."""
    from greenbench.energy import select_meter
    from greenbench.energy.carbon import carbon_intensity_g_per_kwh
    from greenbench.energy.settings import MAX_IDLE_S
    from greenbench.launcher.idle import IdleCache, baseline, baseline_key
    from greenbench.rank.stamps import process_started_at

    if not argv:
        raise SpecError(
            "give the command to measure after --, e.g. greenbench measure -- python train.py"
        )
    if shutil.which(argv[0]) is None:
        raise SpecError(f"cannot run {argv[0]!r}: no such command or executable file")
    if tokens is not None and tokens_file is not None:
        raise SpecError("give --tokens N or --tokens-file PATH, not both")
    if not (math.isfinite(idle_s) and 0 <= idle_s <= MAX_IDLE_S):
        raise SpecError(
            f"--idle-s must be a number of seconds from 0 to {MAX_IDLE_S:g}, got {idle_s:g}"
        )
    if not (math.isfinite(idle_max_age_s) and idle_max_age_s >= 0):
        raise SpecError(
            f"--idle-max-age-s must be a number of seconds >= 0, got {idle_max_age_s:g}"
        )
    began = process_started_at()
    carbon = carbon_intensity_g_per_kwh(region)[0]
    device, gpus = _device(device)
    meter = select_meter(
        device, None if energy_source == "auto" else energy_source, gpu_indices=gpus, local_rank=0
    )
    with tempfile.TemporaryDirectory(prefix="greenbench-measure-") as tmp:
        path = tokens_file or Path(tmp) / "tokens"
        env = dict(os.environ, **{TOKENS_ENV: str(path.absolute())})
        try:
            key = baseline_key(device, meter.source, gpus, idle_s)
            idle = baseline(meter, key, idle_s, idle_max_age_s, IdleCache())
            meter.begin()
            started_at = time.time()
            start = time.perf_counter()
            try:
                proc = subprocess.Popen(argv, env=env)
            except OSError as exc:
                raise SpecError(f"cannot run {shlex.join(argv)}: {exc}") from None
            try:
                code = proc.wait()
            except KeyboardInterrupt:
                proc.terminate()
                proc.wait()
                raise
            seconds = time.perf_counter() - start
            window = meter.end()
            ended = time.perf_counter()
        finally:
            meter.close()
        counted, note = (tokens, "") if tokens is not None else read_tokens(path)
    return _store(
        argv, db, code, seconds, window, counted, note, carbon=carbon, device=device, gpus=gpus,
        label=label, name=name, energy_source=energy_source, region=region, idle=idle,
        startup_s=seconds_between(began, started_at), ended=ended,
    )  # fmt: skip


def _store(
    argv: list[str],
    db: Path,
    code: int,
    seconds: float,
    window: EnergyWindow,
    counted: int | None,
    note: str,
    *,
    carbon: float,
    device: str,
    gpus: list[int],
    label: str | None,
    name: str | None,
    energy_source: str,
    region: str,
    idle: IdleBaseline,
    startup_s: float | None,
    ended: float,
) -> CommandResult:
    """Store what the command did (after it: the imports of the record, the settings and the
    database are paid here, never before the command starts)."""
    from greenbench.hardware.fingerprint import fingerprint
    from greenbench.measuring.record import (
        PROCESS_NOTE,
        PROCESS_STRATEGY,
        by_key,
        check_name,
        device_type,
        run_record,
        store_run,
    )
    from greenbench.results import HarnessCost, RankResult
    from greenbench.settings import EnergySettings, RunSettings
    from greenbench.store import new_run_id
    from greenbench.vocabulary import energy_label

    command = shlex.join(argv)
    name = check_name(name or Path(argv[0]).name)
    settings = {
        "measure.scope": "process",
        "measure.command": command,
        **by_key(RunSettings, device=device, precision="unknown", nproc=1, nnodes=1),
        **by_key(EnergySettings, source=energy_source, region=region),
    }
    record = run_record(
        run_id=new_run_id(),
        workload=f"process/{name}",
        config_name=f"whole process: {command}",
        strategy=PROCESS_STRATEGY,
        settings=settings,
        label=label,
        device_type=device_type(device, gpus),
        fingerprint=fingerprint(),
        carbon_g_per_kwh=carbon,
        model_size=name,
    )
    rank = RankResult(
        rank=0, local_rank=0, host=socket.gethostname(), repeat=0, tokens=counted or 0,
        seconds=seconds, compute_s=seconds, comm_s=0.0, wait_s=0.0, step_times_s=(seconds,),
        peak_mem_bytes=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
        flops=0.0, loss=math.nan, n_microbatches=1, energy=window,
    )  # fmt: skip
    ok = code == 0
    exit_code, killed_by, error = exit_status(code)
    harness = HarnessCost(
        startup_s=startup_s,
        baseline_s=idle.seconds,
        baseline_age_s=idle.age_s,
        teardown_s=time.perf_counter() - ended,
    )
    run_id = store_run(
        db,
        record,
        [rank] if ok else [],
        idle_power_w=idle.watts,
        idle_note=idle.why,
        peak=(None, None),
        carbon_g_per_kwh=carbon,
        notes=(PROCESS_NOTE, note),
        status="ok" if ok else "failed",
        error=error,
        harness=harness,
    )
    return CommandResult(
        exit_code=exit_code,
        run_id=run_id,
        seconds=seconds,
        tokens=counted,
        energy_j=window.energy_j,
        energy_label=energy_label(window.source, window.measured),
        note=note,
        signal=killed_by,
    )


def exit_status(returncode: int) -> tuple[int, str | None, str | None]:
    """(exit status to pass on, the killing signal's name, the stored error) of a command whose
    ``Popen.returncode`` is ``returncode`` (-N: killed by signal N, passed on as 128 + N, as a
    shell does; a negative status would reach the caller as 256 - N)."""
    if returncode == 0:
        return 0, None, None
    if returncode > 0:
        return returncode, None, f"the command exited with status {returncode}"
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    status = 128 + number
    return status, name, f"the command was killed by signal {number} ({name}); exit status {status}"


def _device(device: str) -> tuple[str, list[int]]:
    """(the device a command is measured on, the CUDA indices of the GPUs metered): ``auto`` is
    cuda where NVML sees a GPU a CUDA program here would see (no torch import: seconds)."""
    if device not in ("auto", "cpu", "cuda"):
        raise SpecError(f"--device must be auto, cpu or cuda, got {device!r}")
    if device == "cpu":
        return device, []
    from greenbench.hardware.nvidia import visible_gpus

    gpus = [gpu.index for gpu in visible_gpus()]
    if device == "cuda" and not gpus:
        from greenbench.errors import DeviceUnavailable

        raise DeviceUnavailable(
            "--device cuda was asked but NVML sees no GPU here (CUDA_VISIBLE_DEVICES included)"
        )
    return ("cuda", gpus) if gpus else ("cpu", [])
