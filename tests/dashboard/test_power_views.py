"""The dashboard's power-limit view (greenbench.dashboard_app.power_views) under AppTest: a
sweep written by the real store draws time against energy coloured by limit, with the front and
the knee; an emulated sweep is labelled a model; a database without one says how to make one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from greenbench.aggregate import aggregate_repeat
from greenbench.dashboard_app import data
from greenbench.energy.base import EnergyWindow
from greenbench.results import RankResult, RunOutcome
from greenbench.settings import identity_of
from greenbench.store import Store
from greenbench.vocabulary import EMULATED_SOURCE, config_key

APP = Path(__file__).resolve().parents[2] / "greenbench" / "dashboard_app" / "app.py"
#: limit (W) -> (tokens/s, mean power W): the emulated H100's model
SWEEP = {
    700.0: (1000.0, 630.0),
    595.0: (981.0, 595.0),
    490.0: (920.0, 490.0),
    385.0: (849.0, 385.0),
}


#: the same limits drawn on a busy machine: each lower limit faster, which no GPU is
INVERTED = {700.0: (81.0, 630.0), 595.0: (118.0, 595.0), 490.0: (159.0, 490.0),
            385.0: (236.0, 385.0)}  # fmt: skip


def write_sweep(
    db: Path, source: str = EMULATED_SOURCE, sweep: dict[float, tuple[float, float]] = SWEEP
) -> None:
    with Store(db) as store:
        for i, (limit, (tps, power)) in enumerate(sweep.items()):
            settings = {"model.family": "transformer", "model.size": "tiny", "seed": 0,
                        "emulate.gpu": "h100", "gpu.power_limit_w": limit}  # fmt: skip
            run_id = f"{i:012x}"
            store.begin_run({
                "run_id": run_id, "workload": "power-limit",
                "config_name": f"transformer/tiny seq=64 fixed single×1 limit={limit:g}W",
                "config_key": config_key(identity_of(settings, "power-limit")),
                "config": {"workload": "power-limit", "settings": settings},
                "model_family": "transformer", "model_size": "tiny", "strategy": "single",
                "layout": "dp1", "device": "cpu", "device_type": "emulated:H100 SXM", "nproc": 1,
                "nnodes": 1, "precision": "fp32", "seq_len": 64, "lengths": "fixed",
                "power_limit_w": limit, "power_limit_default_w": 700.0,
                "power_limit_via": "emulated",
            })  # fmt: skip
            ranks = [
                RankResult(
                    rank=0, local_rank=0, host="h", repeat=k, tokens=int(tps * 2), seconds=2.0,
                    compute_s=2.0, comm_s=0.0, wait_s=0.0, step_times_s=(1.0, 1.0),
                    peak_mem_bytes=1, flops=1.0, loss=2.0, n_microbatches=1,
                    energy=EnergyWindow(source, False, 2.0, power * 2, energy_gpu_j=power * 2),
                )
                for k in range(2)
            ]  # fmt: skip
            repeats = [
                aggregate_repeat([r], idle_power_w=None, peak_flops=None, n_devices=1,
                                 carbon_g_per_kwh=None)
                for r in ranks
            ]  # fmt: skip
            store.finish_run(run_id, RunOutcome(status="ok", repeats=repeats, ranks=ranks))


def run_view(db: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    data.clear_cache()
    monkeypatch.setenv("GREENBENCH_DB", str(db))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["view"] = "Power limits"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_sweep_is_drawn_with_its_front_and_knee(tmp_path, monkeypatch):
    db = tmp_path / "g.duckdb"
    write_sweep(db)
    at = run_view(db, monkeypatch)
    table = at.dataframe[-1].value
    assert list(table["limit (W)"]) == [700, 595, 490, 385]
    assert table["on front"].all()
    spec = json.dumps(at.get("vega_lite_chart")[0].proto.spec)
    assert "limit_w" in spec and "seconds_per_mtok" in spec
    assert any("Knee: 490 W" in m.value for m in at.markdown)
    assert "a model, not a measurement" in "\n".join(w.value for w in at.warning)
    assert any("Zeus's GlobalPowerLimitOptimizer" in c.value for c in at.caption)
    assert at.selectbox(key="power_sweep").value.endswith("emulated (GPU power model)")


def test_an_inconsistent_sweep_says_so_and_names_no_knee_or_choice(tmp_path, monkeypatch):
    db = tmp_path / "g.duckdb"
    write_sweep(db, source="nvml", sweep=INVERTED)
    at = run_view(db, monkeypatch)
    errors = "\n".join(e.value for e in at.error)
    assert "Inconsistent sweep" in errors and "at 385 W" in errors and "than at 700 W" in errors
    assert not any("Knee" in m.value for m in at.markdown)
    assert not any("would choose" in c.value for c in at.caption)
    assert not at.dataframe[-1].value["on front"].any()


def test_a_database_without_a_sweep_says_how_to_make_one(seeded_db, monkeypatch):
    at = run_view(seeded_db, monkeypatch)
    assert "greenbench run --workload power-limit" in "\n".join(i.value for i in at.info)


def test_the_table_is_rounded_and_in_percent(tmp_path, monkeypatch):
    db = tmp_path / "g.duckdb"
    write_sweep(db)
    at = run_view(db, monkeypatch)
    table = at.dataframe[-1].value
    assert "time vs highest %" in table.columns and "time vs highest" not in table.columns
    # 1000 → 849 tokens/s: 17.8 % more time; 0.315 → 0.2267 J/token: 28.0 % saved
    assert table["time vs highest %"].tolist() == [0.0, 1.9, 8.7, 17.8]
    assert table["J/token saved vs highest %"].tolist() == [0.0, 3.7, 15.5, 28.0]
    assert table["tokens/s"].tolist() == [round(v, 1) for v in table["tokens/s"]]
    formats = at.dataframe[-1].proto.columns
    assert "%+.1f %%" in formats  # shown as percentages, one decimal
