"""The α–β model of communication time, in seconds, and the pipeline bubble.

A message of ``n`` bytes over a link costs ``α + n·β``: ``α`` the latency per message (s),
``β`` the inverse bandwidth (s/byte). For ring collectives over ``p`` ranks, with ``n`` the size
of the whole buffer (Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication
Operations in MPICH", IJHPCA 2005; NCCL's bus-bandwidth convention):

* point to point: ``α + n·β``
* all-gather, reduce-scatter: ``(p−1)·α + (p−1)/p · n·β``
* all-reduce (a reduce-scatter then an all-gather): twice that, ``2(p−1)·α + 2(p−1)/p · n·β``
* a 1F1B or GPipe pipeline of ``p`` stages and ``m`` microbatches idles the fraction
  ``(p−1)/(m+p−1)`` of its time (the bubble; Huang et al., GPipe, 2019; Narayanan et al.,
  Megatron-LM, SC21).

`Link` names one (α, β) pair: the fast domain (NVLink) or the network beyond it. A group whose
ranks all sit in one fast domain uses the fast link, any other the network (a ring is as slow as
its slowest hop). Default latencies are **assumed**: 5 µs on NVLink and 15 µs across the network
(orders of NCCL's measured small-message latencies); bandwidths come from the GPU table
(`greenbench.hardware.gpus`). ``greenbench plan --calibrate`` fits both from stored runs.
"""

from __future__ import annotations

from dataclasses import dataclass

FAST_ALPHA_S = 5e-6  # assumed NVLink latency per message
NETWORK_ALPHA_S = 15e-6  # assumed network latency per message

#: the operations the model prices (the ``op`` names of stored communication records)
OPS = ("send", "recv", "all_gather", "reduce_scatter", "all_reduce")


@dataclass(frozen=True, slots=True)
class Link:
    """One kind of link: latency per message ``alpha_s`` (s) and ``beta_s_per_byte`` (s/B)."""

    alpha_s: float
    beta_s_per_byte: float

    @classmethod
    def of_bandwidth(cls, alpha_s: float, bytes_per_s: float) -> Link:
        return cls(alpha_s, 1.0 / bytes_per_s)


def coefficients(op: str, p: int) -> tuple[float, float]:
    """(multiplier of α, multiplier of n·β) of one ``op`` over ``p`` ranks (module docstring)."""
    if op in ("send", "recv"):
        return 1.0, 1.0
    if p <= 1:
        return 0.0, 0.0
    if op in ("all_gather", "reduce_scatter"):
        return float(p - 1), (p - 1) / p
    if op == "all_reduce":
        return 2.0 * (p - 1), 2.0 * (p - 1) / p
    raise ValueError(f"no α–β formula for op {op!r}; known: {', '.join(OPS)}")


def seconds(op: str, n_bytes: float, p: int, link: Link, calls: int = 1) -> float:
    """Time of ``calls`` calls of ``op`` moving buffers of ``n_bytes`` in all among ``p`` ranks
    over ``link`` (each call pays the latency; the bytes are paid once)."""
    a, b = coefficients(op, p)
    return calls * a * link.alpha_s + b * n_bytes * link.beta_s_per_byte


def point_to_point(n_bytes: float, link: Link) -> float:
    return seconds("send", n_bytes, 2, link)


def all_gather(n_bytes: float, p: int, link: Link, calls: int = 1) -> float:
    return seconds("all_gather", n_bytes, p, link, calls)


def reduce_scatter(n_bytes: float, p: int, link: Link, calls: int = 1) -> float:
    return seconds("reduce_scatter", n_bytes, p, link, calls)


def all_reduce(n_bytes: float, p: int, link: Link, calls: int = 1) -> float:
    return seconds("all_reduce", n_bytes, p, link, calls)


def bubble_fraction(stages: int, microbatches: int) -> float:
    """Share of a pipeline's time its stages idle: ``(p−1)/(m+p−1)``."""
    if stages < 1 or microbatches < 1:
        raise ValueError("a pipeline needs at least one stage and one microbatch")
    return (stages - 1) / (microbatches + stages - 1)
