-- Schema version 13: runs to a target loss (train.until = target), and seeds pooled.
-- results: per repeat, the absolute target loss, whether the repeat reached it, and only when it
-- did the steps, tokens, seconds and joules (gross, and net of idle by energy_net_j's rule) to
-- it, which are the repeat's own figures (its window is the training up to the target); a target
-- not reached has them NULL, never a figure for a target it did not reach. Beside them the best
-- validation loss, why the run stopped, and the evaluations' own seconds and joules, which no
-- training figure holds. Window runs (every run stored before this version) have all of them
-- NULL: they trained to no target.
-- val_curve: one row per evaluation of a repeat (step, tokens, training seconds and joules so
-- far, the held-out loss).
-- runs: the run's target loss, and seed_group, the hash of the configuration's identity without
-- its seed, so that runs differing only in their seed are pooled over seeds. The store holds no
-- rules of which settings make an identity (the settings do), so runs stored before this version
-- keep it NULL: readers take the seed group another run of the same config_key stored, and where
-- none did, the run's config_key (each such run a seed group of its own, as before).
ALTER TABLE results ADD COLUMN target_loss DOUBLE;
ALTER TABLE results ADD COLUMN target_reached BOOLEAN;
ALTER TABLE results ADD COLUMN steps_to_target BIGINT;
ALTER TABLE results ADD COLUMN tokens_to_target BIGINT;
ALTER TABLE results ADD COLUMN seconds_to_target DOUBLE;
ALTER TABLE results ADD COLUMN energy_to_target_j DOUBLE;
ALTER TABLE results ADD COLUMN energy_to_target_net_j DOUBLE;
ALTER TABLE results ADD COLUMN best_val_loss DOUBLE;
ALTER TABLE results ADD COLUMN target_stopped_by VARCHAR;
ALTER TABLE results ADD COLUMN eval_s DOUBLE;
ALTER TABLE results ADD COLUMN eval_energy_j DOUBLE;
ALTER TABLE runs ADD COLUMN target_loss DOUBLE;
ALTER TABLE runs ADD COLUMN seed_group VARCHAR;
CREATE TABLE IF NOT EXISTS val_curve (
    run_id    VARCHAR NOT NULL,
    repeat    INTEGER NOT NULL,
    step      BIGINT NOT NULL,   -- optimizer steps trained before this evaluation
    tokens    BIGINT NOT NULL,   -- tokens trained so far, all ranks together
    seconds   DOUBLE NOT NULL,   -- seconds of training so far (the slowest rank's), evaluation left out
    joules    DOUBLE,            -- joules of training so far, summed over the ranks' meters; NULL: unknown
    val_loss  DOUBLE NOT NULL,   -- the whole model's loss on the held-out set, nats per token
    PRIMARY KEY (run_id, repeat, step)
);
COMMENT ON COLUMN results.target_loss IS 'the absolute validation loss a run to a target aimed at (nats per token); NULL: a window run';
COMMENT ON COLUMN results.target_reached IS 'whether the repeat''s validation loss reached target_loss';
COMMENT ON COLUMN results.steps_to_target IS 'optimizer steps to the target; NULL unless reached';
COMMENT ON COLUMN results.tokens_to_target IS 'tokens trained to the target (the repeat''s tokens); NULL unless reached';
COMMENT ON COLUMN results.seconds_to_target IS 'training seconds to the target (the repeat''s seconds, evaluation left out); NULL unless reached';
COMMENT ON COLUMN results.energy_to_target_j IS 'gross joules to the target (the repeat''s energy_j); NULL when not reached, or unknown';
COMMENT ON COLUMN results.energy_to_target_net_j IS 'joules to the target net of idle (the repeat''s energy_net_j); NULL when not reached, or unknown';
COMMENT ON COLUMN results.best_val_loss IS 'the lowest validation loss of the repeat, reached or not';
COMMENT ON COLUMN results.target_stopped_by IS 'why the run stopped: reached | max_steps | max_tokens | max_s | max_j';
COMMENT ON COLUMN results.eval_s IS 'seconds of evaluation (the slowest rank''s), outside every training figure';
COMMENT ON COLUMN results.eval_energy_j IS 'joules of evaluation summed over the ranks'' meters, outside every training figure; NULL: unknown';
COMMENT ON COLUMN runs.target_loss IS 'the absolute target loss of a run to a target (its repeats''); NULL: a window run, or no repeat stored';
COMMENT ON COLUMN runs.seed_group IS 'hash of the configuration''s identity without its seed: runs differing only in seed share it; NULL: stored before it was kept';
