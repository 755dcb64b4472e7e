"""Measuring a user's own code: ``greenbench.measure`` around their training loop (`session`),
and ``greenbench measure -- COMMAND`` around a whole process (`command`); both store runs like
the launcher's (`record`)."""
