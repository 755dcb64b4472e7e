"""Schema migrations: ``NNNN_name.sql`` (SQL) or ``NNNN_name.py`` (its ``apply(con)``) takes a
database from version NNNN − 1 to NNNN (`greenbench.store.writer`)."""

from __future__ import annotations

#: numbers held for a migration whose file is not here yet: until it lands, each is a step that
#: changes nothing, so that the numbers after it apply in order (its file, once here, is used)
RESERVED: frozenset[int] = frozenset({15})
