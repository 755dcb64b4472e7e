"""The one copy of Vega, Vega-Lite and vega-embed a published site carries.

Every page loads ``assets/vega-embed.js`` by a relative ``<script src>`` (a classic script, which
a browser runs from ``file://``, where it would refuse an ES module), instead of inlining the
bundle into each page as Altair's ``inline=True`` does: the site holds the JavaScript once
(about 0.9 MB) whatever its number of pages. The bundle is the one Altair's ``inline=True``
inlines, built by ``vl-convert-python`` for the Vega-Lite version Altair writes, so the site
needs no server and no network; it sets ``window.vegaEmbed``.
"""

from __future__ import annotations

import functools

import altair as alt

from greenbench.errors import OutputError

#: where the bundle is written, relative to the site's root
BUNDLE = "assets/vega-embed.js"


def vl_version() -> str:
    """The Vega-Lite version Altair writes specs for, as vl-convert names it (``v6_4``)."""
    return "_".join(alt.SCHEMA_VERSION.split(".")[:2])


@functools.cache
def vega_bundle() -> str:
    """vega, vega-lite and vega-embed in one script with no import (vl-convert's
    ``javascript_bundle``), for the Vega-Lite version Altair writes; built once a process."""
    try:
        import vl_convert
    except ImportError:
        raise OutputError(
            "a published site needs the vl-convert-python package for its charts' JavaScript: "
            "pip install vl-convert-python"
        ) from None
    return str(vl_convert.javascript_bundle(vl_version=vl_version()))
