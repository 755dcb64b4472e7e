"""`greenbench plan` end to end through click: the ranked table, and one line with exit 2 for
every kind of bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from greenbench.cli import main

SEVEN_B = ["plan", "--model-family", "transformer", "--size", "7b", "--devices", "64",
           "--device-type", "h100"]  # fmt: skip


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_the_done_example_prints_a_ranked_predicted_table() -> None:
    result = run(*SEVEN_B)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "transformer/7b on 64 × H100 SXM" in out and "not measured" in out
    assert "predicted J/token" in out and "predicted step s" in out
    assert "208 valid layouts" in out and "★" in out
    assert "dpr1-dps1-tp64-pp1-cp1" not in out  # 32 heads
    assert "what the predictions stand on" in out and "datasheet (H100 SXM)" in out
    assert "measured here" not in out  # no --db: nothing measured to show


def test_top_zero_shows_every_layout() -> None:
    result = run(*SEVEN_B, "--top", "0")
    assert result.exit_code == 0
    assert "208 shown" in result.stdout


def test_options_reach_the_model() -> None:
    result = run(*SEVEN_B, "--seq-len", "2048", "--global-batch", "256", "--micro-batch", "2",
                 "--precision", "fp32", "--power-limit-w", "450", "--rank-by", "time")  # fmt: skip
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "seq 2048, global batch 256 (524,288 tokens per step), micro-batch 2, fp32, " in out
    assert "power limit 450 W; ranked by predicted step time" in out
    assert "dense fp32" in out


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (["--size", "70b"], "unknown size '70b'"),
        (["--model-family", "gpt"], "unknown model family 'gpt'"),
        (["--device-type", "tpu"], "unknown device type 'tpu'"),
        (["--devices", "0"], "'--devices': must be a whole number >= 1"),
        (["--devices", "-8"], "'--devices': must be a whole number >= 1"),
        (["--devices", "many"], "'--devices': must be a whole number >= 1"),
        (["--seq-len", "0"], "'--seq-len': must be"),
        (["--top", "-1"], "'--top': must be"),
        (["--precision", "fp8"], "'--precision': 'fp8' is not one of 'bf16', 'fp32'"),
        (["--power-limit-w", "100"], "outside this device's range 200–700 W"),
        (["--power-limit-w", "lots"], "'--power-limit-w': must be"),
        (["--rank-by", "cost"], "'--rank-by': 'cost' is not one of"),
        (["--size", "tiny", "--devices", "5", "--global-batch", "4"], "no layout of 5 device"),
        (["--devices", "99999999999999999999999"], "'--devices': must be at most 1,073,741,824"),
        (["--devices", "1073741825"], "'--devices': must be at most 1,073,741,824"),
        (["--devices", "1e6"], "'--devices': must be a whole number >= 1"),
        (["--devices", "9" * 5000], "'--devices': must be a whole number >= 1"),
        (["--seq-len", "1e12"], "'--seq-len': must be a whole number >= 1"),
        (["--seq-len", "1000000000000"], "'--seq-len': must be at most 1,073,741,824"),
        (["--seq-len", "1048576"], "no layout of 64 device(s) fits transformer/7b"),
        (["--global-batch", "99999999999999999999999"], "'--global-batch': must be at most"),
        (["--micro-batch", "1024"], "--micro-batch 1024 is more than --global-batch 512"),
        (["--micro-batch", "3"], "--global-batch 512 is not a multiple of --micro-batch 3"),
        (["--power-limit-w", "0"], "'--power-limit-w': must be"),
        (["--power-limit-w", "-300"], "'--power-limit-w': must be"),
        (["--power-limit-w", "nan"], "'--power-limit-w': must be"),
        (["--power-limit-w", "1e9"], "outside this device's range 200–700 W"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(change: list[str], named: str) -> None:
    args = list(SEVEN_B)
    for option, value in zip(change[::2], change[1::2], strict=True):
        if option in args:
            args[args.index(option) + 1] = value
        else:
            args += [option, value]
    result = run(*args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], lines
    assert result.stdout == ""


@pytest.mark.timeout(120)  # the exhaustive search took minutes on 1000000007, never ended on more
@pytest.mark.parametrize(
    ("devices", "code", "says"),
    [
        ("1048576", 0, "valid layouts"),
        # 2^6·3^3·5^2·7·11·13·17: the odd factors fit no degree at a global batch of 512
        ("735134400", 2, "error: no layout of 735134400 device(s) can train transformer/7b"),
        ("1000000007", 2, "error: no layout of 1000000007 device(s) can train transformer/7b"),
        ("99999999999999999999999", 2, "'--devices': must be at most 1,073,741,824"),
    ],
)
def test_large_device_counts_answer(devices: str, code: int, says: str) -> None:
    args = list(SEVEN_B)
    args[args.index("--devices") + 1] = devices
    result = run(*args)
    assert result.exit_code == code, result.output
    assert says in (result.stdout if code == 0 else result.stderr)
    if code:
        assert result.stdout == "" and result.stderr.count("\n") == 1


def test_calibrate_on_an_empty_database_is_one_line(tmp_path: Path) -> None:
    result = run(*SEVEN_B, "--calibrate", "--db", str(tmp_path / "none.duckdb"))
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0 and "no results database" in result.stderr


def test_calibrate_with_too_little_is_one_line(seeded_db: Path) -> None:
    # the seeded database holds CPU runs only: nothing to fit an H100 from
    result = run(*SEVEN_B, "--calibrate", "--db", str(seeded_db))
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert "\n" not in line and "too little to calibrate: 0 ok H100 SXM GPU run(s)" in line


def test_calibrated_plan_names_fitted_figures_and_shows_measured_layouts(gpu_db: Path) -> None:
    result = run("plan", "--model-family", "transformer", "--size", "1b", "--devices", "2",
                 "--device-type", "h100", "--seq-len", "2048", "--global-batch", "16",
                 "--micro-batch", "8", "--calibrate", "--db", str(gpu_db))  # fmt: skip
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "fitted from 3 stored runs on this host" in out  # fast link, sustained FLOP/s
    assert "fitted from 2 stored runs on this host" in out  # busy and idle power
    assert "measured on this host" in out and "aaaa00000001" in out
    assert "aaaa00000004" not in out  # the A100 run


def test_plan_imports_no_torch() -> None:
    code = (
        "import sys; from click.testing import CliRunner; from greenbench.cli import main; "
        f"r = CliRunner().invoke(main, {SEVEN_B!r}); assert r.exit_code == 0, r.output; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
