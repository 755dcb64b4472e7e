"""The balancing cost model fitted on this machine: the fit recovers its coefficients, is stored
per machine and model, is reused, and prices the tokens actually trained."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from greenbench.data import DataPlan, MarkovSource
from greenbench.data.cost_fit import (
    CACHE_NAME,
    CostFit,
    FitKey,
    fit_cost,
    load_fit,
    store_fit,
    stored_fits,
)
from greenbench.data.packing import COST_TOKENS_UNIT, MEASURED, get_cost_model
from greenbench.errors import SpecError


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GREENBENCH_CACHE_DIR", str(tmp_path))
    return tmp_path


def key(**over: object) -> FitKey:
    fields = dict(
        cpu_model="cpu", logical_cores=2, torch="2.x", family="transformer", size="tiny",
        precision="fp32", threads=1,
    )  # fmt: skip
    return FitKey(**(fields | over))  # type: ignore[arg-type]


@pytest.mark.parametrize(("a", "b"), [(1200.0, 30.0), (0.0, 5.0), (40.0, 0.0)])
def test_the_fit_recovers_a_and_b_from_synthetic_timings(a: float, b: float) -> None:
    tokens = np.array([64, 128, 256, 384, 512, 768, 1024])
    s = tokens / COST_TOKENS_UNIT
    rng = np.random.default_rng(0)
    seconds = (a * s * s + b * s) * (1 + 0.01 * rng.standard_normal(len(tokens)))
    got_a, got_b = fit_cost(tokens, seconds)
    # each within 5 % of the whole cost at the longest length, in its own term's units
    top = s.max()
    assert got_a == pytest.approx(a, abs=0.05 * (a + b / top))
    assert got_b == pytest.approx(b, abs=0.05 * (b + a * top))
    assert got_a >= 0 and got_b >= 0


def test_the_fit_needs_two_lengths() -> None:
    with pytest.raises(ValueError):
        fit_cost([512, 512], [0.1, 0.1])


def test_a_stored_fit_is_read_back_by_its_key_only(cache: Path) -> None:
    fit = CostFit(key(), 1000.0, 20.0, tokens=(64, 1024), seconds=(0.05, 1.6))
    store_fit(fit)
    assert (cache / CACHE_NAME).exists()
    assert load_fit(key()) == fit
    assert load_fit(key(threads=2)) is None
    assert load_fit(key(size="small")) is None
    store_fit(CostFit(key(threads=2), 1.0, 2.0))
    assert [f.key.threads for f in stored_fits()] == [1, 2]


def test_calibrated_fit_measures_once_and_reuses_the_stored_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from greenbench.sources import cost_timing

    calls = []

    def fake_times(family: str, size: str, lengths: list[int], **kw: object) -> list[float]:
        calls.append(list(lengths))
        s = np.asarray(lengths) / COST_TOKENS_UNIT
        return list(800.0 * s * s + 25.0 * s)

    monkeypatch.setattr(cost_timing, "time_microbatches", fake_times)
    first = cost_timing.calibrated_fit("transformer", "tiny", 512)
    assert len(calls) == 1 and max(calls[0]) == 512
    assert first.a == pytest.approx(800.0, rel=1e-6)
    assert first.b == pytest.approx(25.0, rel=1e-6)
    again = cost_timing.calibrated_fit("transformer", "tiny", 256)
    assert again == first and len(calls) == 1  # stored, and measured up to 512 ≥ 256
    longer = cost_timing.calibrated_fit("transformer", "tiny", 1024)
    assert len(calls) == 2 and max(longer.tokens) == 1024  # never extrapolated
    cost_timing.calibrated_fit("transformer", "tiny", 1024, refit=True)
    assert len(calls) == 3


def test_the_measured_model_prices_trained_tokens_and_needs_its_fit() -> None:
    with pytest.raises(SpecError, match="measured"):
        get_cost_model(MEASURED)
    model = get_cost_model(MEASURED, (1000.0, 10.0))
    assert model.trained and not get_cost_model("linear").trained

    def plan(cost_model: str, fit: tuple[float, float] | None) -> DataPlan:
        return DataPlan(
            source=MarkovSource(vocab_size=64, seed=0), lengths="swe-smith", seq_len=512,
            global_batch=8, micro_batch=1, balance="balanced-cost", cost_model=cost_model,
            scale=1 / 128, seed=0, cost_fit=fit,
        )  # fmt: skip

    measured = plan(MEASURED, (1000.0, 10.0)).split(0, 2)
    for part in measured:
        for mb, cost in zip(part.microbatches, part.microbatch_costs, strict=True):
            docs = np.asarray([n for row in mb.doc_lengths for n in row])
            assert cost == pytest.approx(float(model(docs).sum()))


def test_the_launcher_fills_in_the_stored_fit_of_this_machine_and_model() -> None:
    import torch

    from greenbench.launcher.execute import threads_per_rank
    from greenbench.launcher.resolve import resolve_spec
    from greenbench.spec import expand

    over = {"strategy": "odc", "nproc": 2, "data.lengths": "swe-smith"}
    spec = expand("fsdp-vs-odc", [over | {"data.cost_model": MEASURED}])[0]
    here = FitKey.here("transformer", "tiny", "fp32", threads_per_rank(2), torch.__version__)
    store_fit(CostFit(here, 123.0, 4.5, tokens=(64, 1024), seconds=(0.01, 0.2)))
    data = resolve_spec(spec, cores=2).config.data
    assert (data.cost_a, data.cost_b) == (123.0, 4.5)
    linear = resolve_spec(expand("fsdp-vs-odc", [over])[0], cores=2).config.data
    assert (linear.cost_a, linear.cost_b) == (0.0, 0.0)  # nothing measured for other models
