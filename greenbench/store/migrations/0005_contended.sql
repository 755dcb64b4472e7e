-- Schema version 5: whether the machine was shared while a run ran (another greenbench run, or
-- other processes keeping the CPU busy); NULL for runs stored before this version (unknown).
ALTER TABLE runs ADD COLUMN contended BOOLEAN;
