"""Schema migrations: ``NNNN_name.sql`` (SQL) or ``NNNN_name.py`` (its ``apply(con)``) takes a
database from version NNNN − 1 to NNNN (`greenbench.store.writer`)."""

from __future__ import annotations
