"""An emulated network link for data-parallel collectives on one host (``emulate.link_latency_ms``,
``emulate.link_bandwidth_gbps``): what a collective would take between nodes, added to it.

Ranks on one host exchange bytes through memory, so what a method saves in communication
barely shows there. With a link set, a data-parallel collective of ``nbytes`` per rank is made
to last as long as it would on a ring of ``world`` nodes joined by that link: a ring all-reduce
sends ``2 (world - 1)`` messages of ``nbytes / world`` in turn, each paying the latency and its
bytes over the bandwidth (`EmulatedLink.all_reduce_s`). The delay is spent after the real
collective completes, inside the call's recorded time, so it counts as communication (and the
idle host's lower load as the energy a waiting node would draw). Runs with a link are labelled
emulated (`EmulatedLink.label`).

Why our own: torch has no network emulation, and tc/netem needs privileges and does not
touch shared-memory or loopback transfers the way a slow wide-area link would.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from greenbench.config import Config


@dataclass(frozen=True, slots=True)
class EmulatedLink:
    """A link's latency (seconds per message) and bandwidth (bytes per second; 0: unlimited)."""

    latency_s: float = 0.0
    bytes_per_s: float = 0.0

    @classmethod
    def of(cls, config: Config) -> EmulatedLink:
        """The run's emulated link (``emulate.link_*``; inactive when neither is set)."""
        link = config.skippipe
        if link is None:
            return cls()
        gbps = float(link.link_bandwidth_gbps)
        return cls(float(link.link_latency_ms) / 1000.0, gbps * 1e9 / 8.0 if gbps > 0 else 0.0)

    @property
    def active(self) -> bool:
        return self.latency_s > 0 or self.bytes_per_s > 0

    def message_s(self, nbytes: int) -> float:
        """One message of ``nbytes`` over the link."""
        transfer = nbytes / self.bytes_per_s if self.bytes_per_s > 0 else 0.0
        return self.latency_s + transfer

    def all_reduce_s(self, nbytes: int, world: int) -> float:
        """A ring all-reduce of ``nbytes`` per rank over ``world`` nodes: ``2 (world - 1)``
        messages of ``nbytes / world`` each (reduce-scatter, then all-gather)."""
        if world <= 1 or not self.active:
            return 0.0
        return 2 * (world - 1) * self.message_s(-(-nbytes // world))

    def delay(self, seconds: float) -> float:
        """Spend ``seconds`` as the link would (the rank idles); returns them."""
        if seconds > 0:
            time.sleep(seconds)
        return max(seconds, 0.0)

    def label(self) -> str:
        """How a run with this link says so: "emulated link 10 ms, 1 Gb/s" ("" if inactive)."""
        if not self.active:
            return ""
        bandwidth = f"{self.bytes_per_s * 8 / 1e9:g} Gb/s" if self.bytes_per_s else "unlimited"
        return f"emulated link {self.latency_s * 1000:g} ms, {bandwidth}"
