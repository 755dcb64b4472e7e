"""Every packaged configuration keeps the ``config_key`` it had before the settings were
restructured (tests/config_keys.py lists them; tests/fixtures/config_keys.json holds the keys)."""

from __future__ import annotations

import json

from tests.config_keys import FIXTURE, current_keys


def test_every_packaged_configuration_keeps_its_key() -> None:
    expected = json.loads(FIXTURE.read_text())
    current = current_keys()
    assert current.keys() == expected.keys()
    for group, keys in expected.items():
        assert current[group] == keys, group
