"""From configurations to job arrays: the cluster options, the grouping by what each
configuration needs, a fixed request, and the #SBATCH lines (checked against submitit's own
sbatch file, which is what SLURM would be given)."""

from __future__ import annotations

import re

import pytest

from greenbench.cluster.job_arrays import plan_jobs
from greenbench.cluster.options import ClusterOptions, cluster_options, parse_cluster_assignment
from greenbench.cluster.sbatch import sbatch_lines, slurm_parameters
from greenbench.errors import SpecError
from greenbench.spec import expand
from greenbench.suite import load_suite, parse_suite


def specs_of(nprocs: list[int], device: str = "cuda", **extra: object) -> list:
    """One data-parallel configuration per entry of ``nprocs`` (single for one rank)."""
    out = []
    for n in nprocs:
        layer = {"device": device, "nproc": n, "strategy": "ddp" if n > 1 else "single"} | extra
        out += expand("data-parallel", [layer | {"data.lengths": "fixed"}], label="x")
    return out


def test_options_layer_the_suite_table_under_the_command_line() -> None:
    options = cluster_options(
        {"partition": "gpu", "time_min": 30, "exclusive": False, "setup": "module load cuda"},
        {"time_min": "45", "account": "proj", "per_job": None},
    )
    assert options == ClusterOptions(
        partition="gpu", account="proj", time_min=45, exclusive=False, setup=("module load cuda",)
    )
    assert parse_cluster_assignment("mem_gb = 64") == ("mem_gb", "64")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"partitoin": "gpu"}, "unknown cluster key 'partitoin'"),
        ({"time_min": "soon"}, "time_min must be a positive int"),
        ({"time_min": 0}, "time_min must be positive"),
        ({"gpus_per_node": -1}, "gpus_per_node must be ≥ 0"),
        ({"exclusive": "maybe"}, "exclusive must be true or false"),
        ({"partition": "two words"}, "partition must be one word"),
        ({"setup": [1, 2]}, "setup must be a shell line"),
    ],
)
def test_bad_cluster_values_are_refused_with_their_key(table: dict, message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        cluster_options(table, {})


def test_a_suite_may_carry_a_cluster_table() -> None:
    data = {"entries": [{"workload": "data-parallel"}], "cluster": {"partition": "gpu"}}
    assert parse_suite(data, name="s", where="s.toml").cluster == {"partition": "gpu"}
    with pytest.raises(SpecError, match=r"\[cluster\] must be a table"):
        parse_suite(data | {"cluster": "gpu"}, name="s", where="s.toml")


def test_configurations_asking_the_same_share_an_array() -> None:
    specs = specs_of([1, 2, 1, 4, 2])
    plan = plan_jobs(specs, ClusterOptions(cpus_per_rank=2))
    shapes = {a.shape.gpus_per_node: a for a in plan.arrays}
    assert sorted(shapes) == [1, 2, 4] and plan.left_out == []
    assert [len(shapes[g].jobs) for g in (1, 2, 4)] == [2, 2, 1]
    assert shapes[4].shape.cpus_per_task == 8 and shapes[4].shape.nodes == 1
    run_ids = [r for a in plan.arrays for j in a.jobs for r in j.run_ids]
    assert len(set(run_ids)) == len(specs)  # every configuration its own run id, chosen now


def test_per_job_groups_configurations_and_multiplies_the_time() -> None:
    plan = plan_jobs(specs_of([1, 1, 1]), ClusterOptions(per_job=2, time_min=20))
    (array,) = plan.arrays
    assert [len(j.specs) for j in array.jobs] == [2, 1] and array.shape.time_min == 40


def test_cpu_and_simulated_configurations_ask_no_gpu() -> None:
    cpu = specs_of([2], device="cpu")
    simulated = expand(
        "skippipe", [{"skippipe.mode": "simulate", "skippipe.network": "local"}], label=None
    )[:1]
    plan = plan_jobs(cpu + simulated, ClusterOptions(cpus_per_rank=1))
    assert {(a.shape.nodes, a.shape.gpus_per_node, a.shape.cpus_per_task) for a in plan.arrays} == {
        (1, 0, 2),
        (1, 0, 1),
    }


def test_a_fixed_request_is_one_array_and_leaves_out_what_does_not_fit() -> None:
    specs = specs_of([1, 2, 8])
    plan = plan_jobs(specs, ClusterOptions(nodes=2, gpus_per_node=4, cpus_per_rank=2))
    (array,) = plan.arrays
    assert (array.shape.nodes, array.shape.gpus_per_node, array.shape.cpus_per_task) == (2, 4, 8)
    assert array.configurations == 2
    ((left, why),) = plan.left_out
    assert left is specs[2] and why == "needs 8 GPUs per node; the request gives 4"


def test_a_local_executor_refuses_a_configuration_spanning_nodes() -> None:
    spec = expand(
        "data-parallel", [{"nnodes": 2, "strategy": "ddp", "data.lengths": "fixed"}], label=None
    )
    with pytest.raises(SpecError, match="spans 2 nodes; the submitit-local executor"):
        plan_jobs(spec, ClusterOptions(), one_node=True)


def test_sbatch_lines_are_those_submitit_writes() -> None:
    submitit_slurm = pytest.importorskip("submitit.slurm.slurm")
    options = ClusterOptions(
        partition="gpu", account="proj", qos="high", constraint="h100", mem_gb=200,
        setup=("module load cuda",), array_parallelism=3,
    )  # fmt: skip
    plan = plan_jobs(specs_of([4, 4, 4, 4]), options)
    (array,) = plan.arrays
    params = slurm_parameters(array, options)
    ours = sbatch_lines(params, len(array.jobs))
    text = submitit_slurm._make_sbatch_string(
        command="python -m submitit.core._submit /x", folder="/x/%j", map_count=4, **params
    )
    theirs = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert set(ours) <= set(theirs)
    assert "#SBATCH --array=0-3%3" in ours and "#SBATCH --gpus-per-node=4" in ours
    assert "#SBATCH --exclusive" in ours and "#SBATCH --mem=200GB" in ours
    # what ours leave out is submitit's own bookkeeping: logs, the signal before the time limit
    extra = {line.split("=")[0] for line in set(theirs) - set(ours)}
    assert extra <= {"#SBATCH --output", "#SBATCH --error", "#SBATCH --open-mode",
                     "#SBATCH --signal", "#SBATCH --wckey"}  # fmt: skip
    assert "module load cuda" in text


def test_posttrain_on_a_cluster_takes_the_gpu_tables() -> None:
    """On SLURM `auto` means the nodes' GPUs: posttrain's [*.cuda] tables size its models."""
    from greenbench.spec import expand_suite

    specs = expand_suite(load_suite("posttrain"), {}, label=None, machine_device="cuda")
    plan = plan_jobs(specs, ClusterOptions())
    assert plan.arrays and all(s["model.size"] == "125m" for s in specs if s["device"] == "auto")
