"""A rank's half of the per-rank CPU quotas: joining the group the launcher made for it.

The launcher makes one cgroup per local rank (`greenbench.launcher.cpu_quota.RankQuotas`) and
says where in the rank's environment (`ENV_VAR`); each rank moves itself in at start, before it
starts threads, so that everything it runs stays in its group.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

ENV_VAR = "GREENBENCH_CPU_QUOTA_DIR"
"""Tells a rank where its run's groups live (the rank joins ``<dir>/rank<local rank>``)."""


def write_control(path: Path, text: str) -> None:
    """Write ``text`` to an existing (cgroup) file in one ``write``; never creates the file."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def reason(exc: OSError) -> str:
    """Why a cgroup file could not be written, in a few words."""
    return exc.strerror or type(exc).__name__


def join_rank_group(local_rank: int, environ: Mapping[str, str] = os.environ) -> str | None:
    """Move the calling process (all its threads) into its rank's group; called by a rank at start.

    Writes ``os.getpid()`` to ``<ENV_VAR dir>/rank<local_rank>/cgroup.procs``; threads and
    processes started afterwards stay in the group. Returns None on success or when
    :data:`ENV_VAR` is unset (no quotas for this run); otherwise why it failed.
    """
    run_dir = environ.get(ENV_VAR)
    if not run_dir:
        return None
    procs = Path(run_dir) / f"rank{local_rank}" / "cgroup.procs"
    try:
        write_control(procs, str(os.getpid()))
    except OSError as exc:
        return f"cannot join CPU quota group {procs.parent} ({reason(exc)})"
    return None
