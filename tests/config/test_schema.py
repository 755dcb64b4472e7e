"""The configuration machinery on a toy section: keys, conversion, checks, identity rules, the
typed view."""

from __future__ import annotations

import pytest

from greenbench.config import (
    ALWAYS,
    NEVER,
    POSITIVE,
    Config,
    Schema,
    section,
    setting,
    setting_of,
    when,
)
from greenbench.errors import SpecError


@section("toy", "A toy owner's settings.")
class Toy:
    width: int = setting(8, "how wide", bound=POSITIVE, identity=ALWAYS)
    mode: str = setting("a", "which mode", choices=("a", "b"), identity=ALWAYS)
    note: str = setting("", "a note", identity=NEVER)
    extra: float = setting(0.0, "added later")
    only_b: int = setting(1, "counts in mode b", identity=when(lambda s: s.get("toy.mode") == "b"))
    shared: int = setting(0, "reads as another section's", key="other.shared")

    def check(self, config: Config) -> None:
        if self.mode == "b" and self.width < 4:
            raise SpecError("toy.mode=b needs toy.width >= 4")


@section("", "The run's own.")
class Root:
    seed: int = setting(0, "seed", identity=ALWAYS)


SCHEMA = Schema((Root, Toy))


def test_keys_defaults_and_typed_view() -> None:
    assert list(SCHEMA.defaults()) == [
        "seed", "toy.width", "toy.mode", "toy.note", "toy.extra", "toy.only_b", "other.shared",
    ]  # fmt: skip
    config = SCHEMA.config(SCHEMA.defaults() | {"toy.width": 16, "user.depth": 3})
    assert config.toy.width == 16 and config[Toy].mode == "a" and config.run.seed == 0
    assert config.user == {"depth": 3}
    assert setting_of(Toy, "shared").key == "other.shared"
    assert SCHEMA.config({"seed": 1}).toy is None  # a workload without the section


def test_conversion_and_checks() -> None:
    assert SCHEMA.coerce("toy.width", "12") == 12
    assert SCHEMA.coerce("toy.width", [1, "2"]) == [1, 2]
    with pytest.raises(SpecError, match=r"did you mean 'toy\.width'"):
        SCHEMA.coerce("toy.widht", 1)
    with pytest.raises(SpecError, match="expects int"):
        SCHEMA.coerce("toy.width", "wide")
    with pytest.raises(SpecError, match="not one of a, b"):
        SCHEMA.check({"toy.mode": "c"})
    with pytest.raises(SpecError, match="must be > 0"):
        SCHEMA.check({"toy.width": 0})
    with pytest.raises(SpecError, match=r"needs toy\.width >= 4"):
        SCHEMA.check_sections(SCHEMA.defaults() | {"toy.mode": "b", "toy.width": 2})


def test_identity_follows_each_fields_rule() -> None:
    base = SCHEMA.defaults()
    kept = SCHEMA.identity(base, "w")
    assert kept == {"seed": 0, "toy.width": 8, "toy.mode": "a", "workload": "w"}
    assert SCHEMA.identity(base | {"toy.extra": 0.5}, "w")["toy.extra"] == 0.5
    assert "toy.only_b" in SCHEMA.identity(base | {"toy.mode": "b"}, "w")
    assert "toy.note" not in SCHEMA.identity(base | {"toy.note": "x"}, "w")
    assert SCHEMA.identity(base | {"user.depth": 3}, "w")["user.depth"] == 3


def test_a_setting_declared_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        Schema((Toy, Toy))
