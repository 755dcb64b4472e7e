"""Each extension point takes a new thing in its own files plus one registration
(docs/contributing.md): a toy strategy with a settings section of its own, a toy model family, a
toy energy source, a toy workload and a toy report section are added to a copy of the
repository exactly as the guide says, each registered by one import line and one entry line in
its registry module, and then run end to end (`greenbench run --workload toy`, `greenbench
report`) from the copy. The copy is compared with the repository afterwards: the toys' own files
are the only ones added and the five registry modules the only ones changed, by at most those
two lines each. A change that makes a new strategy, family, source, workload or section need an
edit anywhere else fails here.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parents[1]
#: what the copy holds: the engine, the standard workloads and the packaging files
COPIED = ("greenbench", "workloads", "setup.py", "pyproject.toml")

pytestmark = pytest.mark.slow

# -- the toys, each in its own files ------------------------------------------------------------

TOY_STRATEGY = {
    "greenbench/strategies/toy/__init__.py": '''
"""The toy strategy: one rank, its loss scaled by a setting of its own section."""
''',
    "greenbench/strategies/toy/settings.py": '''
"""The ``toy`` section: the toy strategy's own settings."""

from __future__ import annotations

from typing import Any

from greenbench.config import POSITIVE, section, setting, when


def _toy(s: Any) -> bool:
    return s.get("strategy") == "toy"


@section("toy", "The toy strategy (strategy=toy): its loss scale.")
class ToySettings:
    loss_scale: float = setting(
        1.0, "what the toy strategy multiplies the loss by", bound=POSITIVE, identity=when(_toy)
    )
''',
    "greenbench/strategies/toy/card.py": '''
"""The toy strategy's card (torch-free)."""

from __future__ import annotations

from greenbench.strategies.card import StrategyCard
from greenbench.strategies.toy.settings import ToySettings

CARD = StrategyCard(
    name="toy",
    doc="One rank, its loss scaled by toy.loss_scale.",
    implementation="greenbench.strategies.toy.strategy:Toy",
    settings=ToySettings,
)
''',
    "greenbench/strategies/toy/strategy.py": '''
"""The toy strategy's torch side: the whole minibatch on one rank, its loss scaled."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from greenbench.strategies.base import DataParallel
from greenbench.strategies.schedule import StepSchedule
from greenbench.strategies.toy.settings import ToySettings

if TYPE_CHECKING:
    from greenbench.config import Config
    from greenbench.sources.contract import Loss, ModelSource


class ScaledSchedule(StepSchedule):
    """The shared step, each microbatch's loss scaled by ``scale``."""

    scale = 1.0

    def loss_scale(self, global_tokens: int) -> float:
        return self.scale / global_tokens


class Toy(DataParallel):
    """One rank, the toy section's loss scale."""

    name = "toy"
    loss_scale = 1.0

    def configure(self, config: Config) -> None:
        self.loss_scale = config[ToySettings].loss_scale

    def parallelize(self, model: ModelSource) -> torch.nn.Module:
        return model.build(self.ctx.device)

    def schedule(self, loss: Loss) -> StepSchedule:
        schedule = ScaledSchedule(self.ctx, self.comm, loss)
        schedule.scale = self.loss_scale
        return schedule
''',
}

TOY_FAMILY = {
    "greenbench/models/toy/__init__.py": '''
"""The toy family: an embedding, a few linear blocks and an LM head."""
''',
    "greenbench/models/toy/card.py": '''
"""The toy family's card: its one preset, its analytic description and FLOPs (torch-free)."""

from __future__ import annotations

from greenbench.models.card import ModelCard, ModelInfo, PlannerTerms

#: size -> (d_model, n_layers, vocab_size)
PRESETS = {"tiny": (16, 2, 64)}


def info(size: str, *, vocab_size: int | None = None) -> ModelInfo:
    d, layers, vocab = PRESETS[size]
    vocab = vocab_size or vocab
    embedding, block = vocab * d, d * d + d
    non_embedding = layers * block + vocab * d
    return ModelInfo(
        family="toy",
        size=size,
        n_params=embedding + non_embedding,
        n_params_embedding=embedding,
        n_params_non_embedding=non_embedding,
        n_layers=layers,
        d_model=d,
        vocab_size=vocab,
    )


CARD = ModelCard(
    name="toy",
    presets=PRESETS,
    describe=info,
    flops=lambda info, seq_len: 6.0 * info.n_params_non_embedding,
    tp_divides=lambda info: {},
    planner=PlannerTerms(
        norms_per_block=0,
        activations=lambda info, cp: (0.0, 2.0 * info.d_model),
        tp_all_reduces=lambda info: (),
    ),
    parts_module="greenbench.models.toy.parts",
)
''',
    "greenbench/models/toy/parts.py": '''
"""The toy family's torch side: the model and its blocks."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from greenbench.models.card import FamilyParts, TensorParallel
from greenbench.models.toy.card import PRESETS


class ToyLM(torch.nn.Module):
    def __init__(self, d: int, layers: int, vocab: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(layers))
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids: torch.Tensor) -> SimpleNamespace:
        h = self.embed(input_ids)
        for layer in self.layers:
            h = h + torch.tanh(layer(h))
        return SimpleNamespace(logits=self.head(h))


def build(size: str, *, vocab_size: int | None = None, kernel: str = "none") -> ToyLM:
    d, layers, vocab = PRESETS[size]
    return ToyLM(d, layers, vocab_size or vocab)


PARTS = FamilyParts(
    build=build,
    blocks=lambda model: list(model.layers),
    tensor_parallel=TensorParallel(reason="the toy has no tensor-parallel split"),
)
''',
}

TOY_SOURCE = {
    "greenbench/energy/toy.py": '''
"""The toy energy source: a constant 10 W, an estimate (never a measurement)."""

from __future__ import annotations

import time
from typing import ClassVar

from greenbench.energy.base import EnergyWindow, Meter, Probe
from greenbench.energy.source import EnergySource, MeterRequest, node_meter

WATTS = 10.0


class ToyMeter(Meter):
    source: ClassVar[str] = "toy"
    measured: ClassVar[bool] = False

    def __init__(self) -> None:
        self._t0 = 0.0

    @classmethod
    def probe(cls) -> Probe:
        return Probe(cls.source, True, f"always available: a constant {WATTS:g} W, an estimate")

    def begin(self) -> None:
        self._t0 = time.perf_counter()

    def end(self) -> EnergyWindow:
        seconds = time.perf_counter() - self._t0
        return EnergyWindow(
            source=self.source,
            measured=False,
            seconds=seconds,
            energy_j=WATTS * seconds,
            energy_cpu_j=WATTS * seconds,
            note=f"estimate, not measured: a constant {WATTS:g} W",
        )


def _make(request: MeterRequest) -> Meter:
    return node_meter(ToyMeter, ToyMeter, request.local_rank)


SOURCE = EnergySource("toy", ToyMeter, "a constant 10 W: an estimate, not a measurement", _make)
''',
}

TOY_WORKLOAD = {
    "workloads/toy.py": '''
"""The ``toy`` workload: the toy family under the toy strategy, metered by the toy source."""

from greenbench.workload import Workload

WORKLOAD = Workload(
    name="toy",
    question="Does a toy train?",
    base={
        "strategy": "toy",
        "device": "cpu",
        "model": {"family": "toy", "size": "tiny"},
        "data": {"lengths": "fixed", "seq_len": 16, "global_batch": 2, "micro_batch": 1},
        "energy": {"source": "toy"},
    },
)
''',
}

TOY_SECTION = {
    "greenbench/reporting/sections/toy.py": '''
"""The report's toy section: how many toy runs the report holds."""

from __future__ import annotations

from greenbench.reporting.section import ReportContext


class ToySection:
    """`ReportSection`: a line about the toy runs."""

    name = "toy"
    order = 95
    doc = "how many runs of the toy workload there are"

    def applies(self, context: ReportContext) -> bool:
        return bool((context.raw["workload"] == "toy").any())

    def render(self, context: ReportContext) -> list[str]:
        runs = context.raw[context.raw["workload"] == "toy"]["run_id"].nunique()
        return ["", "## Toy runs", "", f"The toy workload ran {runs} time(s)."]
''',
}

TOYS: dict[str, str] = {
    **TOY_STRATEGY,
    **TOY_FAMILY,
    **TOY_SOURCE,
    **TOY_WORKLOAD,
    **TOY_SECTION,
}


@dataclass(frozen=True)
class Registration:
    """One import line and one entry line added to a registry module (``registry``: the name
    assigned the registry's collection of entries there)."""

    module: str
    registry: str
    import_line: str
    entry: str


REGISTRATIONS = (
    Registration(
        "greenbench/strategies/cards.py",
        "CARDS",
        "from greenbench.strategies.toy.card import CARD as TOY",
        "TOY",
    ),
    Registration(
        "greenbench/models/__init__.py",
        "FAMILIES",
        "from greenbench.models.toy.card import CARD as TOY",
        '"toy": TOY',
    ),
    Registration(
        "greenbench/energy/sources.py",
        "ENERGY_SOURCES",
        "from greenbench.energy.toy import SOURCE as TOY",
        "TOY",
    ),
    Registration(
        "workloads/__init__.py", "WORKLOADS", "from greenbench.workloads import toy", "toy"
    ),
    Registration(
        "greenbench/reporting/sections/__init__.py",
        "REPORT_SECTIONS",
        "from greenbench.reporting.sections.toy import ToySection",
        "ToySection()",
    ),
)


def register(path: Path, registration: Registration) -> None:
    """Add ``registration``'s import after the module's imports, and its entry after the last
    entry of the registry's collection (the largest tuple or dict literal assigned to it)."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    (assigned,) = (
        n
        for n in tree.body
        if isinstance(n, (ast.Assign, ast.AnnAssign))
        and registration.registry
        in [t.id for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Name)]
    )  # fmt: skip
    collections = [n for n in ast.walk(assigned.value) if isinstance(n, (ast.Tuple, ast.Dict))]
    entries = max(collections, key=lambda n: len(n.values if isinstance(n, ast.Dict) else n.elts))
    last = entries.values[-1] if isinstance(entries, ast.Dict) else entries.elts[-1]
    start = entries.keys[-1] if isinstance(entries, ast.Dict) else last
    assert lines[last.end_lineno - 1].rstrip().endswith(","), "entries end with a comma"
    indent = " " * start.col_offset
    at_entry, at_import = last.end_lineno, max(n.end_lineno for n in imports)
    assert at_import < at_entry
    lines.insert(at_entry, f"{indent}{registration.entry},\n")
    lines.insert(at_import, f"{registration.import_line}\n")
    path.write_text("".join(lines))


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository with the toys added and registered."""
    tree = tmp_path_factory.mktemp("toys") / "repo"
    skip = shutil.ignore_patterns("__pycache__")
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=skip)
        else:
            tree.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, tree / name)
    for path, source in TOYS.items():
        target = tree / path
        assert not target.exists(), f"{path} is already there"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source.lstrip("\n"))
    for registration in REGISTRATIONS:
        register(tree / registration.module, registration)
    return tree


def greenbench(tree: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m greenbench ARGS`` importing the copy (the checkout's own workloads folder
    is found beside its greenbench/, `greenbench.checkout`)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.pop("GREENBENCH_DB", None)
    done = subprocess.run(
        [sys.executable, "-m", "greenbench", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_the_toys_run_end_to_end_from_their_registrations(tree: Path, tmp_path: Path) -> None:
    db = tmp_path / "toy.duckdb"
    greenbench(
        tree, tmp_path, "run", "--workload", "toy", "--db", str(db),
        "--set", "repeats=1", "--set", "train.warmup_steps=1", "--set", "train.steps=1",
        "--set", "train.min_window_s=0", "--set", "energy.idle_s=0",
        "--set", "toy.loss_scale=0.5",
    )  # fmt: skip
    with duckdb.connect(str(db), read_only=True) as con:
        runs = con.execute(
            "SELECT status, workload, strategy, model_family, energy_source, energy_measured "
            "FROM runs"
        ).fetchall()
        config = json.loads(con.execute("SELECT config FROM runs").fetchone()[0])
        windows = con.execute("SELECT energy_source, energy_j > 0 FROM results").fetchall()
    assert runs == [("ok", "toy", "toy", "toy", "toy", False)]
    assert windows == [("toy", True)]
    assert config["settings"]["toy.loss_scale"] == 0.5  # the strategy's own section
    out = tmp_path / "report"
    greenbench(tree, tmp_path, "report", "--db", str(db), "--out", str(out))
    report = (out / "README.md").read_text()
    assert "## Toy runs" in report and "The toy workload ran 1 time(s)." in report


def files(root: Path) -> dict[str, str]:
    """Every file of the copied parts of ``root`` by its relative path, and its text."""
    out = {}
    for name in COPIED:
        top = root / name
        paths = [top] if top.is_file() else top.rglob("*")
        for path in paths:
            if path.is_file() and "__pycache__" not in path.parts:
                out[path.relative_to(root).as_posix()] = path.read_bytes().decode(errors="replace")
    return out


def test_each_toy_needs_its_own_files_and_one_import_and_one_entry(tree: Path) -> None:
    before, after = files(ROOT), files(tree)
    assert set(after) - set(before) == set(TOYS), "only the toys' own files are added"
    assert not set(before) - set(after), "nothing is removed"
    changed = {path for path in before if before[path] != after[path]}
    assert changed == {r.module for r in REGISTRATIONS}, "only the registry modules change"
    for path in sorted(changed):
        diff = list(difflib.ndiff(before[path].splitlines(), after[path].splitlines()))
        added = [line[2:] for line in diff if line.startswith("+ ")]
        removed = [line[2:] for line in diff if line.startswith("- ")]
        assert not removed and len(added) <= 2, (path, added, removed)


@pytest.mark.skipif(shutil.which("lint-imports") is None, reason="import-linter is not installed")
def test_the_toys_keep_the_layers(tree: Path) -> None:
    """The toys' cards, source and settings keep the import contracts (torch-free cards, meters
    that know no models): the registries reach them, so the contracts check them unchanged."""
    done = subprocess.run(
        [shutil.which("lint-imports") or "lint-imports", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env=dict(os.environ, PYTHONPATH=str(tree)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
