"""ODC, on-demand communication: the strategy (`strategy.ODC`), its units and the transport
between ranks, and its torch-free settings check (`checks`)."""
