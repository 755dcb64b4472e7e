"""Schema version 3: a run's layout as one integer column per degree, the kernels
it used, whether its ranks ran under CPU quotas, and a table of communication records.

Runs stored before this version get what their rows already say: their layout from the strategy
and the number of ranks (``ddp``/``single``: replicas, ``fsdp``: shards), their Mamba scan from
``versions.mamba_cpu_scan`` (where the launcher recorded it), no CPU quota (none existed); their
stored settings gain the same values and their ``config_key`` is recomputed with the identity
rules (frozen below, as the settings declared them when they became typed sections), so an old
run and a new run of the same configuration stay comparable.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

from greenbench.vocabulary import DEGREES, Layout, config_key

DDL = """
ALTER TABLE runs ADD COLUMN dp_replicate INTEGER;
ALTER TABLE runs ADD COLUMN dp_shard INTEGER;
ALTER TABLE runs ADD COLUMN tp INTEGER;
ALTER TABLE runs ADD COLUMN pp INTEGER;
ALTER TABLE runs ADD COLUMN cp INTEGER;
ALTER TABLE runs ADD COLUMN kernels JSON;          -- e.g. {"attention": "sdpa"}, {"scan": "native"}
ALTER TABLE runs ADD COLUMN rank_cpu_quota BOOLEAN; -- ranks ran under a fixed CPU quota each
CREATE TABLE IF NOT EXISTS comm_records (
    run_id   VARCHAR NOT NULL,
    repeat   INTEGER NOT NULL,
    rank     INTEGER NOT NULL,
    dim      VARCHAR NOT NULL,  -- mesh dimension or group: dp_shard, dp_replicate, tp, pp, world
    op       VARCHAR NOT NULL,  -- all_gather, reduce_scatter, all_reduce, send, recv, barrier
    calls    INTEGER NOT NULL,
    bytes    BIGINT NOT NULL,   -- bytes the calls moved on this rank
    seconds  DOUBLE NOT NULL,   -- time this rank was blocked in them
    wait_s   DOUBLE NOT NULL,   -- of which waiting for other ranks (the rest is transfer)
    PRIMARY KEY (run_id, repeat, rank, dim, op)
);
"""


def old_run_settings(settings: dict[str, Any], versions: dict[str, Any]) -> dict[str, Any]:
    """The settings an earlier run had, in this version's terms."""
    s = dict(settings)
    world = int(s.get("nproc", 1)) * int(s.get("nnodes", 1))
    layout = Layout(dp_shard=world) if s.get("strategy") == "fsdp" else Layout(dp_replicate=world)
    s.update({f"layout.{d}": v for d, v in layout.degrees().items()})
    if s.get("model.family") == "mamba":
        s["model.scan"] = versions.get("mamba_cpu_scan") or "torch"
    else:
        s["model.scan"] = "none"
    s["emulate.rank_cpu_quota"] = "off"
    return s


def kernels_of(settings: dict[str, Any]) -> dict[str, str]:
    if settings.get("model.family") == "mamba":
        return {"scan": settings["model.scan"]}
    return {"attention": "sdpa"}


def apply(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(DDL)
    rows = con.execute("SELECT run_id, workload, config, versions FROM runs").fetchall()
    for run_id, workload, config, versions in rows:
        spec = json.loads(config) if isinstance(config, str) else dict(config or {})
        old = json.loads(versions) if isinstance(versions, str) else dict(versions or {})
        settings = old_run_settings(dict(spec.get("settings", {})), old)
        spec["settings"] = settings
        layout = Layout(**{d: settings[f"layout.{d}"] for d in DEGREES})
        con.execute(
            "UPDATE runs SET config = ?, config_key = ?, layout = ?, dp_replicate = ?, "
            "dp_shard = ?, tp = ?, pp = ?, cp = ?, kernels = ?, rank_cpu_quota = false "
            "WHERE run_id = ?",
            [
                json.dumps(spec, sort_keys=True),
                config_key(_identity(settings, workload)),
                layout.text,
                *layout.degrees().values(),
                json.dumps(kernels_of(settings), sort_keys=True),
                run_id,
            ],
        )


# The identity rules, frozen: a migration rewrites stored keys as they were meant at its time,
# whatever the settings' own declarations say later.
_NEVER = {"repeats", "label", "suite", "timeout_s", "energy.idle_s", "layout", "energy.node"}
_NEVER |= {"energy.redfish_url", "energy.node_poll_s"}
_SKIPPIPE_KEYS = (
    "skippipe.mode", "skippipe.stages", "skippipe.skip", "skippipe.schedule",
    "skippipe.fail_node", "skippipe.fail_step", "emulate.link_latency_ms",
    "emulate.link_bandwidth_gbps", "emulate.slow_nodes", "emulate.slowdown",
)  # fmt: skip


def _counts(key: str, s: dict[str, Any]) -> bool:
    if key in _NEVER or key.startswith("debug."):
        return False
    skippipe = s.get("strategy") == "skippipe"
    watts = (s.get("gpu.power_limit_w") or 0) > 0
    rules = {
        "train.pp_schedule": s.get("layout.pp", 1) not in (1, "auto"),
        "train.compile": s.get("train.compile") == "on",
        "model.liger": s.get("model.liger") == "on",
        "gpu.power_limit_w": watts,
        "gpu.power_limit_frac": (s.get("gpu.power_limit_frac") or 0) > 0 and not watts,
        "emulate.gpu": bool(s.get("emulate.gpu")),
        "skippipe.network": skippipe and s.get("skippipe.mode") == "simulate",
        **dict.fromkeys(_SKIPPIPE_KEYS, skippipe),
    }
    return rules.get(key, True)


def _identity(settings: dict[str, Any], workload: str) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if _counts(k, settings)} | {"workload": workload}
