-- Schema version 2: what a user needs to see why a run failed, or what went wrong without
-- losing its result (reliability issue, item 0).
ALTER TABLE runs ADD COLUMN warnings JSON;       -- list of texts: e.g. a rank that crashed at exit after the results were gathered
ALTER TABLE runs ADD COLUMN error_tail VARCHAR;  -- the failing rank's last lines of output
ALTER TABLE runs ADD COLUMN log_path VARCHAR;    -- folder where the run's worker logs were kept (failed or warned runs)
