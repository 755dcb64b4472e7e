-- Schema version 14: fault-tolerant training (checkpoints, injected failures, restarts).
-- results: per repeat of a fault-tolerant run, the failures it survived, every measured token
-- it trained (work redone after a restart included; tokens counts each step once), goodput
-- (tokens / tokens_trained), the work redone and the restarts in seconds (wall clock) and
-- joules (summed over the ranks' meters), energy_lost_j (redone_j + restart_j), and its
-- checkpoints: how many, the seconds training waited for them, their joules and bytes. Every
-- other run (and every run stored before this version) has them NULL.
-- run_events: one row per event of a run (a checkpoint saved or loaded, a failure, a restart,
-- work redone, a dead node detected or routed around), in the order they happened.
ALTER TABLE results ADD COLUMN failures INTEGER;
ALTER TABLE results ADD COLUMN tokens_trained BIGINT;
ALTER TABLE results ADD COLUMN goodput DOUBLE;
ALTER TABLE results ADD COLUMN redone_s DOUBLE;
ALTER TABLE results ADD COLUMN redone_j DOUBLE;
ALTER TABLE results ADD COLUMN restart_s DOUBLE;
ALTER TABLE results ADD COLUMN restart_j DOUBLE;
ALTER TABLE results ADD COLUMN energy_lost_j DOUBLE;
ALTER TABLE results ADD COLUMN ckpt_count INTEGER;
ALTER TABLE results ADD COLUMN ckpt_s DOUBLE;
ALTER TABLE results ADD COLUMN ckpt_j DOUBLE;
ALTER TABLE results ADD COLUMN ckpt_bytes BIGINT;
CREATE TABLE IF NOT EXISTS run_events (
    run_id   VARCHAR NOT NULL,
    repeat   INTEGER NOT NULL,
    seq      INTEGER NOT NULL,   -- the event's place in the run, from 0
    kind     VARCHAR NOT NULL,   -- checkpoint | load | failure | restart | redone | detected | rerouted
    step     BIGINT,             -- measured steps completed when it happened (warm-up not counted)
    rank     INTEGER,            -- the rank it concerns; NULL: the run's ranks together
    t_s      DOUBLE,             -- seconds from the run's first measured step
    seconds  DOUBLE,             -- its duration, wall clock (the slowest rank's)
    joules   DOUBLE,             -- summed over the ranks' meters; NULL: unknown
    tokens   BIGINT,             -- tokens it concerns (work redone, iterations affected)
    bytes    BIGINT,             -- bytes it wrote or read (a checkpoint)
    note     VARCHAR,            -- what is estimated or left out
    PRIMARY KEY (run_id, repeat, seq)
);
COMMENT ON COLUMN results.failures IS 'failures a fault-tolerant run survived; NULL: not a fault-tolerant run';
COMMENT ON COLUMN results.tokens_trained IS 'every measured token trained, work redone after a restart included';
COMMENT ON COLUMN results.goodput IS 'tokens / tokens_trained: the share of trained tokens that were not redone';
COMMENT ON COLUMN results.redone_s IS 'seconds of measured steps trained again after a restart (the lost ones)';
COMMENT ON COLUMN results.redone_j IS 'joules of the lost steps, summed over the ranks'' meters';
COMMENT ON COLUMN results.restart_s IS 'seconds from a failure to training again (detection, restart, loading)';
COMMENT ON COLUMN results.restart_j IS 'joules the restarted ranks spent before training again; the unmetered gap is in run_events.note';
COMMENT ON COLUMN results.energy_lost_j IS 'redone_j + restart_j: what the failures cost';
COMMENT ON COLUMN results.ckpt_count IS 'checkpoints saved';
COMMENT ON COLUMN results.ckpt_s IS 'seconds training waited for its checkpoints (the slowest rank''s, summed)';
COMMENT ON COLUMN results.ckpt_j IS 'joules of those seconds, summed over the ranks'' meters';
COMMENT ON COLUMN results.ckpt_bytes IS 'bytes the checkpoints wrote, all of them';
