"""tinylm: a tiny causal convolutional language model and its synthetic data, the example user
package of greenbench's docs (docs/user-workloads.md)."""

__version__ = "0.1.0"
