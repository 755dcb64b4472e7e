"""greenbench: energy-aware benchmarking of LLM training workloads."""

__version__ = "0.1.0"
