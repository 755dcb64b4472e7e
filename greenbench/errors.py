"""Named errors. Every message tells the user what to do; the CLI prints it as one line.

Exit codes: 2 for bad input (usage, spec, unavailable device or meter), 1 for anything else.
"""

from __future__ import annotations


class GreenbenchError(Exception):
    """Base of every error greenbench raises on purpose."""

    exit_code: int = 1


class SpecError(GreenbenchError):
    """A suite file, a workload name or a --set value is invalid."""

    exit_code = 2


class DeviceUnavailable(GreenbenchError):
    """The requested device (e.g. --device cuda) does not exist on this machine."""

    exit_code = 2


class DoesNotFit(GreenbenchError):
    """A configuration needs more memory or time than this machine can give it."""

    exit_code = 2


class KernelUnavailable(GreenbenchError):
    """A requested kernel backend (e.g. ``model.scan=native``) cannot run on this machine."""

    exit_code = 2


class MeterUnavailable(GreenbenchError):
    """A forced energy source (--energy-source) cannot be used on this machine."""

    exit_code = 2


class MeterReadError(GreenbenchError):
    """An energy counter could not be read during a measured window."""


class StoreError(GreenbenchError):
    """The results database cannot be opened, is locked, or is not a greenbench database."""

    exit_code = 2


class OutputError(GreenbenchError):
    """An output path (``--out``) exists without --force, is no file or folder, or is unwritable."""

    exit_code = 2


class WorkerFailed(GreenbenchError):
    """A rank raised, was killed or timed out.

    ``rank`` is the failing rank when known, ``tail`` its last lines of output, and
    ``log_dir`` where the configuration's worker logs were kept."""

    def __init__(
        self,
        message: str,
        *,
        rank: int | None = None,
        tail: str | None = None,
        log_dir: str | None = None,
    ) -> None:
        super().__init__(message)
        self.rank = rank
        self.tail = tail
        self.log_dir = log_dir
