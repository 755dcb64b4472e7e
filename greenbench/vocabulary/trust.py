"""How far to trust a stored figure: the trust model, and how every view writes it.

A figure greenbench shows is only as good as the conditions it was taken under. `Trust.of`
reads those conditions from a stored row (a ``runs`` row, a repeat of ``runs`` joined with
``results``, or a leaderboard row pooling several runs) and every view renders them with the
same words: the ``run`` line, ``list runs``, ``show``, the leaderboard, Pareto and History,
``report``, ``export`` and ``compare``. docs/trust.md explains each signal.

The signals, and the stored columns they come from:

- **energy kind** (``energy_source``, ``energy_measured``, ``runs.simulated``): measured /
  estimated / emulated / simulated (`energy_kind`); its text is `energy_label`, unchanged.
- **contention** (``runs.contended``, ``runs.others_busy_cores``, ``runs.other_greenbench``):
  whether the machine was shared while the run ran, how many cores other processes kept busy,
  and how many other greenbench processes were seen: counts only, never pids or command lines.
  NULL ``contended`` (runs stored before it was watched) is *unknown*, not clean.
- **idle baseline** (``results.idle_power_w``, ``results.idle_note``): net energy is gross minus
  idle power × seconds, so it is only as good as the idle sample. The baseline is *unreliable*
  when the idle power was sampled while the machine was busy (other processes, or another
  greenbench), or when it exceeds the window's mean power (net energy would be below zero); the
  net energy is then stored unknown (NULL) and ``idle_note`` says why (`IDLE_UNRELIABLE`
  begins it). No idle power: *none* sampled, no net energy.
- **peak provenance** (``runs.peak_flops_source``): MFU's denominator came from a datasheet
  (a GPU) or a GEMM calibration of this CPU (`peak_kind`). A row may carry ``peak_consistent``
  (bool) and ``peak_note``: whether its stored peak agrees with the one peak its machine and
  thread count are judged against (None, the default: not checked); `Peak` renders them.
- **repeats and interval** (the number of repeats): a distribution-free 95 % interval of the
  median needs `repeats_for_interval` (6) repeats; below that the interval drawn is the
  min–max range of the repeats, and it is named so (`interval_for`, `interval_caption`).

Rendering: `Trust.markers` are the short flags of what lowers trust (empty when nothing does),
`Trust.mark` joins them for a table cell, `Trust.details` spells each of them out, and
`Trust.signals` gives every signal, good or bad, for a detail view.
Pure Python: no torch, no pandas needed (pandas' missing values are understood).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from greenbench.vocabulary.energy import (
    EMULATED_SOURCE,
    SIMULATED_SOURCE,
    energy_label,
    is_simulated,
)

#: the coverage every interval greenbench draws aims at
CONFIDENCE = 0.95

EnergyKind = Literal["measured", "estimated", "emulated", "simulated"]
ENERGY_KINDS: tuple[EnergyKind, ...] = ("measured", "estimated", "emulated", "simulated")

#: the marker of a result measured while the machine was shared
CONTENDED = "⚠ contended"
#: the marker of a result whose idle baseline is unreliable (its net energy is unknown)
IDLE_MARK = "net unknown: idle unreliable"
#: the marker of a result whose stored MFU peak differs from its machine's
PEAK_MARK = "peak differs"
#: how ``results.idle_note`` begins when the idle baseline is unreliable
IDLE_UNRELIABLE = "idle baseline unreliable"

IntervalKind = Literal["none", "single", "range", "ci"]


def missing(value: object) -> bool:
    """None, NaN, or pandas' NA / NaT: what a NULL column reads as."""
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN, NaT
    except (TypeError, ValueError):  # pandas' NA refuses to be a bool
        return True


def flagged(value: object) -> bool:
    """Whether a stored flag is known to be true (numpy's and Python's; NULL reads false)."""
    return not missing(value) and bool(value)


def _flag(value: object) -> bool | None:
    return None if missing(value) else bool(value)


def _number(value: object) -> float | None:
    if missing(value):
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _text(value: object) -> str:
    return "" if missing(value) else str(value)


# ------------------------------------------------------------------------------ repeats


def repeats_for_interval(confidence: float = CONFIDENCE) -> int:
    """The fewest repeats whose extremes cover the median with ``confidence``: the
    distribution-free interval [x_(1), x_(n)] covers it with 1 − 2 · 0.5ⁿ (6 at 95 %)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    n = 1
    while 1.0 - 2.0 * 0.5**n < confidence:
        n += 1
    return n


@dataclass(frozen=True, slots=True)
class Interval:
    """What interval ``n`` repeats allow around their median."""

    n: int
    kind: IntervalKind  # none: no repeat; single: one; range: min–max only; ci: a 95 % CI
    confidence: float = CONFIDENCE

    @property
    def name(self) -> str:
        """What is drawn: "95 % CI", "min–max range", "no interval"."""
        if self.kind == "ci":
            return f"{self.confidence:.0%} CI".replace("%", " %")
        if self.kind == "range":
            return "min–max range"
        return "no interval"

    @property
    def short(self) -> str:
        """The marker when the interval falls short of a CI ("" when it is one)."""
        if self.kind == "range":
            return f"min–max of {self.n}"
        if self.kind == "single":
            return "1 repeat"
        if self.kind == "none":
            return "no repeats"
        return ""

    @property
    def note(self) -> str:
        """One sentence: what the interval is, and what a 95 % one would need."""
        need = repeats_for_interval(self.confidence)
        ci = f"a {self.confidence:.0%} interval".replace("%", " %")
        if self.kind == "ci":
            return f"{self.name} of the median over {self.n} repeats"
        if self.kind == "range":
            return f"min–max range of {self.n} repeats, not a CI: {ci} needs ≥ {need} repeats"
        if self.kind == "single":
            return f"1 repeat, no interval: {ci} needs ≥ {need} repeats"
        return "no repeats"


def interval_for(n: int, confidence: float = CONFIDENCE) -> Interval:
    """The interval ``n`` repeats allow (see `repeats_for_interval`)."""
    n = int(n)
    if n <= 0:
        return Interval(0, "none", confidence)
    if n == 1:
        return Interval(1, "single", confidence)
    kind: IntervalKind = "ci" if n >= repeats_for_interval(confidence) else "range"
    return Interval(n, kind, confidence)


def interval_caption(ns: Iterable[int], confidence: float = CONFIDENCE) -> str:
    """What the error bars (or interval cells) of rows with ``ns`` repeats are, in words: a
    95 % CI where every row has enough repeats, the min–max range where none has, both named
    where they mix."""
    kinds = {interval_for(n, confidence).kind for n in ns}
    need = repeats_for_interval(confidence)
    ci = f"{confidence:.0%} CI of the median".replace("%", " %")
    if kinds <= {"ci"}:
        return ci
    if "ci" not in kinds:
        return f"min–max range of the repeats, not a CI (a CI needs ≥ {need} repeats)"
    return f"{ci} with ≥ {need} repeats, else the min–max range of the repeats"


# ------------------------------------------------------------------------------ energy


def energy_kind(source: object, measured: object, simulated: object = None) -> EnergyKind:
    """measured, estimated, emulated (an emulated GPU's power model) or simulated."""
    parts = str(source).split("+")
    if SIMULATED_SOURCE in parts or (
        is_simulated(source, simulated) and EMULATED_SOURCE not in parts
    ):
        return "simulated"
    if EMULATED_SOURCE in parts:
        return "emulated"
    return "measured" if _flag(measured) else "estimated"


# ------------------------------------------------------------------------------ contention


def cores_text(cores: float) -> str:
    return f"{cores:.2f} core{'' if abs(cores - 1.0) < 5e-3 else 's'}"


def greenbench_text(count: int) -> str:
    return f"{count} other greenbench process{'' if count == 1 else 'es'}"


@dataclass(frozen=True, slots=True)
class Contention:
    """Whether the machine was shared while a result was measured, and how busy it was.

    ``contended`` None: not watched (a run stored before contention was recorded). On a row
    pooling several runs, ``contended_runs`` of ``runs`` were contended and the figures are the
    most any of them saw."""

    contended: bool | None
    others_busy_cores: float | None = None
    other_greenbench: int | None = None
    runs: int = 1
    contended_runs: int | None = None

    @property
    def text(self) -> str:
        """ "" when not contended; else what was seen, e.g. "contended: other processes kept
        1.30 cores busy; 1 other greenbench process"."""
        if not self.contended:
            return ""
        seen = []
        if self.others_busy_cores is not None and self.others_busy_cores > 0:
            seen.append(f"other processes kept {cores_text(self.others_busy_cores)} busy")
        if self.other_greenbench:
            seen.append(greenbench_text(self.other_greenbench))
        which = ""
        if self.runs > 1 and self.contended_runs is not None:
            which = f" ({self.contended_runs} of {self.runs} runs)"
        return f"contended{which}: " + ("; ".join(seen) or "the machine was shared")


# ------------------------------------------------------------------------------ idle baseline


@dataclass(frozen=True, slots=True)
class IdleBaseline:
    """The idle power net energy subtracts: reliable, unreliable (with why) or none."""

    state: Literal["reliable", "unreliable", "none"]
    note: str = ""

    @property
    def text(self) -> str:
        if self.state == "unreliable":
            return f"net energy unknown: {self.note or IDLE_UNRELIABLE}"
        if self.state == "none":
            return "no idle baseline sampled: no net energy"
        return ""


def idle_baseline(
    idle_power_w: object, idle_note: object = None, unreliable: int = 0
) -> IdleBaseline:
    """From a repeat's ``idle_power_w`` and ``idle_note`` (or a pooled row's count of
    ``unreliable`` repeats)."""
    note = _text(idle_note)
    if note or unreliable:
        return IdleBaseline("unreliable", note)
    if _number(idle_power_w) is None:
        return IdleBaseline("none")
    return IdleBaseline("reliable")


def idle_problem(
    idle_power_w: float | None, energy_j: float | None, seconds: float, sampled_note: str = ""
) -> str:
    """Why a window's idle baseline is unreliable ("" when it is not): it was sampled while
    the machine was busy (``sampled_note``, from the launcher's watch of the idle sample), or
    it exceeds the window's mean power, which would make net energy negative."""
    if idle_power_w is None:
        return ""
    if sampled_note:
        return f"{IDLE_UNRELIABLE}: {sampled_note}"
    if energy_j is not None and seconds > 0 and idle_power_w * seconds > energy_j:
        return (
            f"{IDLE_UNRELIABLE}: idle power {idle_power_w:.4g} W is above the window's mean "
            f"power {energy_j / seconds:.4g} W (the idle sample was taken while the machine "
            "was busier than during the run)"
        )
    return ""


# ------------------------------------------------------------------------------ peak


PeakKind = Literal["datasheet", "calibration", "unknown"]


def peak_kind(source: object) -> PeakKind | None:
    """Where an MFU peak came from: a ``datasheet:…`` figure, this CPU's GEMM
    ``calibration``, ``unknown`` for any other text, None without a peak."""
    text = _text(source)
    if not text:
        return None
    if text.startswith("datasheet"):
        return "datasheet"
    if "calibration" in text:
        return "calibration"
    return "unknown"


@dataclass(frozen=True, slots=True)
class Peak:
    """MFU's denominator: where it came from and, where checked, whether the stored peak is
    the one the run's machine and thread count are judged against (``consistent`` None: not
    checked)."""

    source: str | None
    kind: PeakKind | None
    consistent: bool | None = None
    note: str = ""

    @property
    def text(self) -> str:
        if self.kind is None:
            return "no MFU peak"
        where = {"datasheet": "a datasheet", "calibration": "a GEMM calibration of this CPU"}
        text = f"MFU peak from {where.get(self.kind, self.source or 'an unknown source')}"
        if self.consistent is False:
            text += f"; {PEAK_MARK}" + (f": {self.note}" if self.note else "")
        return text


# ------------------------------------------------------------------------------ the whole


@dataclass(frozen=True, slots=True)
class Trust:
    """How far to trust one stored result (a run, a repeat, or a pooled leaderboard row)."""

    energy: str  # energy_label: "measured (rapl)", "estimate", "simulated (model)", …
    energy_kind: EnergyKind
    contention: Contention
    idle: IdleBaseline
    peak: Peak
    interval: Interval

    @classmethod
    def of(cls, row: Mapping[str, Any], n_repeats: int | None = None) -> Trust:
        """The trust of a stored row; absent keys read as unknown. Keys read:
        ``energy_source``, ``energy_measured``, ``simulated``; ``contended``,
        ``others_busy_cores``, ``other_greenbench`` (a pooled row: ``n_runs`` and
        ``n_contended_runs``); ``idle_power_w``, ``idle_note`` (a pooled row:
        ``n_idle_unreliable``); ``peak_flops_source``, ``peak_consistent``, ``peak_note``;
        ``n_repeats`` (or the argument)."""

        def get(key: str) -> Any:
            return row.get(key) if hasattr(row, "get") else None

        source, measured = get("energy_source"), get("energy_measured")
        runs = int(_number(get("n_runs")) or 1)
        contended_runs = _number(get("n_contended_runs"))
        contended = _flag(get("contended"))
        if contended_runs:  # a pooled row: contended when any of its runs was
            contended = True
        busy = _number(get("others_busy_cores"))
        others = _number(get("other_greenbench"))
        n = n_repeats if n_repeats is not None else int(_number(get("n_repeats")) or 0)
        return cls(
            energy=energy_label(source, measured),
            energy_kind=energy_kind(source, measured, get("simulated")),
            contention=Contention(
                contended,
                busy,
                None if others is None else int(others),
                runs,
                None if contended_runs is None else int(contended_runs),
            ),
            idle=idle_baseline(
                get("idle_power_w"), get("idle_note"), int(_number(get("n_idle_unreliable")) or 0)
            ),
            peak=Peak(
                _text(get("peak_flops_source")) or None,
                peak_kind(get("peak_flops_source")),
                _flag(get("peak_consistent")),
                _text(get("peak_note")),
            ),
            interval=interval_for(n),
        )

    @property
    def contended(self) -> bool:
        return bool(self.contention.contended)

    def markers(self) -> tuple[str, ...]:
        """The short flags of what lowers trust, in a fixed order; empty when nothing does."""
        out = []
        if self.contended:
            out.append(CONTENDED)
        if self.idle.state == "unreliable":
            out.append(IDLE_MARK)
        if self.peak.consistent is False:
            out.append(PEAK_MARK)
        if self.interval.short:
            out.append(self.interval.short)
        return tuple(out)

    def mark(self) -> str:
        """The markers as one table cell ("" when nothing lowers trust)."""
        return " · ".join(self.markers())

    def details(self) -> list[str]:
        """Each signal that lowers trust, spelled out (contention, idle baseline, peak,
        interval), for a detail view."""
        out = []
        if self.contention.text:
            out.append(self.contention.text + " (figures may be skewed)")
        if self.idle.state == "unreliable":
            out.append(self.idle.text)
        if self.peak.consistent is False:
            out.append(self.peak.text)
        if self.interval.kind != "ci":
            out.append(self.interval.note)
        return out

    def signals(self) -> list[str]:
        """Every signal, good or bad, one phrase each: energy, contention, idle baseline, MFU
        peak, interval (a detail view's full account)."""
        watched = {None: "contention not recorded", False: "not contended"}
        return [
            f"energy {self.energy}",
            self.contention.text or watched[self.contention.contended],
            self.idle.text or "idle baseline reliable",
            self.peak.text,
            self.interval.note,
        ]

    def summary(self) -> str:
        """`signals` in one line."""
        return "; ".join(self.signals())
