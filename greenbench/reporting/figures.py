"""How the report draws: saving a figure and keeping its labels short and legible.

Plots use matplotlib's Agg canvas directly (no pyplot state), so reports can be written from any
thread or process. Sections call ``figures.save`` through the module, so one replacement of it
(tests: a full disk, the texts drawn) reaches every section.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from greenbench.vocabulary.trust import interval_caption

DPI = 110
#: a short point or bar label's most characters
LABEL_CHARS = 42


def save(fig: Figure, path: Path) -> None:
    """Write ``fig`` to ``path`` as a PNG with no software stamp (same figure, same bytes)."""
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata={"Software": None})


def short_labels(names: list[str], most: int = LABEL_CHARS) -> tuple[list[str], str]:
    """``names`` less the words all of them share, each at most ``most`` characters (a cut
    name ends in "…"), and the shared words (what a title can say once)."""
    words = [str(n).split() for n in names]
    shared = set.intersection(*(set(w) for w in words)) if len(words) > 1 else set()
    common = " ".join(w for w in words[0] if w in shared) if words else ""
    out = []
    for name, ws in zip(names, words, strict=True):
        short = " ".join(w for w in ws if w not in shared) or str(name)
        out.append(short if len(short) <= most else short[: most - 1] + "…")
    return out, common


def wrap(text: str, width: int) -> str:
    """``text`` broken into lines of at most ``width`` characters (never cut)."""
    return "\n".join(textwrap.wrap(text, width, break_long_words=True)) or text


def bars(rows: pd.DataFrame) -> str:
    """What error bars over ``rows`` show, short enough for an axis (`interval_caption`)."""
    caption = interval_caption(rows["n_repeats"])
    return caption.replace(" of the repeats, not a CI (a CI needs ≥ 6 repeats)", ", not a CI")


def maybe_log(ax, xs: pd.Series, ys: pd.Series) -> None:  # type: ignore[no-untyped-def]
    """Log scale on each axis whose positive values span more than a factor of 20."""
    for values, setter in ((xs, ax.set_xscale), (ys, ax.set_yscale)):
        v = values[values > 0]
        if len(v) and v.max() / v.min() > 20:
            setter("log")


def slug(text: str) -> str:
    """``text`` as a file-name part: lower case, runs of other characters as one dash."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "workload"
