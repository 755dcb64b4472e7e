"""The shipped suites travel inside the package: a built wheel holds them as package data, and
loading one by name reads it through importlib.resources, not from a source checkout."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from greenbench import spec

ROOT = Path(__file__).resolve().parents[1]


def test_suites_load_from_the_package_not_from_a_checkout(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # any directory
    assert set(spec.available_suites()) >= {"smoke", "posttrain", "odc"}
    assert spec.load_suite("smoke").name == "smoke"
    assert not (ROOT / "workloads").exists()  # nothing beside the package to fall back on


@pytest.mark.slow
def test_the_wheel_ships_every_suite(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), "-q"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("greenbench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"greenbench/suites/{p.name}" for p in (ROOT / "greenbench/suites").glob("*.toml")}
    assert shipped and shipped <= names
