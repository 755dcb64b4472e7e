"""The suites greenbench ships (``*.toml`` package data): ``greenbench run --suite NAME``."""
