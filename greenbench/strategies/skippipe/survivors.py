"""A SkipPipe node really gone (``fault.kill_rank=R@S``): the victim SIGKILLs itself, the
survivors notice, agree on who is left and carry on in a process group of their own.

Why our own and not torchft: torchft keeps data-parallel replica groups alive (a quorum
through its lighthouse server, then a reconfigured all-reduce); SkipPipe's survivors need their
point-to-point links between stage nodes back, renumbered, and a new plan, which torchft does
not manage, and it would add a server process to every run. A fresh gloo group over the
launcher's store is all it takes.

The launcher (`greenbench.launcher.survivors`) hosts the run's ``TCPStore``, so a rank's death
does not take the store with it, and publishes a death under `GONE` as soon as it reaps the
process. A survivor learns of it in one of three ways, each noted with its detection: a
receive, send or replica all-reduce fails (gloo's "connection closed by peer": the dead node's
sockets close), one waits ``fault.detect_s`` in vain (its peer is dead, or alive but itself
regrouping), or, before an iteration, it finds the launcher's notice (it had no message to
wait for). It then waits (up to ``fault.detect_s``) for that notice: an error without a death
is a real failure and is raised. Each survivor writes under `AT` the first iteration it can run on a
new plan (the one after the iteration that failed, or the one it found the notice before); the
survivors wait for each other's, and the group resumes at the latest, so no replica steps
twice: an iteration a survivor did not finish, or that is before the latest, is lost to it
(its gradients are dropped, its optimizer does not step; it trains nothing and counts no
useful token). The survivors then leave the old default group and make a new one over a
``PrefixStore`` on the same store, renumbered in rank order (the data node, never killed,
stays rank 0), which the rank's loop then uses for its own exchanges (communication records,
results). Only one death per run is handled (``fault.kill_rank`` names one rank).

Every record is written to the store (`KILL`, `DETECTED`, `REROUTED`) as JSON; the launcher
turns them into the run's events.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import timedelta
from typing import Any

import torch.distributed as dist

KILL = "skippipe/kill"  # the victim: {rank, step, t} just before its SIGKILL
GONE = "skippipe/gone"  # the launcher: {rank: wall time it reaped the process}
T0 = "skippipe/t0"  # the data node: wall time of the first measured iteration
DETECTED = "skippipe/detected/"  # + rank: {rank, step, t, waited_s, how}
AT = "skippipe/at/"  # + rank: the first iteration this survivor had not finished
REROUTED = "skippipe/rerouted"  # the data node: {step, lost, tokens, t, serving, skipped}
SURVIVORS = "skippipe/survivors/"  # the survivors' group's prefix on the store

#: how long survivors wait for each other's `AT` at most, as a multiple of ``fault.detect_s``
#: (each one is at most one failed wait of detect_s away from noticing; plus start-up slack)
AGREE_FACTOR = 4
AGREE_SLACK_S = 30.0


class Survival:
    """One rank's part in surviving ``victim``'s death at measured step ``kill_step``
    (module docstring); ``warm``: the unmeasured iterations before the first measured one."""

    def __init__(
        self, rank: int, world: int, victim: int, kill_step: int, warm: int, detect_s: float
    ) -> None:
        self.rank, self.world = rank, world
        self.victim, self.kill_step, self.warm = victim, kill_step, warm
        self.detect_s = detect_s
        self.timeout = timedelta(seconds=detect_s)
        self.store = dist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            is_master=False,
            timeout=timedelta(seconds=max(60.0, AGREE_FACTOR * detect_s + AGREE_SLACK_S)),
        )
        self.gone: frozenset[int] = frozenset()
        self.survivors: tuple[int, ...] = tuple(range(world))
        self.resume = 0  # iterations before it are lost (after a recovery)
        self.lost_tokens = 0

    def measured(self, step_index: int) -> int:
        return step_index - self.warm

    def peer(self, node: int) -> int:
        """``node``'s rank in the current group (its own until a recovery)."""
        return self.survivors.index(node)

    def before(self, step_index: int) -> None:
        """What happens before iteration ``step_index``: the data node notes when measuring
        began; the victim, at its step, writes its record and SIGKILLs itself."""
        step = self.measured(step_index)
        if step == 0 and self.rank == 0:
            self.store.set(T0, json.dumps(time.time()))
        if self.rank == self.victim and step == self.kill_step:
            record = {"rank": self.rank, "step": step, "t": time.time()}
            self.store.set(KILL, json.dumps(record))
            os.kill(os.getpid(), signal.SIGKILL)

    def noticed(self) -> bool:
        """Whether the launcher has published a death this rank has not regrouped after."""
        return not self.gone and self.store.check([GONE])

    def recover(self, step_index: int, error: BaseException | None, waited_s: float) -> None:
        """Regroup with the survivors (module docstring). ``error``: what failed in iteration
        ``step_index`` (lost, then: the next is the first this rank can run on a new plan), or
        None for the launcher's notice, found before it (it can run on the new plan);
        ``waited_s``: how long the failed operation had waited."""
        t = time.time()
        gone = self.wait_gone(error)
        how = (
            "the launcher's notice, found before an iteration"
            if error is None
            else f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
        )
        detected = {
            "rank": self.rank, "step": self.measured(step_index), "t": t,
            "waited_s": waited_s, "how": how,
        }  # fmt: skip
        self.store.set(DETECTED + str(self.rank), json.dumps(detected))
        survivors = tuple(r for r in range(self.world) if r not in gone)
        first = step_index if error is None else step_index + 1
        self.store.set(AT + str(self.rank), str(first))
        self.store.wait([AT + str(r) for r in survivors])
        self.resume = max(int(self.store.get(AT + str(r))) for r in survivors)
        self.regroup(survivors)
        self.gone, self.survivors = frozenset(gone), survivors

    def wait_gone(self, error: BaseException | None) -> set[int]:
        """The dead ranks the launcher published; ``error`` re-raised when none died within
        ``fault.detect_s`` (a failure that is not a death)."""
        try:
            self.store.wait([GONE], self.timeout)
        except Exception:  # the store's timeout: nobody died
            if error is not None:
                raise error from None
            raise
        return {int(r) for r in json.loads(self.store.get(GONE))}

    def regroup(self, survivors: tuple[int, ...]) -> None:
        """Leave the old default group (a dead member breaks it) and make the survivors' own,
        renumbered in rank order."""
        backend = dist.get_backend()
        group: Any = dist.distributed_c10d._get_default_group()
        try:
            group.abort()
        except Exception:  # a backend without abort: destroying it is enough
            pass
        dist.destroy_process_group()
        dist.init_process_group(
            backend,
            store=dist.PrefixStore(SURVIVORS, self.store),
            rank=survivors.index(self.rank),
            world_size=len(survivors),
        )

    def rerouted(self, record: dict[str, Any]) -> None:
        """The data node's account of the rerouting (written again as lost iterations end)."""
        self.store.set(REROUTED, json.dumps(record))


def survival_of(config: Any, rank: int, world: int) -> Survival | None:
    """The run's `Survival` where it kills a node (``fault.kill_rank``), else None. Its store
    is the launcher's (``MASTER_ADDR``/``MASTER_PORT``)."""
    fault = getattr(config, "fault", None)
    text = fault.kill_rank.strip() if fault is not None else ""
    if not text or world < 2:
        return None
    victim, _, step = text.partition("@")
    train = config.train
    # the rank's loop (`greenbench.rank.worker.warmup_steps`): one more warm-up step where there
    # is only one and the window is lengthened to train.min_window_s
    warm = train.warmup_steps + int(train.warmup_steps == 1 and train.min_window_s > 0)
    return Survival(rank, world, int(victim), int(step), warm, float(fault.detect_s))
