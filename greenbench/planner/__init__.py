"""Planning without torch: what a configuration needs before it runs, and which layout to run.

* `estimate`: lower bounds of memory and time, for the launcher's preflight ("refuse what cannot
  fit").
* the layout planner (`greenbench plan`, docs/planner.md), which reads the models' torch-free
  cards (`greenbench.models`: presets, FLOPs, which layouts fit, the families' terms): `comm`
  (α–β), `memory` (the one memory model, whose least terms `estimate` takes),
  `power`, `device` (a GPU type) and `host` (this host's CPU ranks, from its stored runs),
  `cost`, `search` (every valid layout, ranked, its Pareto set), `calibrate` and `measured`
  (stored runs), `render` and `command` (the CLI's one call).
"""
