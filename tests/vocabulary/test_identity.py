"""The identity (config_key) of greenbench's own configurations does not move when settings are
added: user workloads' ``user.*`` settings and entry points extend the settings table only for
the workloads that declare them. The digests below were computed before user workloads existed
(each is the hash of the sorted config keys of every configuration a built-in workload expands
to with its defaults); a change here would split every stored run from its successors."""

from __future__ import annotations

import hashlib

import pytest

from greenbench.settings import identity_of, spec_key
from greenbench.spec import expand
from greenbench.vocabulary import config_key

BUILT_IN_KEYS = {
    "transformer-vs-mamba": (8, "1c91f14919359fbe"),
    "data-parallel": (4, "39b4574a6ceff78d"),
    "fsdp-vs-odc": (16, "71d3d77d54cb780c"),
    "hybrid": (14, "0744af7da690dc2f"),
    "skippipe": (4, "cd1725741a726c0d"),
}


#: sweeps as they were when the digests were taken (a value added to a sweep since adds
#: configurations, and must leave the keys of the ones before it as they were)
PINNED_SWEEPS = {
    "transformer-vs-mamba": {"model.family": ["transformer", "mamba"]},
    "skippipe": {"skippipe.schedule": ["full", "skippipe"]},
}


@pytest.mark.parametrize("workload", sorted(BUILT_IN_KEYS))
def test_built_in_config_keys_are_unchanged(workload: str):
    layers = [PINNED_SWEEPS.get(workload, {})]
    keys = sorted(spec_key(spec) for spec in expand(workload, layers))
    digest = hashlib.sha256(" ".join(keys).encode()).hexdigest()[:16]
    assert (len(keys), digest) == BUILT_IN_KEYS[workload]


def test_user_settings_are_part_of_the_identity():
    base = {"strategy": "single", "seed": 0}
    a = identity_of(base | {"user.width": 64}, "mypkg.bench:workload")
    b = identity_of(base | {"user.width": 128}, "mypkg.bench:workload")
    assert a["workload"] == "mypkg.bench:workload"
    assert config_key(a) != config_key(b)
    other = identity_of(base | {"user.width": 64}, "other.bench:workload")
    assert config_key(a) != config_key(other)
