"""A configuration's seed group (`greenbench.settings.seed_group_of`): the same for runs that
differ only in their seed, different otherwise; ``config_key`` is untouched by it; every run's
record carries it."""

from __future__ import annotations

from dataclasses import replace

from greenbench.launcher.runners.record import spec_record
from greenbench.settings import SEED_KEY, seed_group_of, spec_identity, spec_key, spec_seed_group
from greenbench.spec import expand
from greenbench.vocabulary import config_key


def specs(**sets: object) -> list:
    """The workload's one configuration of a tiny Transformer at 256 tokens, with ``sets``."""
    one = {"model.family": "transformer", "data.seq_len": 256}
    return expand("transformer-vs-mamba", [one | sets])


def test_runs_that_differ_only_in_their_seed_share_a_seed_group() -> None:
    (zero,) = specs(seed=0)
    (one,) = specs(seed=1)
    assert spec_key(zero) != spec_key(one)  # two configurations, as before
    assert spec_seed_group(zero) == spec_seed_group(one)
    assert spec_seed_group(zero) != spec_key(zero)


def test_any_other_difference_is_another_seed_group() -> None:
    (base,) = specs(seed=0)
    for other in (
        specs(seed=0, **{"data.seq_len": 128})[0],
        specs(seed=1, **{"train.lr": 2e-3})[0],
        specs(**{"model.family": "mamba"})[0],
    ):
        assert spec_seed_group(other) != spec_seed_group(base)


def test_config_key_is_the_identity_s_hash_seed_included() -> None:
    """The seed group leaves config_key as it was: the hash of the whole identity, the seed
    in it (tests/test_config_keys.py pins every packaged configuration's key)."""
    (spec,) = specs(seed=7)
    identity = spec_identity(spec)
    assert identity[SEED_KEY] == 7
    assert spec_key(spec) == config_key(identity)
    assert seed_group_of(identity) == config_key(
        {k: v for k, v in identity.items() if k != SEED_KEY}
    )
    assert seed_group_of({"workload": "w", SEED_KEY: 1}) == seed_group_of({"workload": "w"})


def test_every_run_record_carries_its_seed_group() -> None:
    (spec,) = specs(seed=3)
    record = spec_record(spec, "abcdefabcdef")
    assert record.seed_group == spec_seed_group(spec)
    assert record.config_key == spec_key(spec)
    assert record.row()["seed_group"] == record.seed_group
    reseeded = spec_record(replace(spec, settings=spec.settings | {SEED_KEY: 4}), "b" * 12)
    assert reseeded.seed_group == record.seed_group and reseeded.config_key != record.config_key
