"""What a suite's jobs ask the cluster's scheduler for: a suite's ``[cluster]`` table, then the
command line (``--nodes``, ``--gpus-per-node``, ``--partition``, ``--account``,
``--time-min``, ``--per-job``, ``--cluster KEY=VALUE``) on top. Every value is checked here,
before anything is submitted or written."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from greenbench.errors import SpecError


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """The scheduler's side of a submission (per job; a job runs ``per_job`` configurations)."""

    #: SLURM partition, account, quality of service and node constraint (None: the cluster's)
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    #: a fixed request per job (None: each job asks what its configurations need): nodes, and
    #: GPUs per node; a configuration needing more is left out (stored skipped)
    nodes: int | None = None
    gpus_per_node: int | None = None
    #: wall-clock minutes each configuration may take; a job gets per_job times this
    time_min: int = 60
    #: CPU cores per rank (a job's one task per node asks cpus_per_rank × ranks per node)
    cpus_per_rank: int = 4
    #: memory per node in GB (None: the partition's default)
    mem_gb: int | None = None
    #: configurations per job (1: each configuration is a job of the array)
    per_job: int = 1
    #: jobs of one array that may run at once
    array_parallelism: int = 64
    #: whole nodes: another job on the node would add its draw to the node's CPU/DRAM counters
    exclusive: bool = True
    #: shell lines run in the job before greenbench (modules, a virtual environment)
    setup: tuple[str, ...] = ()
    #: seconds between two looks at the jobs' states while waiting
    poll_s: float = 10.0


KEYS = tuple(f.name for f in fields(ClusterOptions))
_POSITIVE = (
    "nodes", "time_min", "cpus_per_rank", "mem_gb", "per_job", "array_parallelism", "poll_s",
)  # fmt: skip
_NOT_NEGATIVE = ("gpus_per_node",)


def cluster_options(suite_table: dict[str, Any], cli: dict[str, Any]) -> ClusterOptions:
    """The options of a suite's ``[cluster]`` table with the command line's on top (values from
    the command line are text, as typed); SpecError naming the first bad key or value."""
    options = ClusterOptions()
    for where, table in (("[cluster]", suite_table), ("--cluster", cli)):
        for key, value in table.items():
            if value is None:
                continue
            options = replace(options, **{key: _coerce(key, value, where)})
    return options


def parse_cluster_assignment(text: str) -> tuple[str, str]:
    """One ``--cluster KEY=VALUE``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise SpecError(f"--cluster expects KEY=VALUE, got {text!r} (keys: {', '.join(KEYS)})")
    return key.strip(), value.strip()


def _coerce(key: str, value: Any, where: str) -> Any:
    if key not in KEYS:
        raise SpecError(f"{where}: unknown cluster key {key!r}; known: {', '.join(KEYS)}")
    if key == "setup":
        lines = [value] if isinstance(value, str) else value
        if not isinstance(lines, list | tuple) or not all(isinstance(v, str) for v in lines):
            raise SpecError(f"{where}: setup must be a shell line or a list of them")
        return tuple(lines)
    if key == "exclusive":
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in ("true", "1", "yes", "on"):
            return True
        if text in ("false", "0", "no", "off"):
            return False
        raise SpecError(f"{where}: exclusive must be true or false, got {value!r}")
    if key in _POSITIVE or key in _NOT_NEGATIVE:
        kind = float if key == "poll_s" else int
        try:
            if isinstance(value, bool) or (kind is int and isinstance(value, float)):
                raise ValueError
            number = kind(value)
        except (TypeError, ValueError):
            raise SpecError(
                f"{where}: {key} must be a positive {kind.__name__}, got {value!r}"
            ) from None
        if not (number > 0 or (key in _NOT_NEGATIVE and number == 0)):
            least = "≥ 0" if key in _NOT_NEGATIVE else "positive"
            raise SpecError(f"{where}: {key} must be {least}, got {value!r}")
        return number
    text = str(value).strip()
    if not text or any(c.isspace() for c in text):
        raise SpecError(f"{where}: {key} must be one word, got {value!r}")
    return text
