-- Schema version 12: model FLOPs and MFU under two named conventions
-- (greenbench/vocabulary/flops.py). The columns stored since version 1 keep their meaning:
-- flops and mfu are PaLM's convention (attention over every key of the row, the causal mask's
-- masked half included, as torchtitan and Megatron-LM report). Beside them, the causal
-- convention (the FLOPs causal attention needs, as FlashAttention reports): attention's score
-- and weighted-sum FLOPs scaled by the query-key pairs a document-causal mask keeps in each
-- packed row, the sum over its documents of len*(len+1)/2 out of S^2. Mamba's and Mamba-2's scans have no causal
-- discount: their two counts are equal. Runs stored before this version, and a user's workloads
-- (FLOPs given or counted whole), have the causal figures NULL: unknown, never guessed.
ALTER TABLE results ADD COLUMN flops_causal DOUBLE;
ALTER TABLE results ADD COLUMN mfu_causal DOUBLE;
ALTER TABLE rank_results ADD COLUMN flops_causal DOUBLE;
COMMENT ON COLUMN results.flops IS 'model FLOPs of the window, PaLM convention (full attention: every key of the row, the causal mask''s masked half included; torchtitan, Megatron-LM)';
COMMENT ON COLUMN results.mfu IS 'MFU from flops: PaLM convention (full attention)';
COMMENT ON COLUMN results.flops_causal IS 'model FLOPs of the window, causal convention (attention over the keys a document-causal mask keeps: sum of len*(len+1)/2 over a row''s documents out of S^2; FlashAttention); NULL: unknown';
COMMENT ON COLUMN results.mfu_causal IS 'MFU from flops_causal: causal convention; NULL: unknown';
COMMENT ON COLUMN rank_results.flops IS 'this rank''s model FLOPs of the window, PaLM convention (full attention)';
COMMENT ON COLUMN rank_results.flops_causal IS 'this rank''s model FLOPs of the window, causal convention; NULL: unknown';
