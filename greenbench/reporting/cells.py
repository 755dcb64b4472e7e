"""How the report writes a number and a mark: table cells and list items alike."""

from __future__ import annotations

import math

#: how a configuration that trains only part of the model per token is marked
PARTIAL = "partial model"
#: what an estimated energy figure is, said wherever one would read as a finding: time × modelled
#: power, so it ranks configurations as their time does and its ratios are time ratios
ESTIMATE_FOLLOWS_TIME = "estimate: time × modelled power, so it ranks as time does"


def g(v: object) -> str:
    """A number in 4 significant digits; "n/a" when unknown (None, NaN)."""
    try:
        return "n/a" if v is None or math.isnan(float(v)) else f"{float(v):.4g}"  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "n/a"


def partial(skipped: float) -> str:
    """The marker of a configuration that skips ``skipped`` of its stages per token."""
    return f"{PARTIAL}: skips {skipped:.0%} of its stages per token"


def row(cells: list[object]) -> str:
    """One Markdown table row of ``cells`` (a ``|`` inside a cell escaped)."""
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
