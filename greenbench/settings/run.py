"""The sections of the run itself: what to run and where (the undotted settings), the layout's
degrees, the training loop, how a CPU stands in for devices, and the instrumentation that tests
greenbench itself."""

from __future__ import annotations

from typing import Any

from greenbench.config import (
    ALWAYS,
    NEVER,
    NON_NEGATIVE,
    POSITIVE,
    Config,
    section,
    setting,
    when,
)
from greenbench.errors import SpecError
from greenbench.vocabulary import DEGREES

#: the largest seed: a 64-bit integer
MAX_SEED = 2**63 - 1


def _strategies() -> list[str]:
    from greenbench.strategies import STRATEGIES

    return list(STRATEGIES)


@section("", "What runs, on how many ranks and devices, how often.")
class RunSettings:
    strategy: str = setting(
        "single",
        "the parallel strategy (greenbench list strategies), or auto (from layout)",
        registry=lambda: [*_strategies(), "auto"],
        identity=ALWAYS,
    )
    nproc: Any = setting(
        "auto",
        "ranks per node; auto: the layout's ranks / nnodes (1 without a layout)",
        auto_int=True,
        bound=POSITIVE,
        identity=ALWAYS,
    )
    nnodes: int = setting(1, "nodes the ranks span", bound=POSITIVE, identity=ALWAYS)
    device: str = setting(
        "auto",
        "auto (cuda where torch sees a GPU) | cpu | cuda",
        choices=("auto", "cpu", "cuda"),
        identity=ALWAYS,
    )
    precision: str = setting(
        "auto",
        "auto (fp32 on cpu, bf16 on cuda) | fp32 | bf16",
        choices=("auto", "fp32", "bf16"),
        identity=ALWAYS,
    )
    repeats: int = setting(
        3, "measured repeats of each configuration", bound=POSITIVE, identity=NEVER
    )
    seed: int = setting(
        0, "the data stream's and the initialisation's seed", bound=NON_NEGATIVE, identity=ALWAYS
    )
    timeout_s: float = setting(
        900.0, "seconds a run may take before its ranks are stopped", bound=POSITIVE, identity=NEVER
    )

    def check(self, config: Config) -> None:
        if self.seed > MAX_SEED:
            raise SpecError(f"seed must be at most 2**63 - 1 (a 64-bit integer), got {self.seed}")


def _degree(name: str, doc: str) -> Any:
    return setting("auto", doc, auto_int=True, identity=ALWAYS)


@section("layout", "The degrees of the device mesh (resolved from each other and nproc).")
class LayoutSettings:
    text: str = setting(
        "auto",
        "the degrees at once, e.g. tp2-dps2 (the others 1); sets layout.*",
        key="layout",
        identity=NEVER,
    )
    dp_replicate: Any = _degree("dp_replicate", "data-parallel replicas (ddp fills it)")
    dp_shard: Any = _degree("dp_shard", "data-parallel shards (fsdp fills it)")
    tp: Any = _degree("tp", "tensor-parallel degree (auto: 1)")
    pp: Any = _degree("pp", "pipeline stages (auto: 1)")
    cp: Any = _degree("cp", "context-parallel degree (auto: 1)")

    def degrees(self) -> dict[str, Any]:
        return {d: getattr(self, d) for d in DEGREES}


#: strategies under which a block's forward may run again in backward: their parameters are
#: whole there (FSDP2 gathers a block's before its backward); auto resolves to one of them
CHECKPOINTING_STRATEGIES = ("auto", "single", "ddp", "fsdp", "hybrid")


def _pipelined(s: Any) -> bool:
    return s.get("layout.pp", 1) not in (1, "auto")


@section(
    "train",
    "The training loop: steps measured, warm-up, learning rate, schedule, compile, activation "
    "checkpointing.",
)
class TrainSettings:
    steps: int = setting(3, "minimum measured steps per repeat", bound=POSITIVE, identity=ALWAYS)
    max_steps: int = setting(
        200,
        "upper bound when a window is lengthened to train.min_window_s",
        bound=POSITIVE,
        identity=ALWAYS,
    )
    warmup_steps: int = setting(2, "unmeasured steps first", bound=NON_NEGATIVE, identity=ALWAYS)
    lr: float = setting(1e-3, "the optimizer's learning rate", bound=NON_NEGATIVE, identity=ALWAYS)
    pp_schedule: str = setting(
        "1f1b",
        "pipeline schedule when layout.pp > 1: 1f1b | gpipe | interleaved-1f1b (1F1B over "
        "two stages per rank, looped: rank r holds stages r and r + pp)",
        choices=("1f1b", "gpipe", "interleaved-1f1b"),
        built_in_only=True,
        identity=when(_pipelined),
    )
    compile: str = setting(
        "auto",
        "torch.compile of each block: auto (on for the Transformer on CUDA under single, ddp or "
        "fsdp; off elsewhere) | on | off",
        choices=("auto", "on", "off"),
        # compiled runs only: every run before the setting was eager, and keeps its identity
        identity=when(lambda s: s.get("train.compile") == "on"),
    )
    activation_checkpointing: str = setting(
        "off",
        "off | full: every block's forward recomputed in its backward (torch.utils.checkpoint "
        "per block, as torchtitan's full activation checkpointing), so only the blocks' inputs "
        "stay saved between forward and backward; built-in models under single, ddp, fsdp or "
        "hybrid",
        choices=("off", "full"),
        # checkpointed runs only: every run before the setting kept its activations
        identity=when(lambda s: s.get("train.activation_checkpointing") == "full"),
    )
    until: str = setting(
        "window",
        "window: measured windows of train.steps steps | target: from initialisation until "
        "the held-out loss reaches the target (target.*, eval.*), each repeat a fresh run",
        choices=("window", "target"),
        identity=when(lambda s: s.get("train.until") == "target"),
    )
    min_window_s: float = setting(
        1.0,
        "a measured window is lengthened (up to train.max_steps) to last at least this long",
        bound=NON_NEGATIVE,
        identity=ALWAYS,
    )

    def check(self, config: Config) -> None:
        if self.max_steps < self.steps:
            raise SpecError("train.max_steps must be >= train.steps")
        if self.activation_checkpointing != "off":
            strategy = config.run.strategy
            if config.model is None:
                raise SpecError(
                    "train.activation_checkpointing checkpoints a built-in model's blocks: a "
                    "user workload's model has none greenbench knows"
                )
            if strategy not in CHECKPOINTING_STRATEGIES:
                raise SpecError(
                    f"train.activation_checkpointing is not applied under strategy={strategy} "
                    f"(only {', '.join(CHECKPOINTING_STRATEGIES)}): its recomputed forward "
                    "would run without the strategy's own parameter hooks"
                )


@section("emulate", "How a shared CPU is made to behave like the devices it stands in for.")
class EmulateSettings:
    gpu: str = setting(
        "",
        'CPU ranks stand in for GPUs of this type (h100, a100, …; "": off) whose NVML is '
        "greenbench's power model: the power-limit path without a GPU, its energy labelled "
        "emulated",
        identity=when(lambda s: bool(s.get("emulate.gpu"))),
    )
    rank_cpu_quota: str = setting(
        "auto",
        "each rank a CPU quota of one core: auto (on when ranks outnumber cores) | on | off",
        choices=("auto", "on", "off"),
        identity=ALWAYS,
    )

    def check(self, config: Config) -> None:
        from greenbench.hardware.gpus import DEVICE_TYPES

        if not self.gpu:
            return
        if self.gpu not in DEVICE_TYPES:
            raise SpecError(
                f"emulate.gpu={self.gpu!r} is not a GPU type greenbench models "
                f"({', '.join(sorted(DEVICE_TYPES))})"
            )
        if config.run.device == "cuda":
            raise SpecError("emulate.gpu stands CPU ranks in for GPUs: it runs on device cpu")
        if config.energy.source != "auto":
            raise SpecError(
                "an emulated GPU's energy comes from its power model: leave energy.source auto"
            )


@section("debug", "Instrumentation for testing greenbench itself; never part of the identity.")
class DebugSettings:
    slowdown_s: float = setting(
        0.0,
        "extra compute (seconds) added to every training step",
        bound=NON_NEGATIVE,
        identity=NEVER,
    )
    fail_rank: int = setting(-1, "this rank raises at the first measured step", identity=NEVER)
    hang_rank: int = setting(
        -1, "this rank sleeps forever at the first measured step", identity=NEVER
    )
    kill_rank: int = setting(
        -1, "this rank SIGKILLs itself at the first measured step", identity=NEVER
    )
    oom_rank: int = setting(
        -1, "this rank makes an allocation the machine cannot satisfy", identity=NEVER
    )
    abort_at_exit_rank: int = setting(
        -1, "this rank aborts (SIGABRT) after the results are written", identity=NEVER
    )
    save_final: str = setting(
        "",
        "a fault-tolerant run writes its final parameters, every rank's gathered, to this file "
        "(torch.save; for tests of restart equality)",
        identity=NEVER,
    )
    fault_microbatch: int = setting(
        0,
        "the microbatch of the first measured step the faults fire at",
        bound=NON_NEGATIVE,
        identity=NEVER,
    )
