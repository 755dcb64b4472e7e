"""Running one configuration's ranks as child processes, and saying why one failed.

Every configuration runs in child processes, one rank as ``python -m greenbench.worker`` and
several through torchrun (``torch.distributed.run``), so that a rank that crashes, hangs, is
killed or runs out of memory costs that configuration only: the launcher stays alive, kills the
whole process group, records which rank failed and why, and the suite goes on. Children die with
the launcher (``PR_SET_PDEATHSIG``), so even a SIGKILLed launcher leaves no orphans.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from greenbench.errors import WorkerFailed
from greenbench.results import RankResult
from greenbench.spec import RunSpec

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to send ``sig`` to this process when its parent exits (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except OSError:
        pass


def threads_per_rank(nproc: int) -> int:
    """CPU threads per rank so that the ranks of one node do not oversubscribe its cores."""
    return max(1, (os.cpu_count() or 1) // nproc)


def worker_command(
    spec: RunSpec, spec_file: Path, out_dir: Path, rdzv: dict[str, Any] | None = None
) -> list[str]:
    s = spec.settings
    worker = ["-m", "greenbench.worker", "--spec", str(spec_file), "--out", str(out_dir)]
    if s["nproc"] * s["nnodes"] == 1:
        return [sys.executable, *worker]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={s['nproc']}",
        f"--nnodes={s['nnodes']}",
    ]
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


def execute(spec: RunSpec, rdzv: dict[str, Any] | None = None) -> list[RankResult]:
    """Run every rank of ``spec``; return their results or raise WorkerFailed (rank and why)."""
    timeout_s = spec.settings["timeout_s"]
    with tempfile.TemporaryDirectory(prefix="greenbench-") as tmp:
        out = Path(tmp)
        spec_file = out / "spec.json"
        spec_file.write_text(spec.to_json())
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(threads_per_rank(spec.settings["nproc"]))
        env["PYTHONUNBUFFERED"] = "1"
        log = out / "worker.log"
        with log.open("wb") as log_f:
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
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                raise WorkerFailed(f"timed out after {timeout_s:g} s (timeout_s)") from None
            except BaseException:
                kill_group(proc)
                raise
            kill_group(proc)  # a rank torchrun left behind, if any
        results = out / "results.json"
        if code == 0 and results.exists():
            return [RankResult.from_dict(d) for d in json.loads(results.read_text())]
        if code == 0 and rdzv and rdzv.get("node_rank"):
            return []  # another node: global rank 0 gathered these ranks' results on node 0
        raise WorkerFailed(first_error(out, code, log))


def kill_group(proc: subprocess.Popen) -> None:
    """Stop the child and everything it started (they share its process group)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader is gone; wait until no member of its group is left
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return


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
            why = oom_hint(-exit_code) or native_reason(text)
            return f"rank {rank}: killed by {signal_name(-exit_code)}" + why
    errors = []
    for f in out.glob("error-rank*.json"):
        try:
            errors.append(json.loads(f.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    if errors:
        first = min(errors, key=lambda e: e["time"])
        return f"rank {first['rank']}: {first['error']}"
    if exits:  # only torchrun's SIGTERMs of the survivors, or plain exit codes
        rank, exit_code = exits[0]
        if exit_code < 0:
            return f"rank {rank}: killed by {signal_name(-exit_code)}"
        return f"rank {rank}: exited with code {exit_code}"
    tail = " | ".join(text.strip().splitlines()[-3:])
    return f"worker exited with code {code}: {tail}"


_NATIVE_ERROR = re.compile(r"(terminate called.*|what\(\):.*|.*(?:Error|Exception):.*)")


def native_reason(text: str) -> str:
    """The last native error line a rank printed before it aborted (a C++ exception's what()),
    as ": …", or "" when there is none."""
    lines = [m.group(0).strip() for m in _NATIVE_ERROR.finditer(text)]
    return f": {lines[-1][:300]}" if lines else ""


def oom_hint(sig: int) -> str:
    return " (out of memory? the kernel's OOM killer sends SIGKILL)" if sig == 9 else ""


def failed_rank_of(message: str) -> int | None:
    match = re.match(r"rank (\d+):", message)
    return int(match.group(1)) if match else None
