"""A balancing cost model fitted on this machine: ``a·s² + b·s`` seconds per document.

The registered cost models (`greenbench.data.packing.COST_MODELS`) are the ODC repository's fits
for GPUs training 1.5B and 7B models, or plain token counts; neither says what a microbatch costs
the model a run trains on the hardware it runs on. ``data.cost_model = measured`` does: the
launcher times forward and backward of one row holding one document of ``T`` trained tokens, for
several ``T`` up to ``data.seq_len`` (`greenbench.sources.cost_timing`), and fits

    seconds(T) = a·s² + b·s,   s = T / 32,000

by non-negative least squares (`fit_cost`). Unlike the registered models, which price the
full-size length a document stands for, this one prices the tokens actually trained (the
balancer evaluates it on them: `CostModel.trained`), in seconds of this machine.

A fit is stored per machine and model (`FitKey`: CPU model, logical cores, torch version, the
model family and size, precision, threads per rank) in ``cache_dir()/cost-fits.json`` and reused
by every later run of that key (`load_fit`); ``greenbench doctor`` lists the stored fits.

A limitation to keep in mind: the fit is per document, and the balancer sums documents; rows
that pack several documents are attended with a dense document mask on the CPU (SDPA), which
costs the row's square, not the sum of its documents' squares.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy.optimize import nnls

from greenbench.data.packing import COST_TOKENS_UNIT
from greenbench.hardware.machine import cache_dir, cpu_model, logical_cores, read_json, write_json

CACHE_NAME = "cost-fits.json"


@dataclass(frozen=True, slots=True)
class FitKey:
    """What a fit holds for: this machine (CPU model, cores, torch) and the model trained."""

    cpu_model: str
    logical_cores: int
    torch: str
    family: str
    size: str
    precision: str
    threads: int

    @classmethod
    def here(cls, family: str, size: str, precision: str, threads: int, torch: str) -> FitKey:
        """The key of ``family``/``size`` at ``precision`` on ``threads`` threads of this
        machine, under torch version ``torch``."""
        return cls(cpu_model(), logical_cores(), torch, family, size, precision, threads)

    @property
    def text(self) -> str:
        return "|".join(str(v) for v in asdict(self).values())


@dataclass(frozen=True, slots=True)
class CostFit:
    """``seconds = a·s² + b·s`` (s = trained tokens / 32,000) and the points behind it."""

    key: FitKey
    a: float
    b: float
    tokens: tuple[int, ...] = ()
    seconds: tuple[float, ...] = ()
    taken: str = field(default_factory=lambda: _now())

    def __call__(self, tokens: float | np.ndarray) -> float | np.ndarray:
        s = np.asarray(tokens, dtype=np.float64) / COST_TOKENS_UNIT
        out = self.a * s * s + self.b * s
        return float(out) if out.ndim == 0 else out

    @property
    def worst_error(self) -> float:
        """The largest relative error of the fit at its own points (0 without points)."""
        if not self.tokens:
            return 0.0
        got = np.asarray(self(np.asarray(self.tokens)))
        want = np.asarray(self.seconds)
        return float(np.max(np.abs(got - want) / want))

    @property
    def quadratic_share(self) -> float:
        """The quadratic term's share of the cost at the longest measured length."""
        if not self.tokens:
            return 0.0
        s = max(self.tokens) / COST_TOKENS_UNIT
        total = self.a * s * s + self.b * s
        return float(self.a * s * s / total) if total > 0 else 0.0


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def fit_cost(tokens: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """``(a, b)`` ≥ 0 minimising the relative squared error of ``a·s² + b·s`` against
    ``seconds`` (s = tokens / 32,000): each point weighs by 1 / its time, so short microbatches
    count as much as long ones."""
    t = np.asarray(tokens, dtype=np.float64)
    y = np.asarray(seconds, dtype=np.float64)
    if len(t) < 2 or len(set(t.tolist())) < 2:
        raise ValueError("a fit of a and b needs times at two lengths at least")
    if np.any(y <= 0) or np.any(t <= 0):
        raise ValueError("tokens and seconds must be positive")
    s = t / COST_TOKENS_UNIT
    design = np.stack([s * s, s], axis=1) / y[:, None]
    (a, b), _ = nnls(design, np.ones_like(y))
    return float(a), float(b)


def _read() -> dict[str, dict]:
    return read_json(cache_dir() / CACHE_NAME)


def load_fit(key: FitKey) -> CostFit | None:
    """The stored fit of ``key``, or None."""
    entry = _read().get(key.text)
    if not entry:
        return None
    try:
        return CostFit(
            key=key,
            a=float(entry["a"]),
            b=float(entry["b"]),
            tokens=tuple(int(t) for t in entry.get("tokens", ())),
            seconds=tuple(float(s) for s in entry.get("seconds", ())),
            taken=str(entry.get("taken", "")),
        )
    except (KeyError, TypeError, ValueError):
        return None


def store_fit(fit: CostFit) -> None:
    """Keep ``fit`` for its key (replacing an older one)."""
    data = _read()
    entry = asdict(fit)
    entry["key"] = asdict(fit.key)
    data[fit.key.text] = entry
    write_json(cache_dir() / CACHE_NAME, data)


def stored_fits() -> list[CostFit]:
    """Every stored fit, oldest first."""
    out = []
    for entry in _read().values():
        try:
            key = FitKey(**entry["key"])
        except (KeyError, TypeError):
            continue
        fit = load_fit(key)
        if fit is not None:
            out.append(fit)
    return sorted(out, key=lambda f: f.taken)
