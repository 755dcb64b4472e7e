"""RaplMeter against fake powercap trees in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenbench.energy.rapl import RaplMeter, find_domains, wrapped_delta_uj
from greenbench.errors import MeterUnavailable

MAX_UJ = 262_143_328_850


def domain(d: Path, name: str, energy_uj: int, max_uj: int = MAX_UJ) -> Path:
    d.mkdir(parents=True)
    (d / "name").write_text(name + "\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return d


def set_uj(d: Path, energy_uj: int) -> None:
    (d / "energy_uj").write_text(f"{energy_uj}\n")


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """Two sockets with core/uncore/dram subdomains, a psys domain and the control-type dir."""
    root = tmp_path / "powercap"
    (root / "intel-rapl").mkdir(parents=True)  # control type, not a domain
    p0 = domain(root / "intel-rapl:0", "package-0", 1_000_000)
    core0 = domain(p0 / "intel-rapl:0:0", "core", 0)
    domain(p0 / "intel-rapl:0:1", "uncore", 0)
    dram0 = domain(p0 / "intel-rapl:0:2", "dram", 0)
    p1 = domain(root / "intel-rapl:1", "package-1", 10)
    dram1 = domain(p1 / "intel-rapl:1:0", "dram", 100)
    psys = domain(root / "intel-rapl:2", "psys", 0)
    return {"root": root, "p0": p0, "core0": core0, "dram0": dram0, "p1": p1, "dram1": dram1,
            "psys": psys}  # fmt: skip


def test_reads_packages_and_dram_only(tree: dict[str, Path]) -> None:
    meter = RaplMeter(tree["root"])
    assert sorted(d.name for d in meter.domains) == ["dram", "dram", "package-0", "package-1"]
    meter.begin()
    set_uj(tree["p0"], 3_500_000)  # +2.5 J
    set_uj(tree["p1"], 1_000_010)  # +1.0 J
    set_uj(tree["dram0"], 500_000)  # +0.5 J
    set_uj(tree["dram1"], 250_100)  # +0.25 J
    set_uj(tree["core0"], 9_000_000_000)  # inside package-0: must not be added
    set_uj(tree["psys"], 9_000_000_000)  # contains the packages: must not be added
    w = meter.end()
    assert w.source == "rapl" and w.measured is True
    assert w.energy_cpu_j == pytest.approx(3.5)
    assert w.energy_dram_j == pytest.approx(0.75)
    assert w.energy_j == pytest.approx(4.25)
    assert w.energy_gpu_j is None
    assert w.seconds >= 0


def test_wraparound_uses_max_energy_range(tmp_path: Path) -> None:
    p0 = domain(tmp_path / "intel-rapl:0", "package-0", 999_000_000, max_uj=1_000_000_000)
    meter = RaplMeter(tmp_path)
    meter.begin()
    set_uj(p0, 1_000_000)  # wrapped: 1 000 000 to the top, 1 000 000 after
    w = meter.end()
    assert w.energy_cpu_j == pytest.approx(2.0)
    assert w.energy_dram_j is None and "no readable DRAM" in w.note


def test_checkpoint_survives_two_wraps(tmp_path: Path) -> None:
    p0 = domain(tmp_path / "intel-rapl:0", "package-0", 900_000_000, max_uj=1_000_000_000)
    meter = RaplMeter(tmp_path, poll_s=3600)
    meter.begin()
    set_uj(p0, 400_000_000)  # +500 000 000 (one wrap)
    meter.checkpoint()
    set_uj(p0, 300_000_000)  # +900 000 000 (a second wrap)
    w = meter.end()
    assert w.energy_cpu_j == pytest.approx(1400.0)


def test_wrapped_delta() -> None:
    assert wrapped_delta_uj(10, 25, 100) == 15
    assert wrapped_delta_uj(90, 5, 100) == 15
    assert wrapped_delta_uj(7, 7, 100) == 0


def test_amd_rapl_naming(tmp_path: Path) -> None:
    p0 = domain(tmp_path / "amd-rapl:0", "package-0", 0)
    meter = RaplMeter(tmp_path)
    meter.begin()
    set_uj(p0, 7_000_000)
    assert meter.end().energy_j == pytest.approx(7.0)


def test_read_error_mid_window_gives_none(tree: dict[str, Path]) -> None:
    meter = RaplMeter(tree["root"])
    meter.begin()
    (tree["p1"] / "energy_uj").unlink()
    w = meter.end()
    assert w.energy_j is None
    assert w.note.startswith("read error:")


def test_probe_no_tree(tmp_path: Path) -> None:
    p = RaplMeter.probe_at(tmp_path / "missing")
    assert not p.available
    assert "no powercap tree" in p.reason
    with pytest.raises(MeterUnavailable, match="no powercap tree"):
        RaplMeter(tmp_path / "missing")


def test_probe_tree_without_domains(tmp_path: Path) -> None:
    (tmp_path / "intel-rapl").mkdir()
    p = RaplMeter.probe_at(tmp_path)
    assert not p.available and "no intel-rapl/amd-rapl package domain" in p.reason


def _deny(monkeypatch: pytest.MonkeyPatch, denied: Path) -> None:
    """Make one file raise PermissionError (chmod alone does not stop root, who runs CI here)."""
    real = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if self == denied:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)


def test_probe_exists_but_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p0 = domain(tmp_path / "intel-rapl:0", "package-0", 0)
    _deny(monkeypatch, p0 / "energy_uj")
    p = RaplMeter.probe_at(tmp_path)
    assert not p.available
    assert "exists but" in p.reason
    assert "needs root or zeusd" in p.reason
    assert "no powercap tree" not in p.reason


def test_unreadable_dram_is_skipped_and_named(
    tree: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _deny(monkeypatch, tree["dram1"] / "energy_uj")
    domains, problems = find_domains(tree["root"])
    assert [d.name for d in domains].count("dram") == 1
    assert len(problems) == 1 and "permission denied" in problems[0]
    p = RaplMeter.probe_at(tree["root"])
    assert p.available and "skipped" in p.reason
    meter = RaplMeter(tree["root"])
    meter.begin()
    set_uj(tree["dram0"], 2_000_000)
    w = meter.end()
    assert w.energy_dram_j == pytest.approx(2.0)
    assert "skipped" in w.note


def test_idle_power_from_counters(tmp_path: Path) -> None:
    domain(tmp_path / "intel-rapl:0", "package-0", 5)
    meter = RaplMeter(tmp_path)
    assert meter.idle_power_w(0.01) == 0.0  # counters that do not move: 0 W, not None
