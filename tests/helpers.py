"""What many tests share: the quickest run that still trains and measures, and a free port for
gloo process groups started by hand. Importable from any test (``pythonpath`` in pyproject)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

#: one tiny Transformer run on the CPU: one warm-up and one measured step, no idle sampling, one
#: repeat (on the CPU on every machine: ``device: auto`` would take a GPU where there is one)
QUICK = {
    "device": "cpu",
    "model.family": "transformer",
    "data.seq_len": 32,
    "data.global_batch": 2,
    "data.micro_batch": 1,
    "train.warmup_steps": 1,
    "train.steps": 1,
    "train.min_window_s": 0.0,
    "energy.idle_s": 0.0,
    "repeats": 1,
}


#: the data plan the strategy tests train on (a DataPlan's fields): small fixed-length rows, equal
#: microbatch counts per rank, so every strategy sees the same batches as a single process
TINY_DATA = dict(
    lengths="fixed",
    seq_len=32,
    global_batch=8,
    micro_batch=2,
    balance="same-count",
    cost_model="linear",
    scale=1.0,
    seed=3,
)


def free_port() -> int:
    """A TCP port nothing listens on now (for MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: how the launcher's warning begins when another process shared the machine during a run
CONTENTION_PREFIX = "contended:"


def beside_contention(warnings: Iterable[str] | None) -> list[str]:
    """A run's stored warnings without the one saying the machine was shared: a test that expects
    no other warning holds on a busy machine too, where that one is rightly added."""
    return [w for w in warnings or () if not w.startswith(CONTENTION_PREFIX)]


def rank_start_s() -> float:
    """Seconds a rank takes to start on this machine now: a fresh interpreter importing the
    worker (torch, transformers and greenbench), timed. A test whose check needs its ranks to have
    started within a fixed time (a timeout that must find a rank where it hangs, not still
    importing) widens that time by this much, so it holds on a busy machine too, where starting
    takes several times longer than on a quiet one."""
    start = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", "import greenbench.rank.worker"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.monotonic() - start


def spawn(fn: Callable[..., None], args: tuple, nprocs: int) -> None:
    """``torch.multiprocessing.spawn(fn, args, nprocs)``, the ranks forked from this process.

    Forked, not spawned: a spawned rank is a fresh interpreter importing torch, transformers and
    greenbench again (about 4.5 CPU-seconds each, most of what a test's four ranks cost); a forked
    one has them already. Safe here because the ranks start before any process group exists in
    this process, use no GPU, and run one intra-op thread each (set before ``fn`` runs), so no
    OpenMP pool of this process is needed in the child.

    Each rank ends as greenbench's own ranks do (`greenbench.processes.exit_now`): once ``fn`` has
    returned, with its results on disk, without interpreter finalization, where a gloo thread
    still releasing the last collective can abort the process ("terminate called without an
    active exception") after a successful run. An exception in ``fn`` reaches the caller as
    ``spawn`` reports it."""
    import torch.multiprocessing as mp

    mp.start_processes(
        _rank_then_exit, args=(fn, *args), nprocs=nprocs, join=True, start_method="fork"
    )


def _rank_then_exit(rank: int, fn: Callable[..., None], *args: object) -> None:
    import torch

    torch.set_num_threads(1)
    fn(rank, *args)
    from greenbench.processes import exit_now

    exit_now(0)


#: the dashboard's Streamlit script, as ``greenbench dashboard`` runs it
DASHBOARD_APP = Path(__file__).resolve().parents[1] / "greenbench" / "dashboard_app" / "app.py"


def run_app(
    db: Path, monkeypatch: Any, view: str | None = None, script: Path = DASHBOARD_APP
) -> Any:
    """The dashboard over ``db`` under Streamlit's AppTest, opened on ``view``, run once and
    checked to have raised nothing."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("GREENBENCH_DB", str(db))
    at = AppTest.from_file(str(script), default_timeout=60)
    if view:
        at.query_params["view"] = view
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(at: Any) -> str:
    """Every message and text element an AppTest page shows, one per line."""
    parts = [*at.info, *at.warning, *at.error, *at.markdown, *at.caption, *at.code]
    return "\n".join(str(p.value) for p in parts)
