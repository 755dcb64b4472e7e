-- Schema version 4: why a repeat's MFU is unknown, or how the peak behind it was re-measured
-- (reliability issue, item 11). An MFU above 1 is impossible: the peak was measured too low (a
-- CPU calibration taken while other processes held cores) or the FLOP count is wrong, so such an
-- MFU is never stored, shown, or clamped to 1: it is unknown, with its reason.
ALTER TABLE results ADD COLUMN mfu_note VARCHAR;
-- Repeats stored before this version with an MFU above 1 keep the number in the note only.
UPDATE results
SET mfu_note = 'MFU unknown: ' || printf('%.0f%%', mfu * 100) || ' of the peak was stored '
        || 'before schema version 4; the peak (e.g. a CPU calibration taken under load) or the '
        || 'FLOP count was wrong: run the configuration again for its MFU',
    mfu = NULL
WHERE mfu > 1;
