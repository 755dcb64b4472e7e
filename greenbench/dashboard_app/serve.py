"""Start the Streamlit dashboard over a results database (`greenbench dashboard`).

The app itself is ``greenbench/dashboard_app/app.py`` (inside the package so that an installed
greenbench ships it); this module only builds the ``python -m streamlit run`` command line,
prints the address and waits. The database path reaches the app both as ``$GREENBENCH_DB`` and
as ``--db PATH`` after ``--``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import greenbench
from greenbench.processes import die_with_parent

APP = Path(greenbench.__file__).resolve().parent / "dashboard_app" / "app.py"


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def build_command(
    db_path: Path, port: int, headless: bool = True, address: str = "127.0.0.1"
) -> list[str]:
    """The streamlit command line: no usage statistics, no file watcher, no browser when
    headless."""
    return [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.port", str(port),
        "--server.address", address,
        "--server.headless", "true" if headless else "false",
        "--server.fileWatcherType", "none",
        "--server.runOnSave", "false",
        "--browser.gatherUsageStats", "false",
        "--global.developmentMode", "false",
        "--client.toolbarMode", "viewer",
        "--", "--db", str(db_path),
    ]  # fmt: skip


def serve(
    db_path: Path, port: int | None = None, headless: bool = True, address: str = "127.0.0.1"
) -> int:
    """Run the dashboard until interrupted; return streamlit's exit code (0 after Ctrl-C).

    ``port=None`` picks a free port. ``address`` is what the server binds: the default keeps
    it on this machine (reach it from elsewhere with ``ssh -L``); "0.0.0.0" exposes it.
    """
    db = Path(db_path).resolve()
    port = port or free_port(address)
    env = dict(os.environ, GREENBENCH_DB=str(db), STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    # the app imports greenbench: make this checkout importable even when not pip-installed
    root = str(APP.parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    host = "localhost" if address in ("127.0.0.1", "0.0.0.0") else address
    note = "" if db.exists() else "  (no such file yet: the app shows how to create it)"
    print(f"greenbench dashboard on http://{host}:{port}  database {db}{note}", flush=True)
    # cwd: `python -m` puts the working directory first on sys.path, where a stray click.py or
    # altair.py of the user's would shadow the real one; the db path is already absolute
    # the server dies with us even on SIGKILL (PR_SET_PDEATHSIG); SIGTERM and SIGHUP stop it
    # like Ctrl-C does (Python's default for them would end us at once and orphan it)
    proc = subprocess.Popen(
        build_command(db, port, headless, address),
        env=env,
        cwd=APP.parent,
        preexec_fn=die_with_parent,
    )
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    for sig in previous:
        signal.signal(sig, _interrupt)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        return 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
