"""A configuration's layout settings: the text that names them at once (``layout=tp2-dps2``)
written into the degrees (and ``strategy=auto`` into the strategy that applies them), and the
degrees held against the model and the data. `greenbench.spec.resolve` makes the rest concrete
(nproc, the degrees a strategy fills)."""

from __future__ import annotations

from typing import Any

from greenbench.config import setting_of
from greenbench.errors import SpecError
from greenbench.settings import SCHEMA, LayoutSettings
from greenbench.vocabulary import DEGREES, Layout


def check_degrees_fit_model(s: dict[str, Any], degrees: dict[str, int]) -> None:
    """Each given degree against the model and the data: tp divides what the family splits
    (attention heads, Mamba's inner channels), pp is at most the layers, cp divides the
    sequence and the family has a context-parallel form (the card's `layout_fits`). (A user
    workload has no model family: its layouts are data-parallel only.)"""
    from greenbench.models import family

    config = SCHEMA.config(s)
    if config.model is None:
        return
    misfit = family(config.model.family).layout_fits(
        config.model.size,
        degrees.get("tp", 1),
        degrees.get("pp", 1),
        degrees.get("cp", 1),
        config.data.seq_len,
    )
    if misfit:
        raise SpecError(misfit)


#: each degree's setting, and the layout's text (``tp2-dps2``) that sets them at once
DEGREE_KEYS = {d: setting_of(LayoutSettings, d).key for d in DEGREES}
LAYOUT_TEXT = setting_of(LayoutSettings, "text").key
#: the strategy that applies a layout's degrees when ``strategy`` is ``auto``
AUTO_STRATEGY = {frozenset(): "single", frozenset({"dp_replicate"}): "ddp"}
AUTO_STRATEGY[frozenset({"dp_shard"})] = "fsdp"


def apply_layout_text(s: dict[str, Any]) -> str | None:
    """``layout`` (e.g. ``tp2-dps2``) into the ``layout.*`` degrees (in place), and
    ``strategy=auto`` into the strategy that applies them: ``single`` for one rank, ``ddp``
    for replicas alone, ``fsdp`` for shards alone, ``hybrid`` for anything else.

    A degree also set directly to another value keeps it, and the clash is returned for
    ``resolve`` to refuse once the degrees are checked against the model: a degree no layout
    could take (more pipeline stages than layers) is the problem to name, not its clash with a
    swept layout."""
    clash = None
    text = SCHEMA.config(s).layout.text
    if text != "auto":
        for name, value in Layout.from_short(str(text)).degrees().items():
            given = s[DEGREE_KEYS[name]]
            if given != "auto" and given != value:
                clash = clash or (
                    f"layout={text} gives layout.{name}={value} but layout.{name}={given}"
                    " is set too (give the layout or its degrees, not both)"
                )
                continue
            s[DEGREE_KEYS[name]] = value
    if s["strategy"] == "auto":
        degrees = SCHEMA.config(s).layout.degrees()
        given = frozenset(d for d, v in degrees.items() if v not in ("auto", 1))
        s["strategy"] = AUTO_STRATEGY.get(given, "hybrid")
    return clash
