"""The 12-region network SkipPipe was scheduled and simulated on: latency and bandwidth between
Google Cloud regions.

Source: the figures of SkipPipe's scheduler and simulator (Blagoev et al., "SkipPipe: Partial
and Reordered Pipelining Framework for Training LLMs in Heterogeneous Networks", 2025; code
gensyn-ai/skippipe, ``schedulers/communication_costs.py``), measured between GCP regions.
Latencies are in ms; bandwidths are written here in MiB/s, the unit they were measured in (every
figure of the source, in GiB/s, is one of these over 1024 exactly), and served in GiB/s.

A message of ``n`` bytes from region A to region B takes
``latency_ms / 1000 + n / (bandwidth_gib_s · 1024³)`` seconds (`link_delay_s`). Two nodes in one
region talk at 1 ms and 2.0 GiB/s, as in the source.

**NL–London.** The source gives NL–London 0.00023681640625 GiB/s, about 1000× below every other
European pair; that is 0.2425 MiB/s, the figure of Belgium–London, Belgium–NL and Germany–NL in
GiB/s (0.2425) written in the wrong unit. We correct it to 0.2425 GiB/s by default (a 33.5 MB
activation would otherwise take 132 s on one hop, which only measures the typo);
``gcp_network(published_nl_london=True)`` keeps the published figure, with which the published
schedule was generated (its allocation avoids every NL–London hop).

Why our own: no kept library carries this matrix or a link model of skip pipelines; the data are
the paper's, the code is small.
"""

from __future__ import annotations

from dataclasses import dataclass

#: (region A, region B, latency ms, bandwidth MiB/s), the source's pairs (symmetric)
_PAIRS = """
Australia  Belgium       129      10.0625
Australia  Canada         98         13.5
Australia  Germany     125.5      10.7125
Australia  Iowa           84         11.5
Australia  Japan          58       14.125
Australia  LA             69           15
Australia  NL            128         9.75
Australia  Oregon         68           15
Australia  Singapore      48         30.5
Australia  Taiwan         67         21.5
Australia  London        132        9.625
Belgium    Canada         41       20.375
Belgium    Germany         4       248.32
Belgium    Iowa           49           29
Belgium    Japan         112           12
Belgium    LA             70       19.875
Belgium    NL              3       248.32
Belgium    Oregon         66       21.375
Belgium    Singapore      83         16.5
Belgium    Taiwan        105        12.75
Belgium    London        3.5       248.32
Canada     Germany        44       32.625
Canada     Iowa           14         77.5
Canada     Japan          74         18.5
Canada     LA             35        31.25
Canada     NL             42       25.625
Canada     Oregon       30.5        48.25
Canada     Singapore     107  12.22499328
Canada     Taiwan         89      15.0625
Canada     London       38.5        37.25
Germany    Iowa         53.5        27.25
Germany    Japan         112        11.35
Germany    LA             73      18.6875
Germany    NL            3.5       248.32
Germany    Oregon         68       15.275
Germany    Singapore      80         12.8
Germany    Taiwan        102       12.875
Germany    London        6.6       193.28
Iowa       Japan        72.5      14.3125
Iowa       LA           23.4      62.9375
Iowa       NL             51      28.0625
Iowa       Oregon       19.3         92.5
Iowa       Taiwan         88      13.1072
Iowa       Singapore   101.5      12.9375
Iowa       London       48.1       22.375
Japan      LA             50      28.4375
Japan      NL          108.5        11.65
Japan      Oregon       46.2      31.1875
Japan      Singapore    35.6      39.9375
Japan      Taiwan       19.2      78.5625
Japan      London        107          9.1
LA         NL           71.5     14.59375
LA         Oregon       12.4      121.375
LA         Singapore    79.5        17.25
LA         Taiwan         64     16.58125
LA         London         68       15.275
NL         Oregon         67       20.875
NL         Singapore    81.5        16.75
NL         Taiwan      105.5        12.25
NL         London        4.8       0.2425
Oregon     Singapore    78.5      17.1875
Oregon     Taiwan       59.5       23.875
Oregon     London         64        21.75
Singapore  Taiwan       23.2       63.375
Singapore  London         85      16.0625
Taiwan     London      109.5        9.175
"""

REGIONS = (
    "Australia", "Belgium", "Canada", "Germany", "Iowa", "Japan",
    "LA", "NL", "Oregon", "Singapore", "Taiwan", "London",
)  # fmt: skip
INTRA_REGION_LATENCY_MS = 1.0
INTRA_REGION_BANDWIDTH_GIB_S = 2.0
NL_LONDON_CORRECTED_GIB_S = 0.2425
NL_LONDON_PUBLISHED_GIB_S = 0.2425 / 1024  # 0.00023681640625, the published figure
GIB = 1024**3


def link_delay_s(latency_ms: float, bandwidth_gib_s: float, n_bytes: float) -> float:
    """Seconds a message of ``n_bytes`` takes over a link of ``latency_ms`` and
    ``bandwidth_gib_s``: latency plus size over bandwidth."""
    return latency_ms / 1000.0 + n_bytes / (bandwidth_gib_s * GIB)


@dataclass(frozen=True, slots=True)
class Network:
    """Latency (ms) and bandwidth (GiB/s) between every pair of ``regions`` (symmetric), and
    within one region."""

    regions: tuple[str, ...]
    latency_ms: tuple[tuple[float, ...], ...]
    bandwidth_gib_s: tuple[tuple[float, ...], ...]

    def index(self, region: str) -> int:
        try:
            return self.regions.index(region)
        except ValueError:
            raise ValueError(
                f"unknown region {region!r}; known: {', '.join(self.regions)}"
            ) from None

    def link(self, a: str, b: str) -> tuple[float, float]:
        """(latency ms, bandwidth GiB/s) between regions ``a`` and ``b``."""
        i, j = self.index(a), self.index(b)
        return self.latency_ms[i][j], self.bandwidth_gib_s[i][j]

    def delay_s(self, a: str, b: str, n_bytes: float) -> float:
        """Seconds ``n_bytes`` take from region ``a`` to region ``b``."""
        return link_delay_s(*self.link(a, b), n_bytes)


def gcp_network(*, published_nl_london: bool = False) -> Network:
    """The 12 GCP regions of SkipPipe's experiments; NL–London corrected unless
    ``published_nl_london`` (module docstring)."""
    n = len(REGIONS)
    latency = [[INTRA_REGION_LATENCY_MS] * n for _ in range(n)]
    bandwidth = [[INTRA_REGION_BANDWIDTH_GIB_S] * n for _ in range(n)]
    for line in _PAIRS.strip().splitlines():
        a, b, ms, mib_s = line.split()
        i, j = REGIONS.index(a), REGIONS.index(b)
        latency[i][j] = latency[j][i] = float(ms)
        bandwidth[i][j] = bandwidth[j][i] = float(mib_s) / 1024
    if not published_nl_london:
        i, j = REGIONS.index("NL"), REGIONS.index("London")
        bandwidth[i][j] = bandwidth[j][i] = NL_LONDON_CORRECTED_GIB_S
    return Network(
        regions=REGIONS,
        latency_ms=tuple(map(tuple, latency)),
        bandwidth_gib_s=tuple(map(tuple, bandwidth)),
    )


def uniform_network(
    regions: tuple[str, ...] = ("local",),
    *,
    latency_ms: float = INTRA_REGION_LATENCY_MS,
    bandwidth_gib_s: float = INTRA_REGION_BANDWIDTH_GIB_S,
) -> Network:
    """Every pair of ``regions`` (and each region with itself) at the same latency and
    bandwidth: one cluster, or a test's hand-computable network."""
    n = len(regions)
    return Network(
        regions=tuple(regions),
        latency_ms=tuple((float(latency_ms),) * n for _ in range(n)),
        bandwidth_gib_s=tuple((float(bandwidth_gib_s),) * n for _ in range(n)),
    )
