"""SkipPipe without torch: schedules whose microbatches skip and reorder pipeline stages, and a
discrete-event simulator to rank them and to report scales this machine cannot run
(docs/skippipe.md).

* `network`: the 12-region GCP latency/bandwidth matrix SkipPipe used, and the link model.
* `topology`: nodes, regions, stages and speeds (`Topology`); the published 20-node setup and
  the 4-node one a real run uses.
* `schedule`: the `Schedule` value (paths, per-node orders) and the rules it must keep.
* `paths`: even stage shares and cheapest paths (no time); `planner`: collision avoidance, a
  time-aware A* into a reservation table.
* `scheduler`: the four schedules of SkipPipe's comparison (full pipeline, random skip, SkipPipe
  without and with collision avoidance).
* `simulator`: one iteration's timeline, busy and idle seconds, modelled energy.
"""
