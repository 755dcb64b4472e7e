"""Every packaged configuration's ``config_key``: each shipped suite on each device a machine
may give ``auto``, each standard workload alone, the example user workload's suite, and each
configuration again as the launcher resolves it on a CPU machine of 2 cores. The test
(tests/test_config_keys.py) holds them against tests/fixtures/config_keys.json, written once
by ``python tests/config_keys.py`` before the settings were restructured: a key that changes
splits a configuration's history in every database that holds it."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from greenbench.settings import spec_key
from greenbench.settings.runspec import RunSpec

FIXTURE = Path(__file__).parent / "fixtures" / "config_keys.json"
EXAMPLE_SUITE = Path(__file__).parents[1] / "examples" / "tinylm" / "energy.toml"


#: settings whose identity counts only where they apply, each set where it does
VARIANTS = (
    ("transformer-vs-mamba", {"train.compile": "on", "device": "cpu", "seed": 7}),
    ("transformer-vs-mamba", {"model.scan": "torch", "model.family": "mamba", "repeats": 1}),
    ("power-limit", {"gpu.power_limit_frac": 0.0, "gpu.power_limit_w": 300.0,
                     "emulate.gpu": "h100"}),
    ("skippipe", {"skippipe.mode": "simulate", "skippipe.network": "gcp12",
                  "skippipe.stages": "5-3-3-3-3-3"}),
    ("skippipe", {"skippipe.fail_node": 1, "skippipe.fail_step": 2, "emulate.slow_nodes": "2",
                  "emulate.slowdown": 2.0, "emulate.link_latency_ms": 5.0}),
    ("hybrid", {"train.pp_schedule": "gpipe", "debug.slowdown_s": 0.1, "timeout_s": 60.0}),
    ("hybrid", {"layout": "dps2-pp2", "train.pp_schedule": "interleaved-1f1b"}),
    ("hybrid", {"layout": "dpr2-dps2", "train.activation_checkpointing": "full"}),
    ("data-parallel", {"data.lengths": "swe-smith", "data.cost_model": "7b",
                       "energy.region": "FRA", "energy.idle_s": 0.0}),
)  # fmt: skip


def _resolved_on_cpu(spec: RunSpec) -> RunSpec | None:
    """``spec`` as the launcher resolves it on a CPU machine of 2 cores."""
    from greenbench.launcher import resolve

    if spec["device"] == "cuda":
        return None
    spec = replace(spec, settings=dict(spec.settings) | {"device": "cpu"})
    return resolve.resolve_spec(spec, cores=2)


def current_keys() -> dict[str, list[str]]:
    """Each configuration's name → its keys, spec-level and resolved, in expansion order."""
    from greenbench.spec import expand, expand_suite
    from greenbench.suite import load_suite, packaged_suites
    from greenbench.workloads import WORKLOADS

    groups = []
    for name in sorted(packaged_suites()):
        for device in ("cpu", "cuda"):
            groups.append((f"suite {name} on {device}", load_suite(name), device))
    groups.append((f"suite {EXAMPLE_SUITE.name}", load_suite(str(EXAMPLE_SUITE)), "cpu"))
    out: dict[str, list[str]] = {}
    for title, suite, device in groups:
        specs = expand_suite(suite, {}, label=None, machine_device=device)
        out[title] = _keys(specs)
    for name in sorted(WORKLOADS):
        out[f"workload {name}"] = _keys(expand(name, []))
    for name, layer in VARIANTS:
        title = " ".join(f"{k}={v}" for k, v in layer.items())
        out[f"workload {name} with {title}"] = _keys(expand(name, [layer]))
    return out


def _keys(specs: list[RunSpec]) -> list[str]:

    keys = []
    for spec in specs:
        resolved = _resolved_on_cpu(spec)
        keys.append(f"{spec.name} | {spec_key(spec)}")
        if resolved is not None:
            keys.append(f"  resolved {resolved.name} | {spec_key(resolved)}")
    return keys


if __name__ == "__main__":
    sys.path.insert(0, str(EXAMPLE_SUITE.parent))
    FIXTURE.write_text(json.dumps(current_keys(), indent=1) + "\n")
    print(f"wrote {FIXTURE}")
