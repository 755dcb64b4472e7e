"""Facts about the hardware a run has: what it is (the fingerprint stored with every run), what
it can do (device peaks for MFU: GPU datasheet figures, a measured CPU GEMM calibration), and
where machine-level caches live. Import the module you need: ``gpus``, ``machine`` and
``peak_cache`` import no torch (the planner reads the GPU table too, a dry run the cached CPU
peaks); ``cpu_peak`` and ``fingerprint`` do."""
