"""Facts about the hardware a run has: what it is (the fingerprint stored with every run), what
it can do (device peaks for MFU: GPU datasheet figures, a measured CPU GEMM calibration), and
where machine-level caches live. Import the module you need: ``gpus`` and ``machine`` import no
torch (the planner reads the GPU table too); ``cpu_peak`` and ``fingerprint`` do."""
