"""The GPU path against the issue's goals, in one run, each line marked MET or SHORT.

(a) Mamba ÷ Transformer tokens/s at 125m for seq 1k, 4k, 8k, 16k, for the state-space families
    ``mamba`` and ``mamba2`` (read from ``greenbench.models.FAMILIES`` at run time: a family not
    registered is named and skipped), with every scan kernel the family's ``resolve_kernel``
    accepts here (those it refuses are printed with its reason).
    Goals: ≥ 0.8× at 1k; ahead (> 1×) at 8k and above.
(b) greenbench's Transformer ÷ transformers' own eager ``LlamaForCausalLM`` at 125m, seq 1k:
    the same shapes, AdamW, bf16 autocast, in this process, both timed as the worker times a
    window (device synchronised, then the clock). Goal: ≥ 1.3×.
(c) MFU at 1b, seq 2048 (global batch 16, micro 8): the Transformer (goal ≥ 45 %, 40 % at
    least) and Mamba (goal ≥ 20.4 %, the hybrid-parallelism study's Mamba-1B).
(d) What measuring costs a step (`greenbench.rank.overhead`): one reading of the meter a
    cuda run selects × readings per step, plus the per-step timers with their
    synchronisation, against the step time of (a)'s Transformer at 1k. Goal: ≤ 0.1 %.

(a) and (c) run through greenbench's own command line (``greenbench run --suite FILE`` in a
subprocess, a suite written for the run) into a DuckDB file, and read tokens/s, MFU and step
times back from the store: the numbers are what a user gets.

    python benchmarks/gpu_speed.py [--parts abcd] [--db PATH] [--repeats 2]
    python benchmarks/gpu_speed.py --parts b --ablate   # (b) also without compile, liger
    python benchmarks/gpu_speed.py --quick     # CPU plumbing check: tiny presets, not GPU figures

Without CUDA it exits 2 with one line; ``--quick`` shrinks everything to tiny presets on the CPU
so the plumbing is tested there, and says on every line that these are not the GPU figures.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

LABEL = "gpu-speed"
#: the scan kernels to benchmark per state-space family (the issue's list)
WANTED_KERNELS: dict[str, tuple[str, ...]] = {
    "mamba": ("triton", "mamba-ssm"),
    "mamba2": ("fla", "mamba-ssm", "torch"),
}
QUICK_NOTE = "quick: tiny CPU runs, not the GPU figures"


@dataclass(frozen=True)
class Plan:
    """What one invocation measures, and how big."""

    device: str
    quick: bool
    size: str  # (a), (b)
    big: str  # (c)
    seq_lens: tuple[int, ...]
    long_from: int  # (a)'s "ahead" goal applies from this length on
    mfu_seq: int
    mfu_batch: tuple[int, int]  # (global, micro) for (c)
    tokens_per_step: int
    tokens_per_micro: int
    repeats: int
    train: dict[str, Any] = field(default_factory=dict)

    @property
    def precision(self) -> str:
        return "bf16" if self.device == "cuda" else "fp32"

    def batch(self, seq_len: int) -> tuple[int, int]:
        """(global batch, micro batch) of about ``tokens_per_step`` tokens at ``seq_len``."""
        global_batch = max(1, self.tokens_per_step // seq_len)
        micro = max(1, min(global_batch, self.tokens_per_micro // seq_len))
        while global_batch % micro:
            micro -= 1
        return global_batch, micro


def make_plan(quick: bool, repeats: int | None, seq_lens: tuple[int, ...] | None) -> Plan:
    if quick:
        return Plan(
            device="cpu", quick=True, size="tiny", big="tiny", seq_lens=seq_lens or (64, 128),
            long_from=128, mfu_seq=128, mfu_batch=(2, 2), tokens_per_step=256,
            tokens_per_micro=256, repeats=repeats or 1,
            train={"train.warmup_steps": 1, "train.steps": 1, "train.min_window_s": 0.0,
                   "energy.idle_s": 0.0},
        )  # fmt: skip
    return Plan(
        device="cuda", quick=False, size="125m", big="1b",
        seq_lens=seq_lens or (1024, 4096, 8192, 16384), long_from=8192, mfu_seq=2048,
        mfu_batch=(16, 8), tokens_per_step=16384, tokens_per_micro=8192, repeats=repeats or 2,
        # windows of at least 2 s: NVML's counter advances every ~100 ms
        train={"train.warmup_steps": 3, "train.steps": 5, "train.min_window_s": 2.0},
    )  # fmt: skip


# ------------------------------------------------------------------------------- verdicts


def verdict(ok: bool, quick: bool) -> str:
    word = "MET" if ok else "SHORT"
    return f"{word} ({QUICK_NOTE})" if quick else word


def mfu_verdict(mfu: float, goal: float, floor: float | None, quick: bool) -> str:
    """MET at ``goal``; below it, SHORT, saying whether ``floor`` (the least acceptable) holds."""
    if mfu >= goal or floor is None:
        return verdict(mfu >= goal, quick)
    held = "above" if mfu >= floor else "below"
    text = f"SHORT of {goal:.0%}, {held} the {floor:.0%} floor"
    return f"{text} ({QUICK_NOTE})" if quick else text


# ----------------------------------------------------------------------- kernels, families


def kernels_to_run(family: str, device: str, wanted: tuple[str, ...]) -> list[tuple[str, str]]:
    """(kernel, "") for each of ``wanted`` the family accepts on ``device``, and
    (kernel, reason) for each it refuses (resolve_kernel's own message)."""
    from greenbench.models import FAMILIES

    out = []
    for kernel in wanted:
        try:
            resolved = FAMILIES[family].resolve_kernel(kernel, device)
        except Exception as e:  # KernelUnavailable, SpecError: the family's reason
            out.append((kernel, f"refused: {e}"))
            continue
        if kernel != "auto" and resolved != kernel:
            out.append((kernel, f"refused: resolves to {resolved!r} here"))
        else:
            out.append((kernel, ""))
    return out


# ------------------------------------------------------------------- runs through the CLI


@dataclass(frozen=True)
class Config:
    """One configuration of the transformer-vs-mamba workload."""

    family: str
    size: str
    seq_len: int
    global_batch: int
    micro_batch: int
    kernel: str = "auto"

    def settings(self) -> dict[str, Any]:
        return {
            "model.family": self.family, "model.size": self.size, "data.seq_len": self.seq_len,
            "data.global_batch": self.global_batch, "data.micro_batch": self.micro_batch,
            "model.scan": self.kernel,
        }  # fmt: skip

    def name(self) -> str:
        scan = f" scan={self.kernel}" if self.family != "transformer" else ""
        return f"{self.family}/{self.size} seq={self.seq_len}{scan}"


def toml_value(value: Any) -> str:
    return json.dumps(value)  # strings, numbers and booleans read the same in TOML


def write_suite(path: Path, plan: Plan, configs: list[Config]) -> Path:
    """A suite file of ``configs`` (one entry each) with the plan's training settings."""
    lines = ['description = "benchmarks/gpu_speed.py"', "", "[defaults]"]
    lines += [f'"{k}" = {toml_value(v)}' for k, v in plan.train.items()]
    for config in configs:
        entry = ", ".join(f'"{k}" = {toml_value(v)}' for k, v in config.settings().items())
        lines += ["", "[[entries]]", 'workload = "transformer-vs-mamba"', f"set = {{ {entry} }}"]
    path.write_text("\n".join(lines) + "\n")
    return path


#: (database, configuration) pairs this process has run through the command line: one stored
#: ok since is what ``--resume`` would skip, so it is not handed to the command again
_RAN: set[tuple[Path, Config]] = set()


def run_configs(db: Path, plan: Plan, configs: list[Config], work: Path) -> None:
    """Run ``configs`` through greenbench's command line into ``db`` (configurations already
    stored ok with the same settings are kept: ``--resume``). Those this process ran into
    ``db`` and found stored ok are left out before the command starts, and when that leaves
    none, no command starts (--quick's (c) repeats two of (a)'s configurations)."""
    kept = [c for c in configs if (db, c) in _RAN and lookup(db, c).ok]
    if kept:
        print(f"  {len(kept)} configuration(s) stored ok earlier in this run, kept")
    configs = [c for c in configs if c not in kept]
    if not configs:
        return
    _RAN.update((db, c) for c in configs)
    suite = write_suite(work / f"gpu-speed-{len(list(work.glob('*.toml')))}.toml", plan, configs)
    cmd = [
        sys.executable, "-m", "greenbench.cli", "run", "--suite", str(suite),
        "--device", plan.device, "--repeats", str(plan.repeats), "--db", str(db),
        "--label", LABEL, "--resume",
    ]  # fmt: skip
    print(f"  running {len(configs)} configuration(s): greenbench run --suite … ", flush=True)
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    print(f"  … {time.perf_counter() - started:.0f} s, exit {done.returncode}", flush=True)
    if done.returncode not in (0, 1):  # 1: some configuration failed (each is stored)
        # 2: refused before anything ran (one line saying why); the lookups say "not run"
        for line in (done.stdout + done.stderr).strip().splitlines()[-5:]:
            print(f"    {line}")


@dataclass(frozen=True)
class Measured:
    """What the store holds of one configuration's newest run."""

    status: str
    error: str | None = None
    kernel: str | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    step_s: float | None = None
    steps_per_window: int | None = None
    peak_flops_source: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.tokens_per_s is not None


def lookup(db: Path, config: Config) -> Measured:
    """The newest stored run of ``config`` (under this script's label) and its medians."""
    from greenbench.store.queries import get_run, list_runs

    if not db.exists():
        return Measured("not run")
    runs = list_runs(db, limit=None, label=LABEL)
    for _, row in runs.iterrows():
        cfg = row["config"]
        settings = as_json(cfg)["settings"]
        wanted = config.settings()
        if config.kernel == "auto" or config.family == "transformer":
            wanted.pop("model.scan")
        if any(settings.get(k) != v for k, v in wanted.items()):
            continue
        if row["status"] != "ok":
            return Measured(row["status"], error=row["error"], kernel=settings.get("model.scan"))
        results = get_run(db, row["run_id"])["results"]
        steps = [as_json(r["step_times_s"]) for r in results if r["step_times_s"]]
        return Measured(
            "ok",
            kernel=settings.get("model.scan"),
            tokens_per_s=statistics.median(r["tokens_per_s"] for r in results),
            mfu=median_or_none([r["mfu"] for r in results]),
            step_s=median_or_none([r["step_time_p50_s"] for r in results]),
            steps_per_window=min(len(s) for s in steps) if steps else None,
            peak_flops_source=row["peak_flops_source"],
        )
    return Measured("not stored")


def as_json(value: Any) -> Any:
    """A JSON column as the store hands it: parsed already, or its text."""
    return json.loads(value) if isinstance(value, str) else value


def median_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def describe(m: Measured) -> str:
    return m.status if not m.error else f"{m.status}: {m.error.splitlines()[0][:120]}"


# ------------------------------------------------------------------------------- (a)


def part_a(plan: Plan, db: Path, work: Path) -> None:
    from greenbench.models import FAMILIES

    print(f"\n(a) state-space ÷ Transformer tokens/s, {plan.size}, {plan.precision}, {plan.device}")
    families = []
    for family in WANTED_KERNELS:
        if family not in FAMILIES:
            print(f"  {family}: not in greenbench.models.FAMILIES here, skipped")
            continue
        choices = kernels_to_run(family, plan.device, WANTED_KERNELS[family])
        for kernel, why in choices:
            if why:
                print(f"  {family} model.scan={kernel}: {why}")
        accepted = [k for k, why in choices if not why]
        if plan.quick and not accepted:  # the plumbing still runs the family, on its CPU kernel
            accepted = ["auto"]
        families += [(family, k) for k in accepted]
    baseline = {
        seq: Config("transformer", plan.size, seq, *plan.batch(seq)) for seq in plan.seq_lens
    }
    run_configs(db, plan, [*baseline.values()] + [
        Config(family, plan.size, seq, *plan.batch(seq), kernel=kernel)
        for family, kernel in families
        for seq in plan.seq_lens
    ], work)  # fmt: skip
    base = {seq: lookup(db, config) for seq, config in baseline.items()}
    print(f"  {'configuration':34s} {'tokens/s':>12s} {'transformer':>12s} {'ratio':>6s}  goal")
    for seq in plan.seq_lens:
        t = base[seq]
        shown = f"{t.tokens_per_s:12,.0f}" if t.ok else describe(t)
        print(f"  {'transformer/' + plan.size + f' seq={seq}':34s} {shown}")
    for family, kernel in families:
        for seq in plan.seq_lens:
            config = Config(family, plan.size, seq, *plan.batch(seq), kernel=kernel)
            m, t = lookup(db, config), base[seq]
            if not (m.ok and t.ok):
                print(f"  {config.name():34s} not measured: {describe(m if not m.ok else t)}")
                continue
            ratio = m.tokens_per_s / t.tokens_per_s
            if seq == min(plan.seq_lens):
                goal, ok = "≥ 0.8×", ratio >= 0.8
            elif seq >= plan.long_from:
                goal, ok = "> 1× (ahead)", ratio > 1.0
            else:
                goal, ok = "", None
            judged = verdict(ok, plan.quick) if ok is not None else "(no goal at this length)"
            ran = f" [{m.kernel}]" if kernel == "auto" else ""
            print(
                f"  {config.name() + ran:34s} {m.tokens_per_s:12,.0f} {t.tokens_per_s:12,.0f} "
                f"{ratio:6.2f}  {goal} {judged}"
            )


# ------------------------------------------------------------------------------- (b)


def timed_windows(
    step: Callable[[int], None], device: torch.device, warmup: int, steps: int, windows: int
) -> list[float]:
    """Seconds of each of ``windows`` windows of ``steps`` calls of ``step``, after ``warmup``
    calls; the device synchronised before each clock reading, as the worker does."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    i = 0
    for _ in range(warmup):
        step(i)
        i += 1
    seconds = []
    for _ in range(windows):
        sync()
        start = time.perf_counter()
        for _ in range(steps):
            step(i)
            i += 1
        sync()
        seconds.append(time.perf_counter() - start)
    return seconds


#: (b)'s ablation: greenbench's step again with its compilation and fused kernels turned off
ABLATION: tuple[dict[str, str], ...] = (
    {"model.liger": "off"},
    {"train.compile": "off"},
    {"train.compile": "off", "model.liger": "off"},
)


def part_b(plan: Plan, ablate: bool = False) -> None:
    """greenbench's own step (the worker's `run_rank`, in this process, with the kernels its
    settings pick) against transformers' eager Llama in a plain loop, same shapes and
    precision; with ``ablate``, greenbench's step also with each of `ABLATION`'s choices (where
    the difference comes from)."""
    from greenbench.launcher.resolve import resolve_spec
    from greenbench.spec import expand

    seq = plan.seq_lens[0]
    batch = 4  # the reference anchor's batch: 4 × 1024
    print(
        f"\n(b) greenbench Transformer ÷ transformers' eager LlamaForCausalLM, {plan.size}, "
        f"seq {seq}, batch {batch}, AdamW, {plan.precision}, {plan.device}, in process"
    )
    config = Config("transformer", plan.size, seq, batch, batch)
    settings = {**config.settings(), **plan.train, "device": plan.device, "repeats": plan.repeats,
                "precision": plan.precision, "energy.idle_s": 0.0}  # fmt: skip
    (spec,) = expand("transformer-vs-mamba", [settings])
    spec = resolve_spec(spec)
    ours, steps, per_step = greenbench_tokens_per_s(spec)
    theirs = eager_llama_tokens_per_s(plan, seq, batch, spec.settings, steps)
    if plan.device == "cuda":
        gc.collect()
        torch.cuda.empty_cache()  # (c)'s runs get the GPU memory back
    picked = ", ".join(
        f"{k}={spec.settings[k]}" for k in ("train.compile", "model.liger") if k in spec.settings
    )
    ratio = ours / theirs
    print(f"  greenbench (worker's run_rank)    {ours:12,.0f} tokens/s ({per_step:,.0f}/step)")
    if picked:
        print(f"  {'':34s}{picked}")
    print(f"  transformers eager Llama loop     {theirs:12,.0f} tokens/s ({batch * seq:,}/step)")
    print(f"  ratio {ratio:.2f}  goal ≥ 1.3×  {verdict(ratio >= 1.3, plan.quick)}")
    for choice in ABLATION if ablate else ():
        (variant,) = expand("transformer-vs-mamba", [{**settings, **choice}])
        tokens_per_s = greenbench_tokens_per_s(resolve_spec(variant))[0]
        named = ", ".join(f"{k}={v}" for k, v in choice.items())
        print(f"  greenbench with {named:35s} {tokens_per_s:12,.0f} tokens/s "
              f"({tokens_per_s / theirs:.2f}× the eager loop)")  # fmt: skip


def greenbench_tokens_per_s(spec: Any) -> tuple[float, int, float]:
    """(median tokens/s over the windows, steps per window, tokens per step) of the worker's
    own training of ``spec`` in this process."""
    from greenbench.rank import worker

    ranks = worker.run_rank(spec)
    if spec.settings["device"] == "cuda":
        torch.cuda.empty_cache()
    return (
        statistics.median(r.tokens / r.seconds for r in ranks),
        min(len(r.step_times_s) for r in ranks),
        statistics.median(r.tokens / len(r.step_times_s) for r in ranks),
    )


def eager_llama_tokens_per_s(
    plan: Plan, seq: int, batch: int, settings: dict[str, Any], steps: int
) -> float:
    """Median tokens/s of transformers' `LlamaForCausalLM` with eager attention, of
    greenbench's preset shape, trained by a plain loop (torch's default AdamW, autocast to
    the plan's precision) in windows of ``steps`` steps, timed as the worker times them."""
    from transformers import LlamaForCausalLM

    from greenbench.models.transformer.model import make_config

    device = torch.device(plan.device, 0) if plan.device == "cuda" else torch.device("cpu")
    cfg = copy.deepcopy(make_config(plan.size))
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    with device:
        model = LlamaForCausalLM(cfg)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings["train.lr"])
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)

    def step(_: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        if plan.precision == "bf16":
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
        else:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        float(loss.detach())  # the worker reads its loss every step too

    seconds = timed_windows(step, device, settings["train.warmup_steps"], steps, plan.repeats)
    return statistics.median(batch * seq * steps / s for s in seconds)


# ------------------------------------------------------------------------------- (c)


def part_c(plan: Plan, db: Path, work: Path) -> None:
    print(f"\n(c) MFU at {plan.big}, seq {plan.mfu_seq}, batch {plan.mfu_batch[0]} "
          f"(micro {plan.mfu_batch[1]}), {plan.precision}, {plan.device}")  # fmt: skip
    configs = [Config(f, plan.big, plan.mfu_seq, *plan.mfu_batch) for f in ("transformer", "mamba")]
    run_configs(db, plan, configs, work)
    goals = {"transformer": (0.45, 0.40), "mamba": (0.204, None)}
    for config in configs:
        m = lookup(db, config)
        if not m.ok or m.mfu is None:
            print(f"  {config.name():34s} not measured: {describe(m)}")
            continue
        goal, floor = goals[config.family]
        name = f"{config.family}/{config.size} seq={config.seq_len}"
        if config.family != "transformer":
            name += f" [scan {m.kernel}]"
        wanted = f"goal ≥ {goal:.1%}" + (f" ({floor:.0%} at least)" if floor else "")
        print(
            f"  {name:34s} MFU {m.mfu:6.1%}  {m.tokens_per_s:10,.0f} tokens/s  "
            f"{wanted}  {mfu_verdict(m.mfu, goal, floor, plan.quick)}"
        )
        if m.peak_flops_source:
            print(f"  {'':34s} peak from {m.peak_flops_source}")


# ------------------------------------------------------------------------------- (d)


def part_d(plan: Plan, db: Path, work: Path) -> None:
    from greenbench.energy import select_meter
    from greenbench.rank.overhead import measure_overhead

    seq = plan.seq_lens[0]
    config = Config("transformer", plan.size, seq, *plan.batch(seq))
    print(f"\n(d) measurement overhead per step, against {config.name()} on {plan.device}")
    m = lookup(db, config)
    if not m.ok:
        run_configs(db, plan, [config], work)
        m = lookup(db, config)
    if not m.ok or m.step_s is None or not m.steps_per_window:
        print(f"  not measured: the step time of {config.name()}: {describe(m)}")
        return
    gpus = [0] if plan.device == "cuda" else []
    meter = select_meter(plan.device, None, gpu_indices=gpus)
    try:
        over = measure_overhead(
            meter, step_s=m.step_s, steps_per_window=m.steps_per_window, device=plan.device
        )
    finally:
        meter.close()
    print(
        f"  meter {over.meter}: one reading {over.reading_s * 1e6:,.1f} µs × "
        f"{over.readings_per_step:.3f} readings/step (window of {over.steps_per_window} steps, "
        f"sampler {over.sampler_hz:g} Hz) = {over.meter_s * 1e6:,.2f} µs"
    )
    print(f"  per-step timers (clock reads, synchronisation): {over.timers_s * 1e6:,.2f} µs")
    print(
        f"  step {over.step_s * 1e3:,.2f} ms: overhead {over.fraction:.4%} of a step  "
        f"goal ≤ 0.1 %  {verdict(over.fraction <= 0.001, plan.quick)}"
    )
    worst = (over.reading_s * 2 + over.timers_s) / over.step_s
    print(f"  (a window of one step, the worst case: {worst:.4%})")


# ------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny presets on the CPU (plumbing)")
    parser.add_argument("--parts", default="abcd", help="which parts to run, e.g. ad")
    parser.add_argument("--db", type=Path, help="DuckDB file to keep (default: a temporary one)")
    parser.add_argument("--repeats", type=int, help="measured windows per configuration")
    parser.add_argument("--seq-lens", help="comma-separated sequence lengths for (a)")
    parser.add_argument(
        "--ablate", action="store_true", help="(b) also without compilation and fused kernels"
    )
    args = parser.parse_args(argv)
    if not args.quick and not torch.cuda.is_available():
        print(
            "gpu_speed.py needs a CUDA GPU (torch sees none); --quick runs its plumbing on the "
            "CPU with tiny presets",
            file=sys.stderr,
        )
        return 2
    if set(args.parts) - set("abcd") or not args.parts:
        parser.error(f"--parts takes letters from abcd, got {args.parts!r}")
    seq_lens = tuple(int(s) for s in args.seq_lens.split(",")) if args.seq_lens else None
    plan = make_plan(args.quick, args.repeats, seq_lens)
    if plan.quick:
        print(
            "QUICK CPU PLUMBING CHECK: tiny presets on the CPU. These are NOT the GPU figures; "
            "the MET/SHORT marks compare tiny CPU runs with goals set for an H100."
        )
    else:
        print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    with tempfile.TemporaryDirectory(prefix="gpu-speed-") as tmp:
        work = Path(tmp)
        db = args.db.resolve() if args.db else work / "gpu-speed.duckdb"
        db.parent.mkdir(parents=True, exist_ok=True)
        failed = []
        for part, run in (
            ("a", lambda: part_a(plan, db, work)),
            ("b", lambda: part_b(plan, args.ablate)),
            ("c", lambda: part_c(plan, db, work)),
            ("d", lambda: part_d(plan, db, work)),
        ):
            if part not in args.parts:
                continue
            try:
                run()
            except Exception as e:  # one part's failure does not hide the others' figures
                traceback.print_exc()
                print(f"  ({part}) FAILED: {type(e).__name__}: {e}")
                failed.append(part)
        if args.db:
            print(f"\nruns kept in {db} (label {LABEL!r})")
    if failed:
        print(f"parts that failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
