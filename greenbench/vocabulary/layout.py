"""The parallel layout of a run: named degrees of parallelism, as plain data.

A layout says how a run's ranks are arranged: ``dp_replicate`` (data-parallel replicas, as DDP
keeps them), ``dp_shard`` (data-parallel ranks that shard parameters, as FSDP does), ``tp``
(tensor parallel), ``pp`` (pipeline stages) and ``cp`` (context parallel, the sequence split).
Their product is the number of ranks. It has one canonical text, used everywhere a layout is
stored or shown: ``dpr2-dps1-tp1-pp1-cp1`` (the schema's earlier ``dp2-tp2-pp1-cp1`` form with
data parallelism split into replicate and shard).

How the settings relate (defined once, here): ``strategy`` names the algorithm; ``layout.*``
give the degrees; a strategy applies some degrees and fills one of them with the ranks left
over (`resolve_layout`). ``nproc × nnodes`` must equal the product, and is derived from it when
omitted. Adding a degree is one field and one entry of `DEGREES`.

No torch here: the store, compare and the dashboard render layouts too. The running layer turns a
layout into a ``DeviceMesh`` (`greenbench.rank.mesh`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

from greenbench.errors import SpecError

#: every degree, in the order of the canonical text
DEGREES = ("dp_replicate", "dp_shard", "tp", "pp", "cp")
#: short names in the canonical text
SHORT = {"dp_replicate": "dpr", "dp_shard": "dps", "tp": "tp", "pp": "pp", "cp": "cp"}
#: device-mesh dimension order, outermost first (torchtitan's: pp, dp_replicate, dp_shard, cp, tp)
MESH_ORDER = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
#: what each degree splits, for messages
MEANING = {
    "dp_replicate": "data-parallel replicas",
    "dp_shard": "data-parallel shards",
    "tp": "tensor-parallel ranks",
    "pp": "pipeline stages",
    "cp": "context-parallel ranks",
}

_TEXT = re.compile(r"dpr(\d+)-dps(\d+)-tp(\d+)-pp(\d+)-cp(\d+)")
_PART = re.compile(r"(dpr|dps|tp|pp|cp)(\d+)")
_LONG = {short: name for name, short in SHORT.items()}
_LEGACY = re.compile(r"dp(\d+)")


@dataclass(frozen=True, slots=True)
class Layout:
    """Degrees of parallelism; every one is >= 1 and their product is the world size."""

    dp_replicate: int = 1
    dp_shard: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"layout.{f.name} must be an integer >= 1, got {value!r}")

    @property
    def world(self) -> int:
        """Ranks the layout needs: the product of its degrees."""
        return math.prod(self.degrees().values())

    @property
    def dp(self) -> int:
        """Data-parallel degree (replicas × shards): how many ranks split the batch."""
        return self.dp_replicate * self.dp_shard

    def degrees(self) -> dict[str, int]:
        """Every degree by name, in `DEGREES` order."""
        return {name: getattr(self, name) for name in DEGREES}

    def mesh_dims(self) -> tuple[tuple[str, int], ...]:
        """The dimensions of this layout's device mesh: degrees above 1, outermost first."""
        return tuple((name, getattr(self, name)) for name in MESH_ORDER if getattr(self, name) > 1)

    @property
    def text(self) -> str:
        """The canonical text, e.g. ``dpr1-dps4-tp1-pp1-cp1``."""
        return "-".join(f"{SHORT[name]}{value}" for name, value in self.degrees().items())

    def __str__(self) -> str:
        return self.text

    @property
    def short(self) -> str:
        """The degrees above 1, e.g. ``tp2-pp2`` (``single`` for one rank)."""
        parts = [f"{SHORT[n]}{v}" for n, v in self.degrees().items() if v > 1]
        return "-".join(parts) or "single"

    @classmethod
    def from_short(cls, text: str) -> Layout:
        """A layout from the degrees it names, the rest 1: ``tp2-dps2``, ``pp4``, ``cp2xdps2``
        (parts joined by ``-``, ``x`` or ``×``, in any order) or the canonical text."""
        parts = [p for p in re.split(r"[-x×\s]+", text.strip().lower()) if p]
        degrees: dict[str, int] = {}
        for part in parts:
            match = _PART.fullmatch(part)
            if match is None or _LONG[match.group(1)] in degrees:
                raise SpecError(
                    f"not a layout: {text!r} (name degrees as dpr/dps/tp/pp/cp with a number, "
                    "each once, e.g. 'tp2-dps2')"
                )
            degrees[_LONG[match.group(1)]] = int(match.group(2))
        if not degrees:
            raise SpecError(f"not a layout: {text!r} (e.g. 'tp2-dps2')")
        return cls(**degrees)

    @classmethod
    def parse(cls, text: str, *, strategy: str | None = None) -> Layout:
        """A layout from its canonical text. The legacy ``dpN`` (stored before layouts had
        named degrees) needs the run's strategy: ``fsdp`` sharded, anything else replicated."""
        text = text.strip()
        match = _TEXT.fullmatch(text)
        if match:
            return cls(*(int(g) for g in match.groups()))
        legacy = _LEGACY.fullmatch(text)
        if legacy:
            n = int(legacy.group(1))
            return cls(dp_shard=n) if strategy == "fsdp" else cls(dp_replicate=n)
        raise SpecError(f"not a layout: {text!r} (expected e.g. 'dpr1-dps2-tp1-pp1-cp1')")


def resolve_layout(
    given: Mapping[str, int | None],
    *,
    world: int | None,
    strategy: str,
    applies: Iterable[str],
    fills: str | None,
    appliers: Mapping[str, Iterable[str]] | None = None,
) -> Layout:
    """The layout of a run from the ``layout.*`` settings (``None``: not given).

    ``applies`` are the degrees the strategy can apply (any other must be 1); ``fills`` is the
    degree that takes the ranks the others leave (``None``: the strategy runs one rank).
    ``world`` is ``nproc × nnodes`` when given, else it is the product of the degrees.
    ``appliers`` names, per degree, the strategies that can apply it (for the message when this
    one cannot). Raises SpecError naming the settings and the numbers when they cannot agree:
    first the world size, then the strategy.
    """
    fixed = {name: int(v) for name, v in given.items() if v is not None}
    if fills is None:  # one rank
        if world not in (None, 1):
            raise SpecError(
                f"strategy {strategy!r} runs one rank; got nproc×nnodes = {world} "
                "(use ddp or fsdp for several ranks)"
            )
        layout = Layout(**fixed)
    elif fills in fixed or world is None:
        layout = Layout(**fixed)
    else:
        rest = math.prod(fixed.values()) if fixed else 1
        if world % rest:
            given_text = " × ".join(f"layout.{k}={v}" for k, v in fixed.items())
            raise SpecError(f"{given_text} does not divide the world size nproc×nnodes = {world}")
        layout = Layout(**{**fixed, fills: world // rest})
    if world is not None and layout.world != world:
        raise SpecError(
            f"layout {layout.text} needs {layout.world} ranks but nproc×nnodes = {world}"
        )
    allowed = set(applies)
    for name, value in layout.degrees().items():
        if value != 1 and name not in allowed:
            others = sorted((appliers or {}).get(name, ()))
            where = (
                f"use strategy {' or '.join(repr(o) for o in others)}"
                if others
                else "no strategy applies it yet"
            )
            raise SpecError(
                f"strategy {strategy!r} does not apply layout.{name}={value} "
                f"({MEANING[name]}); {where}"
            )
    return layout
