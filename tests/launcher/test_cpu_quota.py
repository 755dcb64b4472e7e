"""Rank CPU quotas on real cgroup v1 groups with real processes: each rank gets cores ÷ ranks, and
the groups are gone after every exit path (normal, exception, SIGTERM; SIGKILL through
sweep_stale). Skipped where the cgroup v1 cpu controller cannot be written (not root, no v1).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from greenbench.launcher import cpu_quota
from greenbench.launcher.cpu_quota import (
    CGROUP_CPU_ROOT,
    MAX_SHARES,
    RankQuotas,
    quota_wanted,
    sweep_stale,
)
from greenbench.rank.cpu_group import ENV_VAR, join_rank_group

#: A rank stand-in: joins its group through the environment, says so, then spins forever.
BUSY = """
import sys
from greenbench.rank.cpu_group import join_rank_group
print(join_rank_group(int(sys.argv[1])) or "joined", flush=True)
while True:
    pass
"""

#: A launcher stand-in: SIGTERM raises KeyboardInterrupt (as greenbench's launcher does), two
#: busy ranks run inside RankQuotas, and it reports where they are, then waits to be stopped.
LAUNCHER = """
import json, os, signal, subprocess, sys, time
from greenbench.launcher.cpu_quota import RankQuotas

def interrupted(signum, frame):
    raise KeyboardInterrupt

signal.signal(signal.SIGTERM, interrupted)
children = []
try:
    with RankQuotas(2, cores=1) as quotas:
        env = {**os.environ, **quotas.env()}
        children = [
            subprocess.Popen([sys.executable, "-c", sys.argv[1], str(rank)], env=env,
                             stdout=subprocess.PIPE, text=True)
            for rank in range(2)
        ]
        joined = [child.stdout.readline().strip() for child in children]
        print(json.dumps({"path": str(quotas.path), "warning": quotas.warning,
                          "pids": [c.pid for c in children], "joined": joined}), flush=True)
        while True:
            time.sleep(1)
finally:
    for child in children:
        child.kill()
        child.wait()
"""

slow = pytest.mark.slow
Spawn = Callable[..., subprocess.Popen]


def ours(root: Path) -> list[Path]:
    """The run groups this process has under root."""
    return sorted((root / "greenbench").glob(f"{os.getpid()}-*"))


def cgroup_writable() -> str | None:
    """None when groups can be made under the real controller, else why not."""
    with RankQuotas(1, cores=1) as probe:
        return probe.warning


@pytest.fixture
def cgroups() -> Iterator[Path]:
    """The real controller (skip where it cannot be written); at the end, whatever group this
    process still has there is removed, should a test have failed half way."""
    why = cgroup_writable()
    if why is not None:
        pytest.skip(f"cgroup v1 cpu controller not writable here: {why}")
    try:
        yield CGROUP_CPU_ROOT
    finally:
        for run in ours(CGROUP_CPU_ROOT):
            cpu_quota._remove_run_dir(run, CGROUP_CPU_ROOT)


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start processes in their own sessions; kill each session (orphans too) and reap at the end,
    then sweep the groups their launchers left."""
    started: list[subprocess.Popen] = []

    def start(args: list[str], env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
        proc = subprocess.Popen(
            args, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True, **kw
        )
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait(timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()
        sweep_stale(CGROUP_CPU_ROOT)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc/<pid>/stat (fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_group(pid: int) -> str:
    """The process's group in the cpu controller's hierarchy, e.g. '/greenbench/123-ab/rank0'."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    raise AssertionError(f"no cpu controller line in /proc/{pid}/cgroup")


def in_group(group: Path) -> str:
    return "/" + str(group.relative_to(CGROUP_CPU_ROOT))


def start_busy(spawn: Spawn, quotas: RankQuotas, n: int | None = None) -> list[subprocess.Popen]:
    """Busy ranks 0..n-1 (all of quotas' ranks by default), each checked to be in its group."""
    env = {**os.environ, **quotas.env()}
    n = quotas.n_ranks if n is None else n
    ranks = [spawn([sys.executable, "-c", BUSY, str(r)], env) for r in range(n)]
    for rank, proc in enumerate(ranks):
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "joined"
        assert quotas.path is not None
        assert cpu_group(proc.pid) == in_group(quotas.path / f"rank{rank}")
    return ranks


@contextlib.contextmanager
def favoured(quotas: RankQuotas) -> Iterator[None]:
    """The top CFS weight for the run's groups while the block runs, so that other work on this
    shared machine (another test session, say) cannot take the ranks' share: the quota alone is
    then what limits them, which is what the measurement is about."""
    assert quotas.path is not None
    parent = quotas.path.parent / "cpu.shares"
    before = parent.read_text().strip()
    try:
        for group in (parent, quotas.path / "cpu.shares"):
            group.write_text(str(MAX_SHARES))
        yield
    finally:
        parent.write_text(before)


def kill(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


# --- the quota itself ----------------------------------------------------------------------------


@slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize(("cores", "low", "high"), [(2, 0.35, 0.65), (1, 0.15, 0.35)])
def test_each_of_four_busy_ranks_gets_cores_over_ranks(
    cgroups: Path, spawn: Spawn, cores: int, low: float, high: float
) -> None:
    # 4 busy loops on this machine's cores would share them anyway; the 1-core case (0.25 each,
    # half the machine idle) shows that the quota, not the machine, is what limits them
    with RankQuotas(4, cores=cores) as quotas, favoured(quotas):
        assert quotas.warning is None and quotas.per_rank_cores == cores / 4
        ranks = start_busy(spawn, quotas)
        try:
            time.sleep(0.3)
            before = [cpu_seconds(p.pid) for p in ranks]
            t0 = time.monotonic()
            time.sleep(3.0)
            after = [cpu_seconds(p.pid) for p in ranks]
            wall = time.monotonic() - t0
        finally:
            kill(ranks)
    fractions = [(a - b) / wall for a, b in zip(after, before, strict=True)]
    print(f"cores={cores}: CPU fraction per rank {[round(f, 3) for f in fractions]}")
    assert all(low <= f <= high for f in fractions), fractions


# --- cleanup on every exit path ------------------------------------------------------------------


@slow
@pytest.mark.timeout(60)
def test_groups_are_made_as_asked_and_gone_after_a_normal_exit(cgroups: Path, spawn: Spawn) -> None:
    with RankQuotas(3, cores=2, period_us=50_000) as quotas:
        run = quotas.path
        assert run is not None and run.parent == cgroups / "greenbench"
        assert run.name.startswith(f"{os.getpid()}-")
        assert quotas.env() == {ENV_VAR: str(run)}
        assert (run / "cpu.shares").read_text().strip() == "3072"  # weighs as 3 processes
        for rank in range(3):
            assert (run / f"rank{rank}" / "cpu.cfs_period_us").read_text().strip() == "50000"
            assert (run / f"rank{rank}" / "cpu.cfs_quota_us").read_text().strip() == "33333"
        # a rank still alive at exit is moved back to the root group so its group can go
        (alive,) = start_busy(spawn, quotas, 1)
    assert not run.exists() and quotas.path is None and quotas.warning is None
    assert quotas.env() == {}
    assert cpu_group(alive.pid) == "/"
    kill([alive])


@slow
def test_groups_are_gone_after_an_exception_which_propagates(cgroups: Path) -> None:
    quotas = RankQuotas(2, cores=1)
    with pytest.raises(RuntimeError, match="boom"), quotas:
        run = quotas.path
        assert run is not None and (run / "rank1").is_dir()
        raise RuntimeError("boom")
    assert not run.exists()


@slow
@pytest.mark.timeout(60)
def test_groups_are_gone_after_sigterm_to_the_launcher(cgroups: Path, spawn: Spawn) -> None:
    launcher = spawn([sys.executable, "-c", LAUNCHER, BUSY], stderr=subprocess.DEVNULL)
    assert launcher.stdout is not None
    state = json.loads(launcher.stdout.readline())
    run = Path(state["path"])
    assert state["warning"] is None and state["joined"] == ["joined", "joined"]
    for rank, pid in enumerate(state["pids"]):
        assert cpu_group(pid) == in_group(run / f"rank{rank}")
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=30) != 0  # KeyboardInterrupt went up, as in greenbench
    assert not run.exists()


@slow
@pytest.mark.timeout(60)
def test_sweep_stale_removes_what_a_sigkilled_launcher_left(cgroups: Path, spawn: Spawn) -> None:
    launcher = spawn([sys.executable, "-c", LAUNCHER, BUSY], stderr=subprocess.DEVNULL)
    assert launcher.stdout is not None
    state = json.loads(launcher.stdout.readline())
    run = Path(state["path"])
    with RankQuotas(1, cores=1) as ours:  # a live launcher's groups are left alone
        launcher.kill()  # the launcher alone: its ranks live on, orphaned, inside their groups
        launcher.wait(timeout=10)
        assert run.is_dir()
        assert [cpu_group(pid) for pid in state["pids"]] == [
            in_group(run / "rank0"),
            in_group(run / "rank1"),
        ]
        removed = sweep_stale(cgroups)
        assert run in removed and ours.path not in removed
        assert ours.path is not None and ours.path.is_dir()
    assert not run.exists()
    assert [cpu_group(pid) for pid in state["pids"]] == ["/", "/"]


@pytest.fixture
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in this process, as in greenbench's launcher."""

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@slow
@pytest.mark.parametrize("during", ["_weigh", "_remove_run_dir"])
def test_a_sigterm_while_groups_are_made_or_removed_leaves_none(
    cgroups: Path, sigterm_interrupts: None, monkeypatch: pytest.MonkeyPatch, during: str
) -> None:
    # the signal comes in the middle of making the groups (__enter__) or of removing them
    # (__exit__, say a second SIGTERM): it is held until the groups are gone, then raised
    real = getattr(cpu_quota, during)

    def signalled(*args: object) -> object:
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args)

    monkeypatch.setattr(cpu_quota, during, signalled)
    quotas = RankQuotas(2, cores=1)
    with pytest.raises(KeyboardInterrupt), quotas:
        assert during == "_remove_run_dir"  # the with block runs only when making succeeded
        assert quotas.path is not None and quotas.path.is_dir()
    assert quotas.path is None and ours(cgroups) == []


# --- no usable cgroup: a warning, no quotas, nothing raised ------------------------------------


def unusable_roots(tmp_path: Path) -> dict[str, Path]:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    look_alike = tmp_path / "look-alike"  # an ordinary directory with a cgroup's file names
    look_alike.mkdir()
    for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us", "cgroup.procs", "tasks"):
        (look_alike / name).write_text("")
    return {"missing": tmp_path / "missing", "file": a_file, "look-alike": look_alike}


@pytest.mark.parametrize("kind", ["missing", "file", "look-alike"])
def test_an_unusable_root_gives_a_warning_and_no_quotas(tmp_path: Path, kind: str) -> None:
    root = unusable_roots(tmp_path)[kind]
    with RankQuotas(4, cores=2, root=root) as quotas:
        assert quotas.warning is not None and "without quotas" in quotas.warning
        assert str(root) in quotas.warning
        assert quotas.env() == {} and quotas.path is None
    assert quotas.warning is not None
    if kind == "look-alike":  # nothing of ours is left there, and no file was made
        assert list((root / "greenbench").iterdir()) == []
        assert sorted(p.name for p in root.iterdir()) == [
            "cgroup.procs",
            "cpu.cfs_period_us",
            "cpu.cfs_quota_us",
            "greenbench",
            "tasks",
        ]


def test_a_non_root_user_gets_a_warning_and_no_quotas(cgroups: Path, tmp_path: Path) -> None:
    # from a process that has dropped root (after its imports): the real controller (no right to
    # make a group) and a root it may not even look into (tmp_path is root's, mode 0700)
    hidden = unusable_roots(tmp_path)["look-alike"]
    code = (
        "import json, os, sys\n"
        "from pathlib import Path\n"
        "from greenbench.launcher.cpu_quota import RankQuotas\n"
        "os.setresgid(65534, 65534, 65534)\n"
        "os.setresuid(65534, 65534, 65534)\n"
        "for root in sys.argv[1:]:\n"
        "    with RankQuotas(4, cores=2, root=Path(root)) as q:\n"
        "        print(json.dumps({'warning': q.warning, 'env': q.env()}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(cgroups), str(hidden)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    real, unseen = (json.loads(line) for line in done.stdout.splitlines())
    assert real["env"] == {} and unseen["env"] == {}
    assert "Permission denied" in real["warning"] and "without quotas" in real["warning"]
    assert str(hidden) in unseen["warning"] and "without quotas" in unseen["warning"]


def test_sweep_stale_never_raises_on_an_unusable_root(tmp_path: Path) -> None:
    for root in unusable_roots(tmp_path).values():
        assert sweep_stale(root) == []


# --- the small parts -----------------------------------------------------------------------------


def test_join_rank_group_without_quotas_or_with_a_bad_dir(tmp_path: Path) -> None:
    assert join_rank_group(0, {}) is None
    why = join_rank_group(1, {ENV_VAR: str(tmp_path / "gone")})
    assert why is not None and str(tmp_path / "gone" / "rank1") in why
    assert not (tmp_path / "gone").exists()  # nothing was created


def test_quota_is_cores_over_ranks_and_never_below_a_millisecond() -> None:
    assert RankQuotas(4, cores=2).quota_us == 50_000
    assert RankQuotas(4, cores=2).per_rank_cores == 0.5
    assert RankQuotas(3, cores=1, period_us=10_000).quota_us == 3333
    assert RankQuotas(1000, cores=1).quota_us == 1000
    assert RankQuotas(2).per_rank_cores == pytest.approx((os.cpu_count() or 1) / 2)
    for bad in ({"n_ranks": 0}, {"n_ranks": 2, "cores": 0}, {"n_ranks": 2, "period_us": 500}):
        with pytest.raises(ValueError):
            RankQuotas(**bad)


def test_quota_wanted() -> None:
    assert quota_wanted("auto", 4, 2) and not quota_wanted("auto", 2, 2)
    assert not quota_wanted("auto", 1, 2)
    assert quota_wanted("on", 1, 8) and quota_wanted("on", 4, 2)
    assert not quota_wanted("off", 4, 2)
    with pytest.raises(ValueError, match="auto"):
        quota_wanted("yes", 4, 2)
