-- Schema version 7: model-state memory counted from tensors (greenbench.running.state_memory),
-- beside peak_mem_bytes, which on CPU is the process's peak resident set. Per rank: parameters,
-- gradients and optimizer state after the window's last step, the peak of the bytes autograd
-- held saved for backward during the window, and their sum; per repeat: the most any rank held.
-- NULL for runs stored before this version (not counted).
ALTER TABLE rank_results ADD COLUMN param_bytes BIGINT;
ALTER TABLE rank_results ADD COLUMN grad_bytes BIGINT;
ALTER TABLE rank_results ADD COLUMN optim_bytes BIGINT;
ALTER TABLE rank_results ADD COLUMN activation_bytes BIGINT;
ALTER TABLE rank_results ADD COLUMN state_bytes BIGINT;
ALTER TABLE results ADD COLUMN state_bytes BIGINT;
