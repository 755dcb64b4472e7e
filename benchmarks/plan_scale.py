"""How long `greenbench plan` takes on large device counts, through the real command line.

Runs ``greenbench plan --model-family transformer --size 7b --device-type h100 --devices N`` as
a subprocess (the installed package, ``python -m greenbench``: its imports, parsing, search and
rendering) for each count and prints, per count, the wall time, the exit code, whether it
answered within the goal of 5 s, and the first line of its answer (exit 0) or its refusal:

* 1,048,576 (2^20, about the largest clusters): 1,660 valid layouts, planned;
* 735,134,400 (2^6·3^3·5^2·7·11·13·17, the count up to 2^30 with the most divisors): at the
  default global batch of 512 no layout can take its odd factors, refused;
* the same count at a global batch of 22,972,950, which takes them: 49,888 layouts, the most a
  count of 735,134,400 leaves under the 50,000 a plan prices;
* 1,000,000,007 (a prime): only one-degree layouts, none valid, refused;
* a 23-digit count: above the 2^30 devices a plan is made for, refused.

The search (`greenbench.planner.search`) used to enumerate every ordered factorisation of the
count, looping up to the count itself: 5.4 s for 2^20, 561 s for 1,000,000,007, and no answer
for the 23-digit count. Nothing is asserted here: the times are printed against the goal.

    python benchmarks/plan_scale.py [--quick] [--timeout S]

``--quick`` runs a small count (64) and the 23-digit one only, for a smoke test.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass

GOAL_S = 5.0
COMMAND = ["plan", "--model-family", "transformer", "--size", "7b", "--device-type", "h100"]
#: (--devices, further options) per case
CASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("1048576", ()),
    ("735134400", ()),
    ("735134400", ("--global-batch", "22972950")),
    ("1000000007", ()),
    ("99999999999999999999999", ()),
)
QUICK: tuple[tuple[str, tuple[str, ...]], ...] = (("64", ()), ("99999999999999999999999", ()))


@dataclass(frozen=True, slots=True)
class Timed:
    """One run of the command: its wall time, exit code (None: stopped at the timeout) and the
    first line it printed (the answer's on exit 0, else the refusal's)."""

    devices: str
    options: tuple[str, ...]
    seconds: float
    code: int | None
    first_line: str

    @property
    def within_goal(self) -> bool:
        return self.code is not None and self.seconds <= GOAL_S


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def run_plan(devices: str, options: tuple[str, ...], timeout_s: float) -> Timed:
    """Run `greenbench plan` for ``devices`` devices as its own process and time it."""
    argv = [sys.executable, "-m", "greenbench", *COMMAND, "--devices", devices, *options]
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return Timed(devices, options, time.perf_counter() - start, None,
                     f"no answer within {timeout_s:g} s")  # fmt: skip
    seconds = time.perf_counter() - start
    line = first_line(done.stdout if done.returncode == 0 else done.stderr)
    return Timed(devices, options, seconds, done.returncode, line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small count and a refused one")
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait for one run (default 600)"
    )
    args = parser.parse_args(argv)
    cases = QUICK if args.quick else CASES
    print(f"greenbench {' '.join(COMMAND)} --devices N, one process each; goal ≤ {GOAL_S:g} s")
    header = f"{'--devices':>25} {'options':24} {'wall s':>8} {'exit':>5} {'≤ 5 s':>6}  first line"
    print(header)
    print("-" * len(header))
    for devices, options in cases:
        t = run_plan(devices, options, args.timeout)
        code = "—" if t.code is None else str(t.code)
        verdict = "yes" if t.within_goal else "no"
        print(f"{devices:>25} {' '.join(options):24} {t.seconds:8.2f} {code:>5} {verdict:>6}  "
              f"{t.first_line[:160]}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
