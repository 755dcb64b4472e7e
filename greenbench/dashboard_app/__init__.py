"""The Streamlit dashboard over the results database (run it with `greenbench dashboard`).

It lives inside the package, not only in the top-level ``dashboard/`` folder, so that an installed
greenbench ships it; ``dashboard/app.py`` is a shim for ``streamlit run dashboard/app.py``.
Modules: ``app`` (the script: sidebar and tabs), ``data`` (cached read-only queries), ``filters``,
``marking`` (how estimates, missing values and headings are shown), ``charts`` (Altair), and one
module per group of views (``apart_views``: simulated and emulated runs and own measurements,
kept off the leaderboard and shown apart).
"""
