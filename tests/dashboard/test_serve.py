"""`greenbench dashboard` owns its Streamlit server: SIGTERM (or SIGHUP) to the command stops the
server and frees the port, and a SIGKILLed command takes the server with it. Real servers."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from greenbench.dashboard_app.serve import free_port

pytestmark = pytest.mark.slow


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def start(tmp_path: Path) -> tuple[subprocess.Popen, int, psutil.Process]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "greenbench.cli", "dashboard", "--port", str(port),
         "--db", str(tmp_path / "none.duckdb")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while not listening(port):
        assert proc.poll() is None, "greenbench dashboard exited before serving"
        assert time.monotonic() < deadline, "the server never listened"
        time.sleep(0.3)
    (server,) = [
        p for p in psutil.Process(proc.pid).children() if "streamlit" in " ".join(p.cmdline())
    ]
    return proc, port, server


def gone(server: psutil.Process, port: int, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        # a zombie leader's other threads may still hold the socket a moment: wait for both
        dead = not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
        if dead and not listening(port):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_server_ends_with_the_command(tmp_path: Path, sig: signal.Signals):
    proc, port, server = start(tmp_path)
    try:
        proc.send_signal(sig)
        proc.wait(timeout=20)
        assert gone(server, port), f"the Streamlit server outlived `greenbench dashboard` ({sig!r})"
        if sig == signal.SIGTERM:
            assert proc.returncode == 0
    finally:
        for p in (proc,):
            if p.poll() is None:
                p.kill()
        if server.is_running():
            server.kill()
