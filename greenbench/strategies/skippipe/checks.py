"""What a SkipPipe run needs of its settings and layout (without torch: the spec runs it): its
nodes per stage (`parse_nodes`), a layer per stage of blocks, and the emulated links and nodes.
The model's layers are read from its torch-free card (`greenbench.models`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from greenbench.errors import SpecError
from greenbench.models import model_preset
from greenbench.plan.skippipe.topology import PUBLISHED_STAGE_SIZES
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


def validate_published(settings: Mapping[str, Any], counts: tuple[int, ...]) -> None:
    """A simulated run on ``skippipe.network = "gcp12"``: SkipPipe's published 20-node,
    6-stage experiment, so its stages and no failing node (the slow nodes may be any of its
    20)."""
    if counts != PUBLISHED_STAGE_SIZES:
        published = "-".join(str(c) for c in PUBLISHED_STAGE_SIZES)
        raise SpecError(
            f"skippipe.network=gcp12 simulates SkipPipe's published 20-node experiment: it needs "
            f"skippipe.stages={published}, got {settings['skippipe.stages']}"
        )
    if not 0 <= settings["skippipe.skip"] < 1:
        raise SpecError(f"skippipe.skip must be in [0, 1), got {settings['skippipe.skip']}")
    if settings["skippipe.fail_node"] >= 0:
        raise SpecError("skippipe.fail_node is not simulated on skippipe.network=gcp12")
    nodes = sum(counts)
    slow = settings["emulate.slow_nodes"]
    for part in str(slow).split("-"):
        if part.strip() and not (part.strip().isdigit() and int(part) < nodes):
            raise SpecError(f"emulate.slow_nodes={slow!r} must list nodes below {nodes} (e.g. '2')")
    if settings["emulate.slowdown"] < 1:
        raise SpecError(f"emulate.slowdown must be >= 1, got {settings['emulate.slowdown']}")


def check_skippipe(settings: Mapping[str, Any], layout: Layout) -> None:
    """SpecError for stages, links or nodes a SkipPipe run cannot have."""
    counts = parse_nodes(settings["skippipe.stages"])
    if settings["skippipe.mode"] == "simulate":
        if settings["energy.source"] != "auto":
            raise SpecError(
                f"energy.source={settings['energy.source']}: a simulated run reads no meter "
                "(its energy is modelled at assumed watts); leave energy.source=auto"
            )
        if settings["skippipe.network"] == "gcp12":
            validate_published(settings, counts)
            return
    elif settings["skippipe.network"] != "local":
        raise SpecError(
            f"skippipe.network={settings['skippipe.network']} is simulated only: add "
            "--set skippipe.mode=simulate (a real run's nodes are this machine's ranks)"
        )
    if sum(counts) != layout.world:
        raise SpecError(
            f"skippipe.stages={settings['skippipe.stages']} places {sum(counts)} nodes but "
            f"the run has {layout.world} ranks"
        )
    blocks = len(counts) - 1
    layers = model_preset(settings["model.family"], settings["model.size"]).n_layers
    if layers < blocks:
        raise SpecError(
            f"skippipe.stages={settings['skippipe.stages']} has {blocks} stages of blocks "
            f"but the model has {layers} layers"
        )
    if not 0 <= settings["skippipe.skip"] < 1:
        raise SpecError(f"skippipe.skip must be in [0, 1), got {settings['skippipe.skip']}")
    fail = settings["skippipe.fail_node"]
    if fail >= 0 and (fail >= layout.world or fail < counts[0]):
        raise SpecError(
            f"skippipe.fail_node={fail} must be a node of a stage of blocks "
            f"({counts[0]}…{layout.world - 1}); data nodes hold the loss"
        )
    slow = settings["emulate.slow_nodes"]
    for part in str(slow).split("-"):
        if part.strip() and not (part.strip().isdigit() and int(part) < layout.world):
            raise SpecError(
                f"emulate.slow_nodes={slow!r} must list ranks below {layout.world} (e.g. '2')"
            )
    if settings["emulate.slowdown"] < 1:
        raise SpecError(f"emulate.slowdown must be >= 1, got {settings['emulate.slowdown']}")
    global_batch, micro = settings["data.global_batch"], settings["data.micro_batch"]
    if global_batch % micro:
        raise SpecError(
            f"data.global_batch={global_batch} is not a multiple of data.micro_batch={micro}"
        )
