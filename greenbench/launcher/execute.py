"""Running one configuration's ranks as child processes, and saying why one failed.

Every configuration runs in child processes, one rank as ``python -m greenbench.rank.worker`` and
several through torchrun (``torch.distributed.run``), so that a rank that crashes, hangs, is
killed or runs out of memory costs that configuration only: the launcher stays alive, kills the
whole process group, records which rank failed and why, and the suite goes on. Children die with
the launcher (``PR_SET_PDEATHSIG``), so even a SIGKILLed launcher leaves no orphans.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from greenbench.errors import WorkerFailed
from greenbench.launcher import survivors
from greenbench.launcher.cpu_quota import RankQuotas
from greenbench.launcher.phases import NO_PHASES, Phases
from greenbench.processes import die_with_parent, forget_stops, raise_if_stopped
from greenbench.rank import stamps as rank_stamps
from greenbench.rank.hangs import find_hang
from greenbench.rank.ledger import read_ledgers
from greenbench.results import RankResult, RunEvent
from greenbench.settings.runspec import RunSpec


def threads_per_rank(nproc: int) -> int:
    """CPU threads per rank so that the ranks of one node do not oversubscribe its cores."""
    return max(1, (os.cpu_count() or 1) // nproc)


def worker_command(
    spec: RunSpec, spec_file: Path, out_dir: Path, rdzv: dict[str, Any] | None = None
) -> list[str]:
    from greenbench.settings.fault import fault_tolerant

    config = spec.config
    run = config.run
    worker = ["-m", "greenbench.rank.worker", "--spec", str(spec_file), "--out", str(out_dir)]
    resilient = fault_tolerant(config)
    if run.nproc * run.nnodes == 1 and not resilient:
        return [sys.executable, *worker]
    if survivors.kills(spec):  # SkipPipe with a node really killed: not torchrun (survivors)
        return survivors.command(spec, spec_file, out_dir, out_dir / RANK_LOGS)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={run.nproc}",
        f"--nnodes={run.nnodes}",
        # each rank's output also goes to a file of its own, so a failure names its lines
        f"--log-dir={out_dir / RANK_LOGS}",
        "--tee=3",
    ]
    if resilient:  # a failed rank restarts the ranks, which resume from the last checkpoint
        cmd.append(f"--max-restarts={config.fault.max_restarts}")
    rdzv = rdzv or {}
    if rdzv.get("endpoint"):
        # torchrun's static rendezvous: node N's ranks are N·nproc … (N+1)·nproc − 1, so global
        # rank 0, which gathers every rank's results, is always on node 0, whose launcher writes
        host, _, port = rdzv["endpoint"].rpartition(":")
        cmd += [
            "--rdzv-backend=static",
            f"--master-addr={host}",
            f"--master-port={port}",
            f"--node-rank={rdzv['node_rank']}",
        ]
    else:
        cmd.append("--standalone")
    return [*cmd, *worker]


RANK_LOGS = "ranks"  # torchrun's --log-dir inside a configuration's working folder
TEMP_PREFIX = "greenbench-"  # a configuration's working folder: greenbench-<launcher pid>-…
TAIL_LINES = 20


@dataclass(slots=True)
class Execution:
    """What a configuration's ranks returned, with what went wrong after they had (warnings:
    e.g. a rank that crashed at exit once the results were written), and where its worker logs
    were kept when there was something to see."""

    ranks: list[RankResult]
    warnings: list[str] = field(default_factory=list)
    log_dir: str | None = None
    events: list[RunEvent] = field(default_factory=list)  # a SkipPipe node killed (survivors)
    #: a fault-tolerant run's ledgers, by rank (`greenbench.rank.ledger`; {} for other runs)
    ledgers: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    #: when the rank processes were started (seconds since the epoch), and when rank 0 reached
    #: the points the harness's cost is measured between (`greenbench.rank.stamps`)
    started_at: float | None = None
    stamps: dict[str, float] = field(default_factory=dict)


def execute(
    spec: RunSpec,
    rdzv: dict[str, Any] | None = None,
    *,
    keep_logs: Path | None = None,
    phases: Phases = NO_PHASES,
) -> Execution:
    """Run every rank of ``spec``; return their results or raise WorkerFailed (rank and why).

    A result already gathered survives anything that happens to the ranks afterwards: if
    ``results.json`` exists, the ranks finished measuring and rank 0 wrote it, so it is
    returned with a warning naming the rank that failed at exit. When a configuration fails
    or warns, its worker logs (torchrun's output, each rank's own output, error reports) are
    copied to ``keep_logs`` before the temporary folder goes. ``phases`` is told when the
    ranks start and watches the folder where rank 0 tells theirs (`greenbench.rank.phase`).
    """
    run = spec.config.run
    timeout_s = run.timeout_s
    with (
        tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-") as tmp,
        run_checkpoints(spec, Path(tmp)),
    ):
        out = Path(tmp)
        phases.watch(out)
        spec_file = out / "spec.json"
        spec_file.write_text(spec.to_json())
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(threads_per_rank(run.nproc))
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONFAULTHANDLER"] = "1"  # a native crash prints every thread's Python stack
        warnings: list[str] = []
        log = out / "worker.log"
        with rank_quotas(spec) as quotas, log.open("wb") as log_f:
            if quotas is not None:
                env.update(quotas.env())
                if quotas.warning:
                    warnings.append(quotas.warning)
            forget_stops()  # from here a stop swallowed while forking is remembered
            phases.tell(f"starting {run.nproc} rank(s)")
            started_at = time.time()
            proc = subprocess.Popen(
                worker_command(spec, spec_file, out, rdzv),
                stdout=log_f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
            try:
                raise_if_stopped()  # a stop that landed while the child was being started
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                hang = find_hang(proc.pid, out)
                kill_group(proc)
                raise WorkerFailed(
                    f"timed out after {timeout_s:g} s (timeout_s){hang.describe()}",
                    rank=hang.rank,
                    tail=tail_of(rank_log(out, hang.rank) or log),
                    log_dir=keep(out, keep_logs),
                ) from None
            except BaseException:
                kill_group(proc)
                raise
            finally:  # the ranks are over: what is left is the launcher's
                phases.tell("aggregating the results")
                phases.watch(None)
            kill_group(proc)  # a rank torchrun left behind, if any
        if quotas is not None and quotas.warning and quotas.warning not in warnings:
            warnings.append(quotas.warning)  # e.g. a group that could not be removed
        warnings += [f.read_text().strip() for f in sorted(out.glob("warning-rank*.txt"))]
        results = out / "results.json"
        if results.exists():
            ranks = [RankResult.from_dict(d) for d in json.loads(results.read_text())]
            events, more = survivors.fault_events(spec, out, ranks)  # none without a kill
            warnings += more
            ledgers = read_ledgers(out)
            timing = {"started_at": started_at, "stamps": rank_stamps.read(out)}
            if code == 0:
                return Execution(ranks, warnings, events=events, ledgers=ledgers, **timing)
            why = first_error(out, code, log)
            warnings.append(f"{why} (after the results were gathered; they are kept)")
            return Execution(ranks, warnings, keep(out, keep_logs), events, ledgers, **timing)
        if code == 0 and rdzv and rdzv.get("node_rank"):
            return Execution([], warnings)  # another node: rank 0 gathered these ranks' results
        message = first_error(out, code, log)
        rank = failed_rank_of(message)
        raise WorkerFailed(
            message,
            rank=rank,
            tail=tail_of(rank_log(out, rank) or log),
            log_dir=keep(out, keep_logs),
        )


@contextlib.contextmanager
def run_checkpoints(spec: RunSpec, out: Path) -> Iterator[None]:
    """The run's own checkpoint folder (`greenbench.settings.fault.checkpoint_folder`) while it
    runs: made before the ranks start, so that one that cannot be written fails the run at
    once with the reason (WorkerFailed), and removed afterwards, however the run ended."""
    from greenbench.settings.fault import NO_CHECKPOINTS, checkpoint_folder

    ckpt = spec.config.ckpt
    if ckpt is None or ckpt.every == NO_CHECKPOINTS:
        yield
        return
    # torch's distributed checkpointing (seconds to import): only for a run that checkpoints
    from greenbench.rank.checkpoint import CheckpointError, check_writable

    root = checkpoint_folder(ckpt.dir, out)
    try:
        check_writable(root)
    except CheckpointError as exc:
        raise WorkerFailed(f"rank 0: {exc}", rank=0) from None
    try:
        yield
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def rank_quotas(spec: RunSpec) -> Iterator[RankQuotas | None]:
    """This node's per-rank CPU quota groups while the configuration runs, when the spec's
    resolved ``emulate.rank_cpu_quota`` is on (None otherwise); removed on every exit path."""
    c = spec.config
    if c.emulate.rank_cpu_quota != "on":
        yield None
        return
    with RankQuotas(c.run.nproc) as quotas:
        yield quotas


def sweep_stale_temp(directory: Path | None = None) -> list[Path]:
    """Remove the working folders of launchers that no longer exist (a SIGKILLed launcher
    cannot remove its own); return what was removed. Folders of live launchers stay."""
    removed = []
    for path in Path(directory or tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*-*"):
        pid = path.name[len(TEMP_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or not path.is_dir() or _alive(int(pid)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def keep(out: Path, dest: Path | None) -> str | None:
    """Copy a configuration's working folder (logs, error reports; not the spec's results) to
    ``dest``; return its path, or None when there is nowhere to keep it or copying failed."""
    if dest is None:
        return None
    try:
        shutil.copytree(out, dest, dirs_exist_ok=True)
    except OSError:
        return None
    return str(dest)


def rank_log(out: Path, rank: int | None) -> Path | None:
    """The combined output of one rank (its stderr, then its stdout) from torchrun's per-rank
    files, as one file in ``out``; None when there is no such rank's file (one-rank runs write
    everything to worker.log)."""
    if rank is None:
        return None
    local = str(rank % max(1, _nproc(out)))
    parts = []
    for name in ("stderr.log", "stdout.log"):
        for f in sorted((out / RANK_LOGS).glob(f"*/attempt_*/{local}/{name}")):
            parts.append(f.read_text(errors="replace"))
    if not any(p.strip() for p in parts):
        return None
    merged = out / f"rank{rank}.log"
    merged.write_text("\n".join(p.rstrip("\n") for p in parts if p.strip()) + "\n")
    return merged


def _nproc(out: Path) -> int:
    try:
        spec = RunSpec.from_dict(json.loads((out / "spec.json").read_text()))
        return int(spec.config.run.nproc)
    except (OSError, KeyError, TypeError, ValueError, AttributeError):
        return 1


def tail_of(path: Path, lines: int = TAIL_LINES) -> str | None:
    """The last ``lines`` non-empty lines of a log, or None when it is empty or missing."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(kept) or None


def kill_group(proc: subprocess.Popen, *, settle_s: float = 10.0) -> None:
    """Stop the child and everything it started (they share its process group): SIGTERM, then
    SIGKILL for what is left, then wait (up to ``settle_s``) until the group is gone, so no rank
    outlives this call on a busy machine, where a killed process may take a while to end."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            continue
        if not _group_alive(proc.pid):
            return
    deadline = time.monotonic() + settle_s
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a live member left (zombies waiting for a parent that
    is not ours to reap do not count)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return False


def signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


_TORCHRUN_FAILURE = re.compile(r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)")


def first_error(out: Path, code: int, log: Path) -> str:
    """Why the configuration failed, as "rank R: …".

    A rank killed by a signal (other than the SIGTERM torchrun sends the survivors) is the root
    cause: its peers' errors ("connection closed by peer") follow from it. Otherwise a rank's
    own report (the earliest), else any exit torchrun recorded, else the tail of the output.
    """
    text = log.read_text(errors="replace") if log.exists() else ""
    if code < 0:  # the single-rank worker itself was killed
        return f"rank 0: killed by {signal_name(-code)}" + oom_hint(-code)
    exits = [(int(rank), int(exit_code)) for rank, exit_code in _TORCHRUN_FAILURE.findall(text)]
    for rank, exit_code in exits:
        if exit_code < 0 and -exit_code != signal.SIGTERM:
            own = rank_log(out, rank)  # the rank's own lines; torchrun's come after them
            why = oom_hint(-exit_code) or native_reason(
                own.read_text(errors="replace") if own else text
            )
            return f"rank {rank}: killed by {signal_name(-exit_code)}" + why
    errors = []
    for f in out.glob("error-rank*.json"):
        try:
            errors.append(json.loads(f.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    if errors:
        last = max(e.get("attempt", 0) for e in errors)  # torchrun's last restart's
        first = min((e for e in errors if e.get("attempt", 0) == last), key=lambda e: e["time"])
        return f"rank {first['rank']}: {first['error']}"
    if exits:  # only torchrun's SIGTERMs of the survivors, or plain exit codes
        rank, exit_code = exits[0]
        if exit_code < 0:
            return f"rank {rank}: killed by {signal_name(-exit_code)}"
        return f"rank {rank}: exited with code {exit_code}"
    tail = " | ".join(text.strip().splitlines()[-3:])
    return f"worker exited with code {code}: {tail}"


_NATIVE_ERROR = re.compile(r"(terminate called.*|what\(\):.*|.*(?:Error|Exception):.*)")
_LAUNCHER_LINE = re.compile(r"ChildFailedError|torch/distributed/elastic/")


def native_reason(text: str) -> str:
    """The last native error line a rank printed before it aborted (a C++ exception's what()),
    as ": …", or "" when there is none. torchrun's own report of the failure is not a reason."""
    lines = [
        m.group(0).strip()
        for m in _NATIVE_ERROR.finditer(text)
        if not _LAUNCHER_LINE.search(m.group(0))
    ]
    return f": {lines[-1][:300]}" if lines else ""


def oom_hint(sig: int) -> str:
    return " (out of memory? the kernel's OOM killer sends SIGKILL)" if sig == 9 else ""


def failed_rank_of(message: str) -> int | None:
    match = re.match(r"rank (\d+):", message)
    return int(match.group(1)) if match else None
