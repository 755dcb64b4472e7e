"""Planning without torch: estimates of what a configuration needs before it runs (memory,
time), so the launcher can refuse what cannot fit. The hybrid-parallelism planner (cost model,
layout search, calibration) grows here and reuses the same memory model."""
