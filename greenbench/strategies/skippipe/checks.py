"""What a SkipPipe run needs of its settings and layout (without torch: the spec runs it): its
nodes per stage (`parse_nodes`), a layer per stage of blocks, and the emulated links and nodes.
The model's layers are read from its torch-free card (`greenbench.models`)."""

from __future__ import annotations

from greenbench.config import Config
from greenbench.errors import SpecError
from greenbench.models import model_preset
from greenbench.planner.skippipe.topology import PUBLISHED_STAGE_SIZES
from greenbench.strategies.skippipe.settings import SkipPipeSettings
from greenbench.vocabulary import Layout


def parse_nodes(text: str) -> tuple[int, ...]:
    """``"1-2-1"`` → nodes per stage."""
    try:
        counts = tuple(int(p) for p in str(text).split("-") if p.strip())
    except ValueError:
        counts = ()
    if len(counts) < 2 or any(c < 1 for c in counts):
        raise SpecError(
            f"skippipe.stages={text!r} must list the nodes of each stage, data nodes first, "
            "at least two stages (e.g. '1-2-1')"
        )
    return counts


def validate_published(skippipe: SkipPipeSettings, counts: tuple[int, ...]) -> None:
    """A simulated run on ``skippipe.network = "gcp12"``: SkipPipe's published 20-node,
    6-stage experiment, so its stages and no failing node (the slow nodes may be any of its
    20)."""
    if counts != PUBLISHED_STAGE_SIZES:
        published = "-".join(str(c) for c in PUBLISHED_STAGE_SIZES)
        raise SpecError(
            f"skippipe.network=gcp12 simulates SkipPipe's published 20-node experiment: it needs "
            f"skippipe.stages={published}, got {skippipe.stages}"
        )
    if not 0 <= skippipe.skip < 1:
        raise SpecError(f"skippipe.skip must be in [0, 1), got {skippipe.skip}")
    if skippipe.fail_node >= 0:
        raise SpecError("skippipe.fail_node is not simulated on skippipe.network=gcp12")
    nodes = sum(counts)
    slow = skippipe.slow_nodes
    for part in str(slow).split("-"):
        if part.strip() and not (part.strip().isdigit() and int(part) < nodes):
            raise SpecError(f"emulate.slow_nodes={slow!r} must list nodes below {nodes} (e.g. '2')")
    if skippipe.slowdown < 1:
        raise SpecError(f"emulate.slowdown must be >= 1, got {skippipe.slowdown}")


def check_skippipe(config: Config, layout: Layout) -> None:
    """SpecError for stages, links or nodes a SkipPipe run cannot have."""
    sp: SkipPipeSettings = config.skippipe
    counts = parse_nodes(sp.stages)
    if sp.mode == "simulate" and killed_node(config) is not None:
        raise SpecError(
            f"fault.kill_rank={config.fault.kill_rank}: a simulated SkipPipe run has no "
            "process to kill"
        )
    if sp.mode == "simulate":
        if config.energy.source != "auto":
            raise SpecError(
                f"energy.source={config.energy.source}: a simulated run reads no meter "
                "(its energy is modelled at assumed watts); leave energy.source=auto"
            )
        if sp.network == "gcp12":
            validate_published(sp, counts)
            return
    elif sp.network != "local":
        raise SpecError(
            f"skippipe.network={sp.network} is simulated only: add "
            "--set skippipe.mode=simulate (a real run's nodes are this machine's ranks)"
        )
    if sum(counts) != layout.world:
        raise SpecError(
            f"skippipe.stages={sp.stages} places {sum(counts)} nodes but "
            f"the run has {layout.world} ranks"
        )
    blocks = len(counts) - 1
    layers = model_preset(config.model.family, config.model.size).n_layers
    if layers < blocks:
        raise SpecError(
            f"skippipe.stages={sp.stages} has {blocks} stages of blocks "
            f"but the model has {layers} layers"
        )
    if not 0 <= sp.skip < 1:
        raise SpecError(f"skippipe.skip must be in [0, 1), got {sp.skip}")
    fail = sp.fail_node
    if fail >= 0 and (fail >= layout.world or fail < counts[0]):
        raise SpecError(
            f"skippipe.fail_node={fail} must be a node of a stage of blocks "
            f"({counts[0]}…{layout.world - 1}); data nodes hold the loss"
        )
    kill = killed_node(config)
    for what, node in ((f"skippipe.fail_node={fail}", fail), (f"fault.kill_rank={kill}", kill)):
        if node is not None and node >= counts[0] and len(counts) == 2 and counts[1] == 1:
            raise SpecError(
                f"{what}: node {node} is the only node of the only stage of blocks; "
                "no path would have a block left"
            )
    check_kill(config, counts, layout)
    slow = sp.slow_nodes
    for part in str(slow).split("-"):
        if part.strip() and not (part.strip().isdigit() and int(part) < layout.world):
            raise SpecError(
                f"emulate.slow_nodes={slow!r} must list ranks below {layout.world} (e.g. '2')"
            )
    if sp.slowdown < 1:
        raise SpecError(f"emulate.slowdown must be >= 1, got {sp.slowdown}")
    global_batch, micro = config.data.global_batch, config.data.micro_batch
    if global_batch % micro:
        raise SpecError(
            f"data.global_batch={global_batch} is not a multiple of data.micro_batch={micro}"
        )


def killed_node(config: Config) -> int | None:
    """The rank ``fault.kill_rank`` kills (None: none, or not ``R@S``, which the fault
    section's own check refuses)."""
    fault = getattr(config, "fault", None)
    rank, at, _ = (fault.kill_rank.strip() if fault is not None else "").partition("@")
    return int(rank) if at and rank.strip().isdigit() else None


def check_kill(config: Config, counts: tuple[int, ...], layout: Layout) -> None:
    """SpecError for a SkipPipe node killed where its survivors cannot carry on: a data node
    (it holds the embedding, the loss and its microbatches), a rank beyond the run, a run to a
    target (its evaluations are not made to survive a death), several nodes (a kill beside
    ``skippipe.fail_node``)."""
    node = killed_node(config)
    if node is None:
        return
    text = config.fault.kill_rank.strip()
    sp: SkipPipeSettings = config.skippipe
    if node >= layout.world:
        raise SpecError(
            f"fault.kill_rank={text}: rank {node} is beyond the run's {layout.world} ranks"
        )
    if node < counts[0]:
        raise SpecError(
            f"fault.kill_rank={text}: rank {node} is a data node of skippipe.stages="
            f"{sp.stages} (0…{counts[0] - 1}: they hold the loss); kill a node of a stage "
            "of blocks"
        )
    if config.train.until != "window":
        raise SpecError(f"fault.kill_rank={text}: a SkipPipe kill needs train.until=window")
    if config.run.nnodes != 1:
        raise SpecError(f"fault.kill_rank={text}: a SkipPipe kill runs on one node (nnodes=1)")
    if sp.fail_node >= 0:
        raise SpecError(
            f"fault.kill_rank={text}: one failure per run; leave skippipe.fail_node at -1"
        )
