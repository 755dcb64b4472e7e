-- Schema version 16: the git branch a run was started on, beside its commit, so that history
-- is drawn per branch as well as per commit. NULL: started outside a checkout, on a detached
-- HEAD that no CI variable named, or stored before this version.
ALTER TABLE runs ADD COLUMN git_branch VARCHAR;
COMMENT ON COLUMN runs.git_branch IS 'the git branch checked out where the run started (a detached HEAD: the branch the CI named); NULL: unknown';
