"""What a SkipPipe run executes in one iteration: each node's stage, each microbatch's path, and
each node's tasks in order.

A path starts at the microbatch's data node (stage 0: embedding, final norm, LM head and loss),
visits some of the other stages, each at one of its nodes, and returns to the data node. The
task order per node comes from the scheduler (`greenbench.planner.skippipe`); `fill_drain_order`
gives the order a full pipeline runs in (GPipe: every forward in microbatch order, then every
backward in reverse) and is what the runner uses for plans without one. Either is deadlock-free
with blocking receives and non-blocking sends, as long as it is consistent with one timeline in
which every task starts after what it receives was sent.

Tasks: on a data node ``E`` (embed a microbatch and send it on), ``L`` (receive the last hop's
activations, loss, backward through the head, send the gradient back) and ``G`` (receive the
gradient of the embeddings and finish backward); on a stage node ``F`` (forward) and ``B``
(backward).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Plan:
    """One iteration's plan (see the module docstring). ``stage_nodes[s]`` are the nodes that
    hold stage ``s`` (``0``: data nodes); ``paths[m]`` the nodes microbatch ``m`` visits after
    its data node ``data_node[m]``, in order; ``order[n]`` node ``n``'s tasks ``(kind, m)``."""

    stage_nodes: tuple[tuple[int, ...], ...]
    paths: tuple[tuple[int, ...], ...]
    data_node: tuple[int, ...]
    order: dict[int, tuple[tuple[str, int], ...]]

    @property
    def nodes(self) -> int:
        return sum(len(n) for n in self.stage_nodes)

    def stage_of(self, node: int) -> int:
        for stage, nodes in enumerate(self.stage_nodes):
            if node in nodes:
                return stage
        raise KeyError(f"node {node} holds no stage")

    def route(self, m: int) -> tuple[int, ...]:
        """Every node microbatch ``m`` passes, data node at both ends."""
        return (self.data_node[m], *self.paths[m], self.data_node[m])

    def visited_fraction(self, layers_of: dict[int, int], total_layers: int) -> float:
        """The share of the model's blocks an average microbatch runs through."""
        seen = [sum(layers_of[self.stage_of(n)] for n in path) for path in self.paths]
        return sum(seen) / (len(seen) * total_layers) if seen else 0.0

    def visited_share(
        self, layers_of: dict[int, int], total_layers: int, tokens: list[int] | tuple[int, ...]
    ) -> float:
        """The share of the iteration's (token, block) work its paths ran: microbatch ``m``'s
        ``tokens[m]`` tokens through the blocks of the stages it visits, over every token
        through every block. Microbatches without tokens (padding) weigh nothing; with none
        at all, the plain mean over microbatches (`visited_fraction`)."""
        total = sum(tokens)
        if total <= 0:
            return self.visited_fraction(layers_of, total_layers)
        run = sum(
            t * sum(layers_of[self.stage_of(n)] for n in path)
            for t, path in zip(tokens, self.paths, strict=False)
        )
        return run / (total * total_layers)


def fill_drain_order(
    stage_nodes: tuple[tuple[int, ...], ...],
    paths: tuple[tuple[int, ...], ...],
    data_node: tuple[int, ...],
) -> Plan:
    """The plan's tasks in fill-drain (GPipe) order on every node."""
    order: dict[int, list[tuple[str, int]]] = {n: [] for nodes in stage_nodes for n in nodes}
    count = len(paths)
    for m in range(count):
        order[data_node[m]].append(("E", m))
        for node in paths[m]:
            order[node].append(("F", m))
    for m in range(count):
        order[data_node[m]].append(("L", m))
    for m in reversed(range(count)):
        for node in paths[m]:
            order[node].append(("B", m))
        order[data_node[m]].append(("G", m))
    return Plan(
        stage_nodes=stage_nodes,
        paths=paths,
        data_node=data_node,
        order={n: tuple(tasks) for n, tasks in order.items()},
    )
