"""SkipPipe: pipeline parallelism whose microbatches skip stages along scheduled paths (the
strategy, `strategy.SkipPipe`; its plans and routes), and its torch-free settings check
(`checks`)."""
