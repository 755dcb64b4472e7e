"""Launching a SkipPipe run whose node is really killed (``fault.kill_rank`` on
``strategy=skippipe``), and turning what its ranks recorded into the run's events.

Why not torchrun: torchrun tears the whole worker group down when one worker dies, and its
rank 0 hosts the rendezvous store, so a death would end the run. Here a small spawner (this
module, run as ``python -m greenbench.launcher.survivors`` in the place torchrun has in
`greenbench.launcher.execute`) hosts a ``torch.distributed.TCPStore`` itself (the ranks connect
as clients, ``TORCHELASTIC_USE_AGENT_STORE``), starts the ranks with torchrun's environment,
each writing its output where torchrun's ``--log-dir`` would (so `execute.rank_log` finds it),
and waits for them. The planned victim's SIGKILL is expected: the spawner publishes its death
on the store (`greenbench.strategies.skippipe.survivors.GONE`) for the survivors, which regroup
and carry on. Any other rank that fails fails the run as under torchrun: the others are stopped
and the failure printed in torchrun's form, so `execute.first_error` names it.

At the end the spawner writes what the ranks left on the store to ``faults.json``;
`fault_events` makes the run's events of it (`greenbench.results.RunEvent`):

- ``failure``: the victim's rank, the measured step it died at, ``t_s`` (seconds from the first
  measured iteration's start, the data node's clock).
- ``detected``: one per survivor: the rank that noticed, the step it was in, ``t_s``, and
  ``seconds``, the detection latency (from the victim's last record before its SIGKILL to the
  survivor's noticing); the note says how it noticed and how long its failed wait lasted.
- ``rerouted``: ``step`` the first measured step whose plan leaves the dead node out;
  ``tokens`` the tokens of the iterations lost to the failure (the data node's batches of the
  iterations it dropped: begun or due before the survivors had regrouped; trained on by no
  one, they count no useful token); ``seconds`` from the death to the start of the first
  iteration on the new plan (detection, agreement, the new group, and the lost iterations);
  ``joules`` unknown: the meters measure the whole window, not single iterations.

The killed rank's energy up to its death is lost with its process (its window never closes),
so the run's energy is the survivors'; a warning says so, and that one rank died.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from greenbench.results import RankResult, RunEvent
from greenbench.settings.fault import kill_of
from greenbench.settings.runspec import RunSpec

FAULTS = "faults.json"  # what the ranks recorded on the store, in a run's working folder
POLL_S = 0.02  # how often the spawner looks for a rank that ended


def kills(spec: RunSpec) -> bool:
    """Whether ``spec`` is a SkipPipe run with a node really killed (launched here)."""
    config = spec.config
    return config.run.strategy == "skippipe" and kill_of(config) is not None


def command(spec: RunSpec, spec_file: Path, out_dir: Path, logs: Path) -> list[str]:
    """The spawner's command line, in the place of torchrun's (``logs``: its ``--log-dir``)."""
    victim = kill_of(spec.config)
    assert victim is not None
    run = spec.config.run
    return [
        sys.executable, "-m", "greenbench.launcher.survivors",
        f"--nproc={run.nproc * run.nnodes}", f"--victim={victim[0]}",
        "--spec", str(spec_file), "--out", str(out_dir), "--logs", str(logs),
    ]  # fmt: skip


def spawn(nproc: int, victim: int, spec_file: Path, out: Path, logs_dir: Path) -> int:
    """Host the store, run the ranks, publish the victim's death; 0 when every other rank
    finished (module docstring)."""
    import torch.distributed as dist

    from greenbench.processes import die_with_parent
    from greenbench.strategies.skippipe import survivors as keys

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    procs: dict[int, subprocess.Popen] = {}
    for rank in range(nproc):
        logs = logs_dir / "survivors" / "attempt_0" / str(rank)
        logs.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(store.port), "TORCHELASTIC_USE_AGENT_STORE": "True",
        }  # fmt: skip
        with (logs / "stdout.log").open("wb") as stdout, (logs / "stderr.log").open("wb") as err:
            procs[rank] = subprocess.Popen(
                [sys.executable, "-m", "greenbench.rank.worker",
                 "--spec", str(spec_file), "--out", str(out)],
                stdout=stdout, stderr=err, stdin=subprocess.DEVNULL, env=env,
                preexec_fn=die_with_parent,
            )  # fmt: skip
    gone: dict[str, float] = {}
    failed: tuple[int, int] | None = None
    running = dict(procs)
    while running and failed is None:
        for rank, proc in list(running.items()):
            code = proc.poll()
            if code is None:
                continue
            del running[rank]
            if rank == victim and code == -signal.SIGKILL:
                gone[str(rank)] = time.time()
                store.set(keys.GONE, json.dumps(gone))
            elif code != 0:
                failed = (rank, code)
        time.sleep(POLL_S)
    for proc in running.values():  # the others, after a failure: stopped as torchrun does
        proc.send_signal(signal.SIGTERM)
    for proc in running.values():
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    (out / FAULTS).write_text(json.dumps(recorded(store, nproc, gone)))
    if failed is not None:
        rank, code = failed
        print(f"[survivors] a rank failed:\n  rank      : {rank}\n  exitcode  : {code}")
        return 1
    return 0


def recorded(store: Any, nproc: int, gone: dict[str, float]) -> dict[str, Any]:
    """What the ranks left on the store (`greenbench.strategies.skippipe.survivors`)."""
    from greenbench.strategies.skippipe import survivors as keys

    def get(key: str) -> Any:
        return json.loads(store.get(key)) if store.check([key]) else None

    return {
        "kill": get(keys.KILL),
        "gone": gone,
        "t0": get(keys.T0),
        "detected": [d for r in range(nproc) if (d := get(keys.DETECTED + str(r)))],
        "rerouted": get(keys.REROUTED),
    }


def fault_events(
    spec: RunSpec, out: Path, ranks: list[RankResult]
) -> tuple[list[RunEvent], list[str]]:
    """The run's events and warnings from ``faults.json`` (module docstring); none when the
    spawner wrote none. ``ranks``: the survivors' results (their windows' steps place the kill
    in its repeat)."""
    path = out / FAULTS
    if not path.exists():
        return [], []
    found = json.loads(path.read_text())
    kill, t0, rerouted = found["kill"], found["t0"], found["rerouted"]
    planned = kill_of(spec.config)
    assert planned is not None
    victim, step = planned
    if kill is None:
        return [], [
            f"fault.kill_rank={victim}@{step}: rank {victim} was not killed (it never "
            "reached its measured step)"
        ]
    died = kill["t"]
    repeat = repeat_of(kill["step"], ranks)

    def since(t: float) -> float | None:
        return None if t0 is None else t - t0

    events = [
        RunEvent(
            repeat=repeat,
            kind="failure",
            step=kill["step"],
            rank=victim,
            t_s=since(died),
            note=(
                "SIGKILLed (fault.kill_rank); its energy and results up to its death went "
                "with its process"
            ),
        )
    ]
    for d in sorted(found["detected"], key=lambda d: d["t"]):
        events.append(
            RunEvent(
                repeat=repeat_of(d["step"], ranks),
                kind="detected",
                step=max(d["step"], 0),
                rank=d["rank"],
                t_s=since(d["t"]),
                seconds=max(0.0, d["t"] - died),
                note=f"{d['how']}; its failed wait lasted {d['waited_s']:.3g} s",
            )
        )
    warnings = [
        f"rank {victim} was killed at measured step {kill['step']} (fault.kill_rank): the "
        f"run's results are the {spec.layout.world - 1} survivors'; its energy up to its "
        "death is not in the total (its meter went with its process)"
    ]
    if rerouted is not None:
        skipped = "; ".join(
            f"stage {s['stage']} (layers {s['layers'][0]}–{s['layers'][1] - 1}) lost its only "
            "node: later paths and evaluation use the model without it"
            for s in rerouted["skipped"]
        )
        note = (
            f"plans from measured step {rerouted['step']} serve nodes "
            f"{','.join(map(str, rerouted['serving']))}; iterations lost (gradients dropped, "
            f"no useful token): {rerouted['lost'] or 'none'}; seconds: from the death to the "
            "first iteration on the new plan; joules: an estimate, those seconds at the "
            "survivors' mean power over their window (the meters measure the window, not "
            "single iterations)"
        )
        repeat = repeat_of(rerouted["step"], ranks)
        seconds = max(0.0, rerouted["t"] - died)
        power = survivors_power_w(ranks, repeat)
        events.append(
            RunEvent(
                repeat=repeat,
                kind="rerouted",
                step=rerouted["step"],
                rank=victim,
                t_s=since(rerouted["t"]),
                seconds=seconds,
                joules=None if power is None else power * seconds,
                tokens=rerouted["tokens"],
                note="; ".join(filter(None, (note, skipped))),
            )
        )
        if skipped:
            warnings.append(skipped)
    return events, warnings


def survivors_power_w(ranks: list[RankResult], repeat: int) -> float | None:
    """The surviving ranks' mean power over ``repeat``'s window: their joules summed over the
    longest of their windows' seconds (None when a rank's energy is unknown)."""
    windows = [r.energy for r in ranks if r.repeat == repeat]
    if not windows or any(w is None or w.energy_j is None for w in windows):
        return None
    seconds = max(w.seconds for w in windows if w is not None)
    return (
        sum(w.energy_j for w in windows if w is not None and w.energy_j) / seconds
        if seconds > 0
        else None
    )


def repeat_of(step: int, ranks: list[RankResult]) -> int:
    """The repeat measured step ``step`` fell in, from the data node's windows (rank 0 is
    never killed); the last repeat for a step beyond them, 0 when there are none."""
    windows = sorted((r.repeat, len(r.step_times_s)) for r in ranks if r.rank == 0)
    first = 0
    for repeat, steps in windows:
        if step < first + steps:
            return repeat
        first += steps
    return windows[-1][0] if windows else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m greenbench.launcher.survivors --nproc N --victim R --spec F --out D
    --logs L``."""
    from greenbench.processes import die_with_parent

    parser = argparse.ArgumentParser(prog="greenbench.launcher.survivors")
    parser.add_argument("--nproc", required=True, type=int)
    parser.add_argument("--victim", required=True, type=int)
    parser.add_argument("--spec", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--logs", required=True, type=Path)
    args = parser.parse_args(argv)
    die_with_parent()
    return spawn(args.nproc, args.victim, args.spec, args.out, args.logs)


if __name__ == "__main__":
    sys.exit(main())
