"""The launcher's side of running configurations: what the ``greenbench run`` process does.

It resolves each configuration for this machine, checks up front what must hold, plans GPU power
limits and per-rank CPU quotas, chooses each configuration's runner once (`runners`: torchrun
ranks, or SkipPipe's simulator), stores the run record the runner returns, and shows progress.
It is the only writer of the database.

The side each rank runs is `greenbench.rank`: a separate process, so a separate package, which
imports nothing from here (the import-linter layers in ``pyproject.toml`` hold it to that). Two
top-level packages rather than two halves of one, because they sit on different layers: a rank
drives the strategies and models below it, and the launcher sits above the ranks it starts.
"""
