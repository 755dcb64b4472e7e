"""`greenbench plan`: turn the command's options into a plan and print it (the CLI's one call).

Why a planner of our own: the layout searches that exist optimise time or memory only and come
bound to their training stacks (Alpa, Galvatron, Megatron-LM's and DeepSpeed's estimators,
torchtitan's hand-picked flavours), and the energy tools (Zeus, Perseus) tune the power of a
layout already chosen. No kept library predicts the joules per token of every layout, reads its
calibration back from measured runs, or reports its own error against them, which is this
project's question: which DP × TP × PP × CP layout spends the fewest joules per token?

Nothing here imports torch: the presets come from the models' cards (`greenbench.models`), the
devices from the GPU table, and the store (with pandas and DuckDB) is imported only when ``--db``
or ``--calibrate`` asks for stored runs.
"""

from __future__ import annotations

from pathlib import Path

from greenbench.errors import SpecError
from greenbench.models import model_preset
from greenbench.planner.cost import Batch
from greenbench.planner.device import DeviceModel, device_model
from greenbench.planner.host import HOST, host_device, host_facts
from greenbench.planner.search import MAX_DEVICES, MAX_GLOBAL_BATCH, MAX_SEQ_LEN, Plan, plan


def whole(option: str, text: str | int, least: int = 1, most: int | None = None) -> int:
    """An option's whole number, at least ``least`` and at most ``most``; SpecError (one line)
    otherwise, quoting at most 40 characters of the text."""
    given = str(text).strip()
    shown = given if len(given) <= 40 else f"{given[:40]}… ({len(given)} characters)"
    try:
        value = int(given)
    except ValueError:  # not a whole number, or more digits than Python converts
        value = None
    if value is None or value < least:
        raise SpecError(f"{option} must be a whole number >= {least}, got {shown!r}")
    if most is not None and value > most:
        raise SpecError(f"{option} must be at most {most:,}, got {shown}")
    return value


def watts(text: str | float | None) -> float | None:
    """The --power-limit-w value in watts (None: no limit)."""
    if text is None:
        return None
    try:
        value = float(str(text).strip())
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise SpecError(f"--power-limit-w must be a positive number of watts, got {text!r}")
    return value


def host_model(
    db: Path | None,
    ranks: int,
    precision: str,
    *,
    calibrate: bool = False,
    power_limit_w: float | None = None,
    host: str | None = None,
) -> DeviceModel:
    """One of ``ranks`` ranks of this host's CPU as the planner's device, from the runs stored
    in ``db`` (`greenbench.planner.host`), calibrated from them when asked."""
    from greenbench.planner.calibrate import calibrate as fit
    from greenbench.planner.calibrate import stored_runs

    if db is None:
        raise SpecError(f"--device-type {HOST} is this host's CPU as its stored runs show it: "
                        "pass --db PATH")  # fmt: skip
    if precision not in ("bf16", "fp32"):
        raise SpecError(f"--precision must be bf16 or fp32, got {precision!r}")
    facts = host_facts(stored_runs(db, HOST, host))
    calibration = fit(db, HOST, host) if calibrate else None
    return host_device(facts, ranks, calibration=calibration, power_limit_w=power_limit_w)


def plan_command(
    *,
    family: str,
    size: str,
    devices: str | int,
    device_type: str,
    seq_len: str | int = 4096,
    global_batch: str | int = 512,
    micro_batch: str | int = 1,
    precision: str = "bf16",
    power_limit_w: str | float | None = None,
    rank_by: str = "energy",
    top: str | int = 20,
    db: Path | None = None,
    calibrate: bool = False,
) -> Plan:
    """Plan every valid layout, print the ranked table and return the plan (SpecError for bad
    input). Numbers may come as the command line's text."""
    shape = model_preset(family, size)
    n_devices = whole("--devices", devices, most=MAX_DEVICES)
    batch = Batch(
        seq_len=whole("--seq-len", seq_len, most=MAX_SEQ_LEN),
        global_batch=whole("--global-batch", global_batch, most=MAX_GLOBAL_BATCH),
        micro_batch=whole("--micro-batch", micro_batch, most=MAX_GLOBAL_BATCH),
        precision=precision,
    )
    rows = whole("--top", top, least=0)
    limit = watts(power_limit_w)
    if device_type == HOST:
        device = host_model(db, n_devices, precision, calibrate=calibrate, power_limit_w=limit)
    else:
        device_model(device_type, precision, power_limit_w=limit)  # fails before any read
        calibration = None
        if calibrate:
            from greenbench.planner.calibrate import calibrate as fit

            if db is None:
                raise SpecError("--calibrate reads stored runs: pass --db PATH")
            calibration = fit(db, device_type)
        device = device_model(device_type, precision, power_limit_w=limit, calibration=calibration)
    result = plan(shape, n_devices, batch, device, rank_by=rank_by)
    found = None
    if db is not None:
        from greenbench.planner.measured import measured_layouts

        found = measured_layouts(db, shape, n_devices, device)
    from greenbench.planner.render import print_plan

    print_plan(result, top=rows, measured=found)
    return result
