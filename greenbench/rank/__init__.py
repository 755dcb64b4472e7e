"""The rank's side of running a configuration: what each rank process does.

``python -m greenbench.rank.worker`` is one rank: it joins its CPU quota group, builds the mesh,
the model and the strategy, warms up and measures its windows with its meters, and hands its
results to the launcher in files. Beside the worker are what it is made of (the window's tally,
the mesh, the meters, the model-state count, an emulated GPU) and what the launcher shares with
the ranks (the contention watch, hang diagnosis): the launcher may import from here.

Nothing here imports the launcher's side (`greenbench.launcher`, held to that by the import-linter
layers in ``pyproject.toml``): a rank knows its settings and its peers, never the suite, the
database or the other configurations.
"""
