"""Regression verdicts for CI (``greenbench compare``); the rule is in ``rule`` and docs/compare.md.

``verdict`` holds the result types and metric directions, ``rule`` the pure comparison,
``render`` the table/Markdown/JSON output, ``shell`` the function the CLI calls, ``pr_comment``
the energy check's pull-request comment and action outputs (``python -m``).
"""

from greenbench.compare.render import render_json, render_markdown, render_table
from greenbench.compare.rule import compare, compare_history
from greenbench.compare.shell import compare_cli, parse_metrics, parse_threshold
from greenbench.compare.verdict import (
    ALIASES,
    DEFAULT_ALPHA,
    DEFAULT_CV_CAP,
    DEFAULT_DELTA,
    HISTORY_WINDOW,
    METRICS,
    Metric,
    Mismatch,
    Row,
    Verdict,
    delta_for,
    resolve_metric,
)
from greenbench.reporting.refs import load_ref

__all__ = [
    "ALIASES",
    "DEFAULT_ALPHA",
    "DEFAULT_CV_CAP",
    "DEFAULT_DELTA",
    "HISTORY_WINDOW",
    "METRICS",
    "Metric",
    "Mismatch",
    "Row",
    "Verdict",
    "compare",
    "compare_cli",
    "compare_history",
    "delta_for",
    "load_ref",
    "parse_metrics",
    "parse_threshold",
    "render_json",
    "render_markdown",
    "render_table",
    "resolve_metric",
]
