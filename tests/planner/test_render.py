"""The plan's table: a predicted throughput below 100 tokens/s keeps three significant digits
instead of rounding to 0."""

from __future__ import annotations

from rich.console import Console

from greenbench.models import model_preset
from greenbench.planner.cost import Batch, Prediction
from greenbench.planner.device import device_model
from greenbench.planner.memory import Memory
from greenbench.planner.render import plan_table
from greenbench.planner.search import Plan
from greenbench.vocabulary import Layout


def test_slow_layouts_show_their_tokens_per_second() -> None:
    slow = Prediction(
        layout=Layout(tp=2), microbatches=1, step_s=81.3, compute_s=80.0, bubble_s=0.0,
        comm_s=1.3, tokens_per_s=0.0123, joules_per_token=5.0e4, memory=Memory(1.0, 0, 0, 0),
        fits=True,
    )  # fmt: skip
    plan = Plan(model_preset("transformer", "tiny"), 2, Batch(4096, 1, 1),
                device_model("h100", "bf16"), (slow,), frozenset({slow.layout}), 0)  # fmt: skip
    console = Console(width=300, record=True)
    console.print(plan_table(plan, top=20))
    row = next(line for line in console.export_text().splitlines() if "dpr1-dps1-tp2" in line)
    assert "0.0123" in row.split("│")[5]
