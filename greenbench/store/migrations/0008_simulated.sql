-- Schema version 8: whether a run was simulated (SkipPipe's discrete-event simulator,
-- skippipe.mode = "simulate") rather than measured on a device. A simulated run's energy is
-- modelled (energy_source 'model', energy_measured false); no view or comparison mixes it with
-- measurements, and the leaderboard leaves it out. Every run stored before this version ran on
-- a device (the launcher had no simulated path), so they are marked false; readers treat NULL
-- as false too.
ALTER TABLE runs ADD COLUMN simulated BOOLEAN;
UPDATE runs SET simulated = FALSE;
