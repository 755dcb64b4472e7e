"""Hybrid layouts: DP × TP × PP × CP over one device mesh (`strategy.Hybrid`), and its torch-free
settings check (`checks`)."""
