"""The strategy cards: torch-free, each naming an implementation that loads and agrees with it."""

from __future__ import annotations

import subprocess
import sys

from greenbench.strategies import STRATEGIES


def test_validating_settings_imports_no_torch_for_strategies() -> None:
    code = (
        "import sys\n"
        "from greenbench.settings import SCHEMA\n"
        "from greenbench.strategies import STRATEGIES\n"
        "from greenbench.vocabulary import Layout\n"
        "config = SCHEMA.config({'data.global_batch': 8})\n"
        "STRATEGIES['ddp'].validate(config, Layout(dp_replicate=2))\n"
        "assert STRATEGIES['odc'].balance == 'balanced-cost'\n"
        "assert not [m for m in sys.modules if m == 'torch' or m.startswith('torch.')]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_each_card_loads_its_strategy() -> None:
    from greenbench.strategies.base import Strategy

    for name, card in STRATEGIES.items():
        cls = card.load()
        assert issubclass(cls, Strategy) and cls.name == name


def test_the_hybrid_check_knows_the_families_with_a_context_parallel_form() -> None:
    from greenbench.errors import SpecError
    from greenbench.models import FAMILIES
    from greenbench.settings import SCHEMA
    from greenbench.strategies.hybrid.checks import check_hybrid
    from greenbench.vocabulary import Layout

    settings = {"data.global_batch": 8, "data.micro_batch": 1, "data.seq_len": 64,
                "model.size": "tiny"}  # fmt: skip
    for name, card in FAMILIES.items():
        has_form = card.parts.context_parallel is not None
        try:
            config = SCHEMA.config({**settings, "model.family": name})
            check_hybrid(config, Layout(dp_shard=2, cp=2))
            refused = False
        except SpecError:
            refused = True
        assert refused != has_form, name
