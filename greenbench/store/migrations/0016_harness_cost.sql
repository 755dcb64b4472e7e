-- Schema version 16: what greenbench itself cost each run, in wall seconds (results.HarnessCost).
-- runs: start-up from the start of the run's turn (a session's first configuration: the
-- greenbench process's start) to its first training step (a whole process: to the command's
-- start); of that, the rank processes' own start (interpreter, imports, model build); the MFU
-- peak's calibration (0: a cached figure); the idle baseline's sampling (0: a baseline reused,
-- with its age when the run began in idle_baseline_age_s; NULL: no baseline); and teardown from
-- the last measured window to the outcome ready to store. Runs stored before this version, and
-- runs that never got there (failed, interrupted, skipped), have them NULL: unknown.
ALTER TABLE runs ADD COLUMN harness_startup_s DOUBLE;
ALTER TABLE runs ADD COLUMN harness_ranks_s DOUBLE;
ALTER TABLE runs ADD COLUMN harness_calibration_s DOUBLE;
ALTER TABLE runs ADD COLUMN harness_baseline_s DOUBLE;
ALTER TABLE runs ADD COLUMN idle_baseline_age_s DOUBLE;
ALTER TABLE runs ADD COLUMN harness_teardown_s DOUBLE;
COMMENT ON COLUMN runs.harness_startup_s IS 'seconds from the start of the run''s turn (first configuration: the greenbench process''s start) to its first training step; a whole process: to the command''s start';
COMMENT ON COLUMN runs.harness_ranks_s IS 'of harness_startup_s, seconds from starting the rank processes to the first step (interpreter, imports, model build)';
COMMENT ON COLUMN runs.harness_calibration_s IS 'seconds measuring the MFU peak for this run (0: a cached figure); a re-measurement after the run is counted too';
COMMENT ON COLUMN runs.harness_baseline_s IS 'seconds sampling idle power for this run (0: a quiet baseline reused; NULL: no baseline)';
COMMENT ON COLUMN runs.idle_baseline_age_s IS 'age in seconds of a reused idle baseline when the run began; NULL: sampled for this run, or none';
COMMENT ON COLUMN runs.harness_teardown_s IS 'seconds from the end of the last measured window to the outcome ready to store';
