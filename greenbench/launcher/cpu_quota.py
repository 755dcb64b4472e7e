"""A fixed CPU quota per rank (cgroup v1 ``cpu`` controller), so that ranks behave like devices.

With more ranks than cores (say 4 gloo ranks on 2 cores), a rank that waits for its peers hands
its core to the busy ones, and the load imbalance and pipeline bubbles that real GPUs would show
disappear from the measurement. The launcher therefore gives each rank of a configuration a
fixed share of cores ÷ ranks: one cgroup per local rank under
``<root>/greenbench/<launcher pid>-<random hex>/rank<i>``, with ``cpu.cfs_quota_us`` /
``cpu.cfs_period_us`` set to that share (and the run's ``cpu.shares`` to the weight of as many
plain processes, so that outside load squeezes grouped ranks no more than ungrouped ones). Each
rank moves itself into its group at start (`greenbench.rank.cpu_group.join_rank_group`, told
where through its ``ENV_VAR``); the launcher removes the groups on every exit path
(:class:`RankQuotas`), and :func:`sweep_stale` removes what a killed launcher left behind.

We write our own because no kept library manages per-process cgroup v1 CPU quotas for torchrun
ranks. The Python cgroup packages on PyPI (cgroupspy, cgroups, cgroupy, last released 2024, 2014
and 2022) wrap the same file writes as here and leave the part that matters, the groups'
lifetime (gone on every exit path, swept after a SIGKILLed owner), to the caller;
``systemd-run`` scopes need systemd as PID 1 (not so on our machines), and libcgroup's
``cgcreate`` is one more system install for a handful of writes to files the kernel documents
(Documentation/scheduler/sched-bwc.rst).

Nothing here raises for an unusable cgroup (not root, no v1 ``cpu`` controller, read-only file
system): the ranks then run without quotas and :attr:`RankQuotas.warning` says why, so that the
run can store it. Files are opened without ``O_CREAT``, so a directory that is not a cgroup file
system is never filled with look-alike files.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from greenbench.rank.cpu_group import ENV_VAR, reason, write_control

CGROUP_CPU_ROOT = Path("/sys/fs/cgroup/cpu")
"""Where the cgroup v1 ``cpu`` controller is mounted."""

PARENT_NAME = "greenbench"
"""The directory under the controller's root that holds every run's groups."""

MIN_QUOTA_US = 1000
"""The kernel refuses a ``cpu.cfs_quota_us`` below 1 ms (EINVAL)."""

MAX_SHARES = 262_144
"""The kernel's largest ``cpu.shares``."""

_SETTINGS = ("auto", "on", "off")


def quota_wanted(setting: str, n_ranks: int, cores: int) -> bool:
    """Whether ranks get a CPU quota: ``setting`` is ``auto``, ``on`` or ``off``.

    ``auto`` is on exactly when the ranks outnumber the cores. Any other setting is a
    ``ValueError``.
    """
    if setting not in _SETTINGS:
        raise ValueError(f"rank CPU quota setting must be one of {_SETTINGS}, not {setting!r}")
    if setting == "auto":
        return n_ranks > cores
    return setting == "on"


def _read_ids(path: Path) -> list[int]:
    """The pids (or tids) listed in a cgroup's ``cgroup.procs`` (or ``tasks``); [] if unreadable."""
    try:
        return [int(line) for line in path.read_text().split()]
    except (OSError, ValueError):
        return []


def _is_file(path: Path) -> bool:
    """Path.is_file, but False (not PermissionError) where the path cannot be looked at."""
    try:
        return path.is_file()
    except OSError:
        return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _weigh(run_dir: Path, n_ranks: int) -> None:
    """Give the run's group (and the shared parent) the CFS weight of ``n_ranks`` plain processes.

    Under group scheduling a group competes with the processes beside it as ONE entity of weight
    ``cpu.shares`` (1024 by default, a single process's), so four ranks in a group would get a
    quarter of what four ungrouped processes get when anything else on the machine is busy.
    The quota still caps each rank; this only keeps outside load from squeezing the ranks more
    than it would without groups. The parent is shared by concurrent runs, so its weight is only
    ever raised. Best effort: the quotas work without it.
    """
    shares = min(MAX_SHARES, 1024 * n_ranks)
    with contextlib.suppress(OSError, ValueError):
        write_control(run_dir / "cpu.shares", str(shares))
        parent = run_dir.parent / "cpu.shares"
        if int(parent.read_text()) < shares:
            write_control(parent, str(shares))


def _remove_group(group: Path, root: Path, attempts: int = 20) -> str | None:
    """Move every task out of ``group`` (into ``root``) and remove it; the reason if it stays.

    A cgroup can only be removed when no task is in it; a task may fork while we move it, so the
    moves are repeated until ``rmdir`` succeeds or the attempts run out.
    """
    last = ""
    for attempt in range(attempts):
        for listing, target in (("cgroup.procs", "cgroup.procs"), ("tasks", "tasks")):
            for pid in _read_ids(group / listing):
                with contextlib.suppress(OSError):  # ESRCH: it exited meanwhile
                    write_control(root / target, str(pid))
        try:
            os.rmdir(group)
            return None
        except FileNotFoundError:
            return None
        except OSError as exc:
            last = reason(exc)
            if exc.errno != errno.EBUSY:
                return last
        time.sleep(0.01 * (attempt + 1))
    return last


def _remove_run_dir(run_dir: Path, root: Path) -> list[str]:
    """Remove a run's rank groups and then its own directory; the problems, [] if none."""
    problems: list[str] = []
    try:
        ranks = sorted(p for p in run_dir.iterdir() if p.is_dir())
    except FileNotFoundError:
        return problems
    except OSError as exc:
        ranks = []
        problems.append(f"cannot list {run_dir} ({reason(exc)})")
    for rank_dir in ranks:
        why = _remove_group(rank_dir, root)
        if why is not None:
            problems.append(f"cannot remove {rank_dir} ({why})")
    why = _remove_group(run_dir, root)
    if why is not None:
        problems.append(f"cannot remove {run_dir} ({why})")
    return problems


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while the block runs, then deliver them to the old handlers.

    A second Ctrl-C or SIGTERM (whose handler raises KeyboardInterrupt, as the launcher's does)
    must not cut a cleanup short. Python runs signal handlers in the main thread whichever thread
    the signal reaches, so swapping the handlers there is enough; elsewhere nothing is held.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    old: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if handler is not None:  # None: installed outside Python, cannot be put back
            old[sig] = signal.signal(sig, lambda signum, _frame: held.append(signum))
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(held):
            signal.raise_signal(sig)


class RankQuotas:
    """One cgroup per local rank, each with a fixed CPU quota of ``cores / n_ranks`` cores.

    A context manager the launcher holds around one configuration's ranks (one node, so
    ``n_ranks`` is the number of local ranks)::

        with RankQuotas(n_ranks) as quotas:
            if quotas.warning:
                warnings.append(quotas.warning)
            launch_ranks(extra_env=quotas.env())  # each rank calls join_rank_group

    ``__enter__`` never raises for an unusable cgroup: it sets :attr:`warning` to one sentence
    saying why, and :meth:`env` is then ``{}`` (ranks run without quotas). ``__exit__`` removes
    every group it made, moving any task still inside back to the root group first; it never
    raises and never masks the exception in flight. If a group cannot be removed, ``warning``
    says so afterwards (:func:`sweep_stale` removes it once this process is gone). SIGINT and
    SIGTERM that arrive while groups are made or removed are held and handed to their handlers
    right after, so a second Ctrl-C cannot leave a group behind (a KeyboardInterrupt raised then
    comes from the user's handler).

    Attributes:
        warning: why ranks run without quotas (or, after exit, which group was left), else None.
        path: the run's group directory while it exists, else None.
    """

    def __init__(
        self,
        n_ranks: int,
        *,
        cores: float | None = None,
        root: Path = CGROUP_CPU_ROOT,
        period_us: int = 100_000,
    ) -> None:
        if n_ranks < 1:
            raise ValueError(f"n_ranks must be at least 1, not {n_ranks}")
        if cores is None:
            cores = float(os.cpu_count() or 1)
        if not cores > 0:
            raise ValueError(f"cores must be positive, not {cores}")
        if not 1000 <= period_us <= 1_000_000:
            raise ValueError(f"period_us must be within 1000..1000000 µs, not {period_us}")
        self.n_ranks = n_ranks
        self.cores = float(cores)
        self.root = Path(root)
        self.period_us = period_us
        self.quota_us = max(MIN_QUOTA_US, round(period_us * self.cores / n_ranks))
        self.warning: str | None = None
        self.path: Path | None = None

    @property
    def per_rank_cores(self) -> float:
        """The share of a core each rank gets: quota ÷ period (cores ÷ ranks, at least 1 % of a
        core at the default period)."""
        return self.quota_us / self.period_us

    def env(self) -> dict[str, str]:
        """Environment for the ranks: ``{ENV_VAR: run dir}`` when the groups exist, else {}."""
        return {ENV_VAR: str(self.path)} if self.path is not None else {}

    def _without(self, why: str) -> None:
        self.warning = (
            f"rank CPU quotas are off: {why}; ranks run without quotas, so waiting ranks "
            "may lend their cores to busy ones"
        )

    def __enter__(self) -> RankQuotas:
        self.warning = None
        self.path = None
        try:
            with _signals_held():
                self._make()
        except Exception as exc:  # whatever the file system says, it is a warning, not an error
            self._remove()
            self._without(f"cannot make cgroups under {self.root} ({exc!r})")
        except BaseException:  # a signal held while making them: nothing of ours stays behind
            self._remove()
            raise
        return self

    def _make(self) -> None:
        root = self.root
        if not _is_file(root / "cpu.cfs_quota_us") or not _is_file(root / "cgroup.procs"):
            self._without(f"{root} is not a cgroup v1 cpu controller (no cpu.cfs_quota_us there)")
            return
        parent = root / PARENT_NAME
        try:
            parent.mkdir(exist_ok=True)
        except OSError as exc:
            self._without(f"cannot create cgroup {parent} ({reason(exc)})")
            return
        run_dir = parent / f"{os.getpid()}-{secrets.token_hex(4)}"
        try:
            run_dir.mkdir()
        except OSError as exc:
            self._without(f"cannot create cgroup {run_dir} ({reason(exc)})")
            return
        self.path = run_dir  # from here on, __exit__ (or the failure below) removes it
        try:
            for rank in range(self.n_ranks):
                group = run_dir / f"rank{rank}"
                group.mkdir()
                if not _is_file(group / "cpu.cfs_quota_us"):
                    raise OSError(errno.ENOTSUP, f"{root} is not a cgroup file system")
                write_control(group / "cpu.cfs_period_us", str(self.period_us))
                write_control(group / "cpu.cfs_quota_us", str(self.quota_us))
            _weigh(run_dir, self.n_ranks)
        except OSError as exc:
            _remove_run_dir(run_dir, root)
            self.path = None
            self._without(
                f"cannot set a {self.quota_us} µs quota per {self.period_us} µs under "
                f"{run_dir} ({reason(exc)})"
            )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._remove()
        return False

    def _remove(self) -> None:
        """Remove the run's groups, if any; a signal arriving meanwhile is delivered after."""
        run_dir, self.path = self.path, None
        if run_dir is None:
            return
        with _signals_held():
            try:
                problems = _remove_run_dir(run_dir, self.root)
                if problems:
                    self.warning = (
                        f"rank CPU quota groups were left behind: {'; '.join(problems)}; "
                        "sweep_stale removes them once this process is gone"
                    )
            except Exception as cleanup_exc:  # never mask the exception in flight
                self.warning = f"rank CPU quota groups under {run_dir} may be left ({cleanup_exc})"


def sweep_stale(root: Path = CGROUP_CPU_ROOT) -> list[Path]:
    """Remove the groups under ``<root>/greenbench`` whose launcher no longer exists.

    A run's directory is named ``<launcher pid>-<hex>``; when that pid is not alive (the
    launcher was SIGKILLed, say), any task still inside is moved back to the root group and the
    groups are removed. Returns the run directories removed; never raises. A pid reused by an
    unrelated process keeps its group until that process is gone too.
    """
    removed: list[Path] = []
    try:
        runs = sorted((Path(root) / PARENT_NAME).iterdir())
    except OSError:
        return removed
    for run_dir in runs:
        pid_text, sep, _ = run_dir.name.partition("-")
        if not sep or not pid_text.isdigit() or _pid_alive(int(pid_text)):
            continue
        try:
            if not _remove_run_dir(run_dir, Path(root)):
                removed.append(run_dir)
        except Exception:  # never raises; the next sweep tries again
            continue
    return removed
