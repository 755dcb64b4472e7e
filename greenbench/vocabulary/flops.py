"""The two conventions model FLOPs (and so MFU) are counted under, and which one views show.

* **PaLM** (``palm``): attention over every key of the row, the masked half of causal attention
  included, as the PaLM paper's appendix B counts it and torchtitan and Megatron-LM report MFU.
  Stored as ``results.flops`` / ``results.mfu`` (and ``rank_results.flops``), for every run
  since the first schema version.
* **causal** (``causal``): the FLOPs a causal model needs, as FlashAttention reports: attention's
  score and weighted-sum FLOPs scaled, row by row, by the query–key pairs a document-causal mask
  keeps, the sum over the row's documents of ``len·(len+1)/2`` divided by ``S²`` (``S`` the
  row's width). Stored as ``results.flops_causal`` / ``results.mfu_causal`` from schema version
  12 on; NULL for runs stored before, and for a user's workload, whose FLOPs are given or
  counted whole (`torch.utils.flop_counter.FlopCounterMode` never discounts causality).

Only attention is discounted: Mamba's selective scan and Mamba-2's SSD scan have no causal
discount (their counts are the work their recurrences do, the same under either convention),
so a Mamba run's two counts are equal and a Transformer's differ by its attention's masked part.

Every view shows `SHOWN` unless it says otherwise, and names it in its header (`mfu_header`):
families are compared on one convention. The default is PaLM's: every stored run has it
(databases older than the causal count, a user's workloads), and it is the MFU torchtitan and
Megatron-LM publish.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FlopsConvention:
    """One convention: its name, its short label in headers, the stored columns it fills."""

    name: str
    label: str
    flops_column: str
    mfu_column: str
    doc: str


PALM = FlopsConvention(
    "palm", "PaLM", "flops", "mfu",
    "full attention: every key of the row, the causal mask's masked half included "
    "(PaLM appendix B; torchtitan, Megatron-LM)",
)  # fmt: skip
CAUSAL = FlopsConvention(
    "causal", "causal", "flops_causal", "mfu_causal",
    "attention over the keys a document-causal mask keeps, "
    "sum of len·(len+1)/2 over a row's documents out of S² (FlashAttention)",
)  # fmt: skip

#: every convention, by name
FLOPS_CONVENTIONS: dict[str, FlopsConvention] = {c.name: c for c in (PALM, CAUSAL)}
#: the convention every view shows unless asked otherwise (module docstring)
SHOWN = PALM


def mfu_header(convention: FlopsConvention = SHOWN, unit: str = "") -> str:
    """A header naming the convention: ``MFU (PaLM)``, ``MFU % (causal)``."""
    return f"MFU{' ' + unit if unit else ''} ({convention.label})"


def flops_header(convention: FlopsConvention = SHOWN) -> str:
    """``FLOPs (PaLM)``, ``FLOPs (causal)``."""
    return f"FLOPs ({convention.label})"
