"""Spec loading, expansion and validation: every bad input is one clear SpecError."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from greenbench.errors import SpecError
from greenbench.settings import spec_identity
from greenbench.settings.written import coerce_all, parse_assignment
from greenbench.spec import DEFAULTS, expand, expand_suite
from greenbench.suite import available_suites, load_suite, packaged_suites


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.toml"
    path.write_text(text)
    return path


def test_shipped_suites_load_and_expand():
    assert {"smoke", "posttrain", "odc"} <= set(available_suites())
    for name in ("smoke", "posttrain", "odc"):
        specs = expand_suite(load_suite(name), {}, label=None)
        assert specs and all(s.suite == name for s in specs)


def test_a_suite_names_the_file_it_was_read_from(tmp_path, monkeypatch):
    assert load_suite("smoke").source == str(packaged_suites()["smoke"])
    write(tmp_path, '[[entries]]\nworkload = "transformer-vs-mamba"\n')
    monkeypatch.chdir(tmp_path)
    assert load_suite("suite.toml").source == str(tmp_path / "suite.toml")  # made absolute


def test_workload_sweep_expands_product():
    specs = expand("transformer-vs-mamba", [])
    combos = {(s["model.family"], s["data.seq_len"]) for s in specs}
    assert combos == {
        (f, n) for f in ("transformer", "mamba", "mamba2") for n in (256, 512, 1024, 2048)
    }


def test_override_collapses_a_sweep_and_comma_sweeps():
    specs = expand("transformer-vs-mamba", [{"model.family": "mamba"}])
    assert {s["model.family"] for s in specs} == {"mamba"}
    key, value = parse_assignment("data.seq_len=128,256")
    specs = expand("transformer-vs-mamba", [{key: value}])
    assert sorted({s["data.seq_len"] for s in specs}) == [128, 256]


def test_precedence_cli_over_suite(tmp_path):
    path = write(
        tmp_path,
        """
[defaults]
repeats = 4
[[entries]]
workload = "transformer-vs-mamba"
set = { "data.seq_len" = 128, repeats = 2 }
""",
    )
    suite = load_suite(str(path))
    assert {s["repeats"] for s in expand_suite(suite, {}, label=None)} == {2}
    assert {s["repeats"] for s in expand_suite(suite, {"repeats": 7}, label="x")} == {7}


def test_identity_ignores_repeats_and_debug():
    a = expand("transformer-vs-mamba", [{"data.seq_len": 128, "model.family": "mamba"}])[0]
    b = expand(
        "transformer-vs-mamba",
        [{"data.seq_len": 128, "model.family": "mamba", "repeats": 9, "debug.slowdown_s": 0.5}],
    )[0]
    assert spec_identity(a) == spec_identity(b)
    c = expand("transformer-vs-mamba", [{"data.seq_len": 256, "model.family": "mamba"}])[0]
    assert spec_identity(a) != spec_identity(c)


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("model.sise=tiny", "did you mean 'model.size'"),
        ("data.seq_len=abc", "expects int"),
        ("data.seq_len=1.5", "expects int"),
        ("noequals", "key=value"),
    ],
)
def test_bad_assignments(assignment, message):
    with pytest.raises(SpecError, match=message):
        parse_assignment(assignment)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"model.family": "rwkv"}, "model.family='rwkv' is not one of"),
        ({"model.size": "13b"}, "not a transformer preset"),
        ({"data.lengths": "zipf"}, "data.lengths='zipf'"),
        ({"data.seq_len": 0}, "data.seq_len must be > 0"),
        ({"train.lr": -1.0}, "train.lr must be >= 0"),
        ({"device": "tpu"}, "device='tpu'"),
        ({"strategy": "single", "nproc": 2}, "runs one rank"),
        ({"strategy": "ddp", "nproc": 3, "data.global_batch": 8}, "divisible"),
        # one rank of a data-parallel strategy once started and failed without a process group
        ({"strategy": "ddp", "nproc": 1}, "strategy=ddp needs 2 ranks or more"),
        ({"strategy": "fsdp", "nproc": 1}, "strategy=fsdp needs 2 ranks or more"),
        ({"strategy": "odc", "nproc": 1}, "strategy=odc needs 2 ranks or more"),
        ({"train.steps": 10, "train.max_steps": 5}, "max_steps"),
    ],
)
def test_impossible_values(overrides, message):
    with pytest.raises(SpecError, match=message):
        expand("transformer-vs-mamba", [{"model.family": "transformer", **overrides}])


def test_unknown_workload_and_suite():
    with pytest.raises(SpecError, match="unknown workload 'nope'"):
        expand("nope", [])
    with pytest.raises(SpecError, match="unknown suite 'nope'"):
        load_suite("nope")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[entries]\nworkload = 1", "malformed TOML"),
        ("description = 'x'", "at least one"),
        ("[[entries]]\nset = {}", "no 'workload'"),
        ("[[entries]]\nworkload = 'transformer-vs-mamba'\nrepeats = 2", "put settings under"),
        (
            "[defaults]\nbogus = 1\n[[entries]]\nworkload = 'transformer-vs-mamba'",
            "unknown setting 'bogus'",
        ),
        (
            "[defaults]\nrepeats = 'three'\n[[entries]]\nworkload = 'transformer-vs-mamba'",
            "expects int",
        ),
        ("colour = 'green'\n[[entries]]\nworkload = 'transformer-vs-mamba'", "top-level"),
    ],
)
def test_malformed_suite_files(tmp_path, text, message):
    with pytest.raises(SpecError, match=message):
        load_suite(str(write(tmp_path, text)))


def test_every_default_has_a_type_that_coerces():
    for key, value in DEFAULTS.items():
        assert parse_assignment(f"{key}={value}")[1] == value


def test_nproc_and_the_layout_resolve_from_each_other():
    (fsdp,) = expand("data-parallel", [{"strategy": "fsdp", "data.lengths": "fixed"}])
    assert fsdp["nproc"] == 2 and fsdp.layout.text == "dpr1-dps2-tp1-pp1-cp1"
    (ddp,) = expand(
        "transformer-vs-mamba",
        [{"model.family": "transformer", "data.seq_len": 256, "strategy": "ddp", "nproc": 4}],
    )
    assert ddp.layout.dp_replicate == 4
    # nproc derived from the layout when it is not given
    (derived,) = expand(
        "transformer-vs-mamba",
        [{"model.family": "transformer", "data.seq_len": 256, "strategy": "fsdp",
          "layout.dp_shard": 4}],
    )  # fmt: skip
    assert derived["nproc"] == 4
    assert (
        expand("transformer-vs-mamba", [{"model.family": "mamba", "data.seq_len": 256}])[
            0
        ].layout.world
        == 1
    )


def test_layout_settings_are_part_of_the_identity():
    (two,) = expand("data-parallel", [{"strategy": "fsdp", "data.lengths": "fixed"}])
    assert spec_identity(two)["layout.dp_shard"] == 2 and "model.scan" in spec_identity(two)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"model.family": "mamba", "strategy": "ddp", "nproc": 2, "layout.tp": 3},
         r"does not divide the 512 inner channels \(d_inner\) of mamba/tiny"),
        ({"layout.pp": 9, "nproc": 9}, "more than the 4 layers of transformer/tiny"),
        ({"layout.cp": 3, "data.seq_len": 256}, "layout.cp=3 does not divide data.seq_len=256"),
        ({"strategy": "fsdp", "nproc": 2, "layout.dp_replicate": 2},
         r"'fsdp' does not apply layout.dp_replicate=2 .*use strategy 'ddp'"),
        ({"layout.tp": 0}, "layout.tp must be >= 1 or 'auto'"),
        ({"nproc": "lots"}, "expects an int or 'auto'"),
    ],
)  # fmt: skip
def test_impossible_layouts(overrides, message):
    with pytest.raises(SpecError, match=message):
        expand(
            "transformer-vs-mamba",
            [{"model.family": "transformer", "data.seq_len": 256}, coerce_all(overrides, "t")],
        )


@pytest.mark.parametrize(
    ("degree", "named"),
    [
        ({"layout.pp": 99}, r"layout\.pp=99 is more than the 4 layers of transformer/tiny"),
        ({"layout.tp": 3}, r"layout\.tp=3 does not divide the 8 attention heads"),
        ({"layout.cp": 7}, r"layout\.cp=7 does not divide data\.seq_len=512"),
        ({"layout.pp": 0}, r"layout\.pp must be >= 1 or 'auto', got 0"),
        # possible on its own: then the clash with the swept layout is the problem
        ({"layout.pp": 2}, r"layout=dpr4 gives layout\.pp=1 but layout\.pp=2 is set too"),
    ],
)
def test_a_degree_set_beside_a_swept_layout_is_refused_for_its_own_problem_first(degree, named):
    """The hybrid workload sweeps ``layout``; a degree set beside it that no layout could take
    is named as such, not as a clash with the sweep's first layout."""
    with pytest.raises(SpecError, match=named):
        expand("hybrid", [{"model.family": "transformer", **degree}])


def test_balance_auto_is_each_strategys_own():
    specs = expand("fsdp-vs-odc", [])
    assert len(specs) == 2 * 4 * 2  # strategies × length distributions × rank counts
    balance = {s["strategy"]: s["data.balance"] for s in specs}
    assert balance == {"fsdp": "same-count", "odc": "balanced-cost"}
    assert expand("fsdp-vs-odc", [{"data.balance": "sampler"}])[0]["data.balance"] == "sampler"
    assert expand("data-parallel", [])[0]["data.balance"] == "sampler"  # its own choice stays
    # auto resolves before the identity is taken: same-count given or chosen is one config
    given = expand("transformer-vs-mamba", [{"data.balance": "same-count"}])[0]
    chosen = expand("transformer-vs-mamba", [])[0]
    assert spec_identity(given) == spec_identity(chosen)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"device": "cuda"}, "odc.transport=shm runs on CPU ranks"),
        ({"nnodes": 2, "nproc": 1}, "odc.transport=shm runs within one host"),
    ],
)
def test_odc_over_shared_memory_says_why_it_cannot_run_on_cuda_or_across_hosts(overrides, message):
    """A valid configuration, not runnable with what is built: the launcher skips it with the
    reason (`greenbench.launcher.preflight.why_unsupported`), never a SpecError for the suite."""
    from greenbench.launcher.preflight import why_unsupported

    (spec, *_) = expand("fsdp-vs-odc", [{"strategy": "odc", **overrides}])
    assert message in why_unsupported(spec)
    (fsdp, *_) = expand("fsdp-vs-odc", [{"strategy": "fsdp", **overrides}])
    assert why_unsupported(fsdp) is None


@pytest.mark.parametrize("overrides", [{"device": "cuda"}, {"nnodes": 2, "nproc": 1}])
def test_odc_over_point_to_point_runs_on_cuda_and_across_hosts(overrides):
    from greenbench.launcher.preflight import why_unsupported

    specs = expand("fsdp-vs-odc", [{"strategy": "odc", "odc.transport": "p2p", **overrides}])
    assert specs and all(why_unsupported(s) is None for s in specs)


def test_layout_text_sets_the_degrees_and_auto_picks_the_strategy():
    from greenbench.spec import resolve

    def strategy(layout: str) -> tuple[str, int]:
        s = resolve({**DEFAULTS, "strategy": "auto", "layout": layout, "data.micro_batch": 1})
        return s["strategy"], s["nproc"]

    assert strategy("dpr4") == ("ddp", 4)
    assert strategy("dps2") == ("fsdp", 2)
    assert strategy("tp2-pp2") == ("hybrid", 4)
    with pytest.raises(SpecError, match=r"layout\.tp=2 but layout\.tp=4 is set too"):
        resolve({**DEFAULTS, "layout": "tp2", "layout.tp": 4, "strategy": "hybrid"})


def test_settings_that_do_not_apply_stay_out_of_the_identity():
    from greenbench.spec import expand

    flat, piped = (
        expand("hybrid", [{"layout": layout, "model.family": "transformer"}])[0]
        for layout in ("tp2-dps2", "pp2-dps2")
    )
    assert "layout" not in spec_identity(flat) and "train.pp_schedule" not in spec_identity(flat)
    assert spec_identity(piped)["train.pp_schedule"] == "1f1b"


def test_a_suite_sizes_its_configurations_for_the_device_they_run_on(tmp_path):
    path = write(
        tmp_path,
        """
[defaults]
repeats = 2
[defaults.cuda]
"model.size" = "125m"
[[entries]]
workload = "transformer-vs-mamba"
set = { "data.seq_len" = 128 }
[entries.cuda]
"data.seq_len" = [1024, 8192]
[[entries]]
workload = "fsdp-vs-odc"
set = { strategy = "fsdp", "data.lengths" = "fixed", nproc = 2 }
""",
    )
    suite = load_suite(str(path))
    on_cpu = expand_suite(suite, {}, label=None, machine_device="cpu")
    assert {(s["model.size"], s["data.seq_len"]) for s in on_cpu} == {("tiny", 128), ("tiny", 1024)}
    on_gpu = expand_suite(suite, {}, label=None, machine_device="cuda")
    sizes = {(s.workload, s["model.size"], s["data.seq_len"]) for s in on_gpu}
    assert sizes == {
        ("transformer-vs-mamba", "125m", 1024),
        ("transformer-vs-mamba", "125m", 8192),
        ("fsdp-vs-odc", "tiny", 1024),  # the workload runs on CPU ranks: no cuda table for it
    }
    cli = expand_suite(suite, {"data.seq_len": 64}, label=None, machine_device="cuda")
    assert {s["data.seq_len"] for s in cli} == {64}  # the command line still wins
    forced = expand_suite(suite, {"device": "cpu"}, label=None, machine_device="cuda")
    assert {s["model.size"] for s in forced} == {"tiny"}


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ('[defaults.cuda]\ndevice = "cpu"', "'cuda' cannot set 'device'"),
        ("[defaults]\ncuda = 3", "'cuda' must be a table of settings"),
        ('[defaults.cuda]\n"model.sise" = "1b"', "unknown setting 'model.sise'"),
        ("[defaults.tpu]\nrepeats = 1", "unknown setting 'tpu.repeats'"),
    ],
)
def test_bad_device_tables_are_one_clear_error(tmp_path, table, named):
    path = write(tmp_path, table + '\n[[entries]]\nworkload = "transformer-vs-mamba"\n')
    with pytest.raises(SpecError, match=re.escape(named)):
        load_suite(str(path))


def test_shipped_suites_measure_gpu_sized_models_on_cuda():
    specs = expand_suite(load_suite("posttrain"), {}, label=None, machine_device="cuda")
    by_workload = {s.workload: s for s in specs}
    assert by_workload["transformer-vs-mamba"]["model.size"] == "125m"
    assert max(s["data.seq_len"] for s in specs) >= 8192
    assert by_workload["fsdp-vs-odc"]["model.size"] == "tiny"  # ODC runs on CPU ranks


# ------------------------------------------------------- GPU power limits, emulated GPUs, node


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"gpu.power_limit_w": 400.0, "gpu.power_limit_frac": 0.7}, "at most one of"),
        ({"gpu.power_limit_w": -1.0}, "must be >= 0"),
        ({"gpu.power_limit_w": 400.0, "device": "cpu"}, "needs GPUs"),
        ({"emulate.gpu": "h1000"}, "not a GPU type"),
        ({"emulate.gpu": "h100", "device": "cuda"}, "runs on device cpu"),
        ({"emulate.gpu": "h100", "energy.source": "rapl"}, "leave energy.source auto"),
        ({"energy.node": "redfish"}, "needs energy.redfish_url"),
        ({"energy.redfish_url": "bmc.local/redfish"}, "http:// or https://"),
        ({"energy.node": "snmp"}, "is not one of"),
    ],
)
def test_power_settings_are_checked(settings, message):
    with pytest.raises(SpecError, match=message):
        expand("transformer-vs-mamba", [settings])


def test_power_settings_keep_other_runs_identities():
    plain = expand("transformer-vs-mamba", [{}])[0]
    assert not {
        k for k in spec_identity(plain) if k.startswith(("gpu.", "emulate.gpu", "energy.n"))
    }
    limited = expand("transformer-vs-mamba", [{"gpu.power_limit_frac": 0.7}])[0]
    assert spec_identity(limited)["gpu.power_limit_frac"] == 0.7  # until the launcher has watts
    emulated = expand("transformer-vs-mamba", [{"emulate.gpu": "h100", "device": "cpu"}])[0]
    assert spec_identity(emulated)["emulate.gpu"] == "h100"
    node = expand("transformer-vs-mamba", [{"energy.node": "off"}])[0]
    assert spec_identity(node) == spec_identity(plain)  # a meter beside the devices changes nothing


def test_the_power_limit_workload_sweeps_four_fractions_for_two_families():
    specs = expand("power-limit", [{"device": "cpu", "emulate.gpu": "h100"}])
    assert sorted({s["gpu.power_limit_frac"] for s in specs}) == [0.55, 0.7, 0.85, 1.0]
    assert {s["model.family"] for s in specs} == {"transformer", "mamba"} and len(specs) == 8


def test_seeds_rerun_every_configuration_with_the_next_seeds():
    from greenbench.settings import spec_key, spec_seed_group
    from greenbench.spec import with_seeds

    base = expand("transformer-vs-mamba", [{"model.family": ["transformer", "mamba"],
                                            "data.seq_len": 256, "seed": 5}])  # fmt: skip
    assert with_seeds(base, 1) == base  # today's behaviour
    seeded = with_seeds(base, 3)
    assert [(s["model.family"], s["seed"]) for s in seeded] == [
        ("transformer", 5), ("transformer", 6), ("transformer", 7),
        ("mamba", 5), ("mamba", 6), ("mamba", 7),
    ]  # fmt: skip
    assert len({spec_key(s) for s in seeded}) == 6  # each seed a configuration of its own
    assert len({spec_seed_group(s) for s in seeded}) == 2  # one seed group per configuration
    for spec in seeded:  # only the seed moved
        twin = next(b for b in base if b["model.family"] == spec["model.family"])
        assert {k: v for k, v in spec.settings.items() if k != "seed"} == {
            k: v for k, v in twin.settings.items() if k != "seed"
        }


def test_seeds_hold_a_swept_seed_once_and_refuse_what_no_run_can_take():
    from greenbench.settings.run import MAX_SEED
    from greenbench.spec import with_seeds

    swept = expand("transformer-vs-mamba", [{"model.family": "transformer",
                                             "data.seq_len": 256, "seed": [0, 1]}])  # fmt: skip
    assert [s["seed"] for s in with_seeds(swept, 2)] == [0, 1, 2]
    with pytest.raises(SpecError, match="--seeds must be at least 1"):
        with_seeds(swept, 0)
    last = expand("transformer-vs-mamba", [{"model.family": "transformer",
                                            "data.seq_len": 256, "seed": MAX_SEED}])  # fmt: skip
    with pytest.raises(SpecError, match="seed must be at most"):
        with_seeds(last, 2)
