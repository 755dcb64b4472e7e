"""Fuzzing the spec parser: whatever a user types, the answer is a spec or one SpecError."""

from __future__ import annotations

import tomllib
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenbench.errors import SpecError
from greenbench.settings.written import parse_assignment
from greenbench.spec import DEFAULTS, expand_suite
from greenbench.suite import load_suite, parse_suite

keys = st.sampled_from([*DEFAULTS, "model", "bogus", "data.seq", ""])
scalars = st.one_of(
    st.integers(-5, 5000),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.booleans(),
    st.lists(st.integers(-2, 300), max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_parse_assignment_never_crashes(text):
    try:
        parse_assignment(text)
    except SpecError:
        pass


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    defaults=st.dictionaries(keys, scalars, max_size=4),
    entries=st.lists(
        st.fixed_dictionaries(
            {"workload": st.sampled_from(["transformer-vs-mamba", "data-parallel", "nope", 3])},
            optional={"set": st.dictionaries(keys, scalars, max_size=3), "extra": scalars},
        ),
        max_size=3,
    ),
)
def test_suite_tables_give_specs_or_one_spec_error(defaults, entries):
    data = {"defaults": defaults, "entries": entries}
    try:
        suite = parse_suite(data, name="fuzz", where="fuzz.toml")
        specs = expand_suite(suite, {}, label=None)
    except SpecError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert all(spec["data.seq_len"] > 0 for spec in specs)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_toml_text(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "s.toml"
    path.write_text(text)
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        pass
    try:
        load_suite(str(path))
    except SpecError:
        pass
