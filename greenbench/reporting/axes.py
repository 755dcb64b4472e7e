"""What one point of a history is: a commit, a branch, a label or a day.

A history follows one configuration over time (the dashboard's History view, `greenbench
compare --history`). asv and Bencher draw it per commit and per branch; here the user chooses
the axis (`AXES`), each point pooling the runs that share its value:

- ``commit``: the runs of one git sha, in the order of each sha's first run (the database does
  not know the git graph, and CI runs commits in order);
- ``branch``: the runs started on one git branch (``runs.git_branch``);
- ``label``: the runs of one ``greenbench run --label``;
- ``date``: the runs started on one day (UTC).

The default (`default_axis`) is ``commit`` where every run has a sha, else ``date``: runs
started outside a checkout have no sha, and on the commit axis would all be one point,
"unknown". A run without the axis's value (no sha, or no branch: started outside a checkout,
on a detached HEAD no CI named, or stored before branches were kept) is on no point of that
axis, and callers say how many runs they left out. A run without a label is on the point
`NO_LABEL`: not giving one was the user's choice, not an unknown.

Runs under different labels are not one point unless the axis is ``label``: a label is what the
user named a series (a nightly, a pull request, an experiment), so `series` keeps them apart
wherever they are drawn together, and `greenbench compare --history` asks for one.
"""

from __future__ import annotations

import pandas as pd

from greenbench.errors import SpecError

AXES = ("commit", "branch", "label", "date")
#: the point (and series) of runs stored without a label
NO_LABEL = "(no label)"
#: what each axis reads from a repeat row
AXIS_COLUMNS = {"commit": "git_sha", "branch": "git_branch", "label": "label", "date": "started_at"}
#: one point of each axis, in words (a count of points: "3 commits")
POINT_NAMES = {"commit": "commit", "branch": "branch", "label": "label", "date": "day"}


def check_axis(by: str) -> str:
    """``by`` if it names an axis, else a SpecError naming the axes."""
    if by not in AXES:
        raise SpecError(f"unknown history axis {by!r}: choose {', '.join(AXES)}")
    return by


def _known(values: pd.Series) -> pd.Series:
    """Where a text column holds a value (not NULL, not empty, not the "unknown" a leaderboard
    writes for a missing sha)."""
    text = values.astype("string")
    return values.notna() & ~text.fillna("").str.strip().isin(["", "unknown"])


def _column(rows: pd.DataFrame, name: str) -> pd.Series:
    """A column of ``rows``, or all missing where the rows lack it (a database or an export
    older than it)."""
    if name in rows:
        return rows[name]
    return pd.Series(None, index=rows.index, dtype=object)


def default_axis(rows: pd.DataFrame) -> str:
    """``commit`` where every run of ``rows`` has a git sha, else ``date``."""
    if rows.empty or bool(_known(_column(rows, "git_sha")).all()):
        return "commit"
    return "date"


def axis_values(rows: pd.DataFrame, by: str) -> pd.Series:
    """Each row's point on axis ``by`` as text; None where the row has no value for it (no sha
    on ``commit``, no branch on ``branch``)."""
    check_axis(by)
    if by == "label":
        return series_values(rows)
    if by == "date":
        started = pd.to_datetime(_column(rows, "started_at"))
        return started.dt.strftime("%Y-%m-%d").astype(object).where(started.notna(), None)
    values = _column(rows, AXIS_COLUMNS[by])
    return (
        values.astype(object)
        .where(_known(values), None)
        .map(lambda v: None if v is None else str(v))
    )


def series_values(rows: pd.DataFrame) -> pd.Series:
    """Each row's label as text, `NO_LABEL` where it has none."""
    labels = _column(rows, "label")
    return labels.astype(object).where(labels.notna(), NO_LABEL).map(str)


def narrowed(
    rows: pd.DataFrame, branch: str | None = None, label: str | None = None
) -> pd.DataFrame:
    """The rows started on git branch ``branch`` and run under label ``label`` (None: any)."""
    keep = pd.Series(True, index=rows.index)
    if branch is not None:
        keep &= _column(rows, "git_branch").astype(object).eq(branch)
    if label is not None:
        keep &= _column(rows, "label").astype(object).eq(label)
    return rows[keep]


def points_phrase(n: int, by: str) -> str:
    """``n`` points of axis ``by`` in words: "1 commit", "3 days"."""
    name = POINT_NAMES[check_axis(by)]
    if n == 1:
        return f"1 {name}"
    return f"{n} {'branches' if name == 'branch' else name + 's'}"
