"""How greenbench's child processes live and end: they die with the process that started them
(ranks with their launcher, the Streamlit server with `greenbench dashboard`), and ranks end
without running interpreter finalization after distributed work (see `exit_now`); and how a
stop (Ctrl-C, SIGTERM) reaches the launcher even when it lands while a child is being started
(see `stop_handler`)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

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


def exit_now(code: int) -> None:
    """End this rank's process with ``code`` without running interpreter finalization.

    Why: ``destroy_process_group`` does not join gloo's worker threads (torch 2.13), and such a
    thread can still be releasing the last collective's work object, whose tensors hold Python
    objects, when the main thread returns. Releasing them needs the GIL; a thread that asks for
    the GIL while the interpreter finalizes is ended with ``pthread_exit``, whose unwinding
    through a ``noexcept`` C++ frame calls ``std::terminate``: "terminate called without an
    active exception", SIGABRT, after the results were already gathered (seen in about one
    FSDP run in ten on a 2-core machine; the core dump shows ``ProcessGroupGloo::runLoop`` →
    ``~AsyncGatherWork`` → ``take_gil`` → ``pthread_exit`` beside ``Py_FinalizeEx``). Every
    file this worker writes is complete (written and renamed) and its meters are closed before
    this point, so nothing is lost by skipping finalization: only the race goes.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


_stop_signal: int | None = None


def stop_handler(signum: int, frame: object) -> None:
    """A signal handler for SIGINT and SIGTERM: remember the stop, then raise KeyboardInterrupt.

    Why remember: a KeyboardInterrupt raised while Python runs its at-fork hooks (starting a
    child with ``preexec_fn``, which forks) is printed as "Exception ignored" and dropped, and the
    stop would be lost; whoever starts a child calls `forget_stops` before and `raise_if_stopped`
    right after, so a stop that landed meanwhile still stops it."""
    global _stop_signal
    _stop_signal = signum
    raise KeyboardInterrupt


def forget_stops() -> None:
    """Start watching for a stop afresh, before starting a child: a stop remembered earlier was
    raised where it landed and has been acted on."""
    global _stop_signal
    _stop_signal = None


def raise_if_stopped() -> None:
    """KeyboardInterrupt if `stop_handler` has been called since `forget_stops` (the stop may
    have been swallowed where it landed)."""
    if _stop_signal is not None:
        raise KeyboardInterrupt
