"""benchmarks/skippipe_quality.py's convergence chart: its tokens axis read 50000 100000 … 300000
with the labels running together; the ticks are now short (50k … 300k) and do not overlap."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "skippipe_quality.py"


def _plot():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("skippipe_quality_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.plot


def test_convergence_tick_labels_are_short_and_apart(tmp_path: Path) -> None:
    # the committed chart's run: 300 steps of 1,024 tokens, about 95 s (full) and 43 s (skip)
    # evaluations every 10 steps: (step, tokens, seconds, joules, held-out loss)
    runs = {
        name: {
            "evals": [
                (k, k * 1024, k * secs / 300, 0.0, 7.0 - 4.8 * k / 300) for k in range(0, 301, 10)
            ]
        }
        for name, secs in (("full", 95.0), ("skip 0.5", 43.0))
    }
    fig = _plot()(runs, 1.7, [3.8, 2.2], tmp_path / "convergence.png")
    assert (tmp_path / "convergence.png").is_file()
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    for ax in fig.axes:
        low, high = sorted(ax.get_xlim())
        labels = [
            label
            for tick, label in zip(ax.get_xticks(), ax.get_xticklabels(), strict=True)
            if low <= tick <= high and label.get_text()
        ]
        boxes = [label.get_window_extent(renderer) for label in labels]
        for a, b in itertools.pairwise(boxes):
            assert a.x1 < b.x0, [label.get_text() for label in labels]
    tokens = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert "300k" in tokens and not any(len(t) > 5 for t in tokens)
