"""A submission's record on disk: which jobs run which configurations under which run ids.

``<db>.jobs/<submission id>/manifest.json`` beside the database (submitit keeps each job's
pickles and logs in ``<job id>/`` beside it). It is what lets a later `greenbench status`
find jobs a `--no-wait` run left, store what a dead job owed the database, and what
`--resume` reads to know which configurations a cluster has already run: a configuration is
named by its spec as submitted (its key and label), since what ``auto`` becomes is decided on
the node. Rewritten whole (temporary file, rename) at every change.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from greenbench.errors import StoreError


def jobs_dir(db_path: str | Path) -> Path:
    """The folder of a database's cluster submissions: ``<db>.jobs/`` beside it."""
    db = Path(db_path).absolute()
    return db.with_name(db.name + ".jobs")


@dataclass(slots=True)
class JobRecord:
    """One job: its array, its configurations (``RunSpec.to_dict``) and their run ids."""

    array: str
    index: int
    specs: list[dict[str, Any]]
    run_ids: list[str]
    names: list[str]
    #: [config key of the spec as submitted, label] per configuration, for --resume
    keys: list[list[Any]]
    #: planned (not submitted yet: a local job waits its turn), submitted (the scheduler has
    #: it), collected (over, and its runs are in the database)
    state: str = "planned"
    job_id: str | None = None
    #: the scheduler's state and reason once the job is over
    end_state: str | None = None
    reason: str | None = None


@dataclass(slots=True)
class Manifest:
    """One `greenbench run` with a cluster executor."""

    submission_id: str
    executor: str
    db: str
    created: str
    #: per array: the submitit parameters its jobs were submitted with
    arrays: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs: list[JobRecord] = field(default_factory=list)
    python_path: list[str] = field(default_factory=list)
    force: bool = False
    devices: int | None = None

    @property
    def folder(self) -> Path:
        return jobs_dir(self.db) / self.submission_id

    @property
    def open_jobs(self) -> list[JobRecord]:
        return [j for j in self.jobs if j.state != "collected"]

    def save(self) -> None:
        """Write the manifest whole (temporary file, then rename)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self.folder / "manifest.json"
        tmp = target.with_name(f".manifest.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(asdict(self), indent=1, default=str), encoding="utf-8")
            os.replace(tmp, target)
        except OSError as exc:
            raise StoreError(f"cannot write {target}: {exc.strerror}") from None


def new_manifest(executor: str, db_path: Path, **extra: Any) -> Manifest:
    now = dt.datetime.now(dt.timezone.utc)
    submission_id = now.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
    db = str(Path(db_path).absolute())
    return Manifest(submission_id, executor, db, now.isoformat(), **extra)


def load_manifests(db_path: str | Path) -> tuple[list[Manifest], list[str]]:
    """Every submission recorded for ``db_path``, oldest first, and one line per record that
    cannot be read (left in place)."""
    folder = jobs_dir(db_path)
    found: list[Manifest] = []
    problems: list[str] = []
    if not folder.is_dir():
        return found, problems
    for path in sorted(folder.glob("*/manifest.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            jobs = [JobRecord(**j) for j in data.pop("jobs")]
            found.append(Manifest(**data, jobs=jobs))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            problems.append(f"cannot read submission record {path}: {exc}")
    return found, problems
