"""A published site's history pages: one per configuration on the leaderboard (and kind of
energy figure), its J/token and tokens/s per commit with their intervals, in the order each
commit first ran (`leaderboard.history`, the dashboard's History tab), charted and tabled.
Runs stored without a git sha are one point per day instead (`greenbench.reporting.axes`),
never one "unknown" commit, and runs under different labels are separate lines.

Pages live in ``history/`` beside ``index.html``; a page's name is the configuration's name
made a file name plus a short hash of its key and energy source (two configurations never share
a page, and the same configuration keeps its page from one publish to the next).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pandas as pd

from greenbench.reporting import axes, figures
from greenbench.reporting.cells import ESTIMATE_FOLLOWS_TIME, g, row
from greenbench.reporting.leaderboard import history
from greenbench.reporting.site import charts, html
from greenbench.vocabulary import energy_label
from greenbench.vocabulary.trust import interval_caption, missing

FOLDER = "history"


@dataclass(frozen=True)
class Entry:
    """One configuration's history page: its key, energy source, name and file."""

    config_key: str
    energy_source: str
    config_name: str
    energy: str
    workload: str
    file: str  # relative to the site's root


def entries(table: pd.DataFrame) -> list[Entry]:
    """One page per leaderboard row (``table``: `report.summarise`), in the leaderboard's
    order."""
    out = []
    for r in table.itertuples(index=False):
        key, source = str(r.config_key), str(r.energy_source)
        digest = hashlib.sha1(f"{key}\0{source}".encode()).hexdigest()[:8]
        name = f"{figures.slug(str(r.config_name))[:60]}-{digest}.html"
        out.append(Entry(key, source, str(r.config_name), str(r.energy), str(r.workload),
                         f"{FOLDER}/{name}"))  # fmt: skip
    return out


def history_frame(measured: pd.DataFrame, entry: Entry) -> pd.DataFrame:
    """`leaderboard.history` of ``entry`` over the training repeats ``measured`` (one point per
    commit, or per day where a run has no git sha), with the energy label, a point label (short
    sha · date of its first run), the line it is drawn on (its energy label, and its run label
    where the history holds several) and readable times."""
    hist = history(measured, entry.config_key, entry.energy_source)
    if hist.empty:
        return hist
    first = pd.to_datetime(hist["first_started_at"])
    last = pd.to_datetime(hist["last_started_at"])
    energy = [
        energy_label(s, m)
        for s, m in zip(hist["energy_source"], hist["energy_measured"], strict=True)
    ]
    several = hist["series"].nunique() > 1
    return hist.assign(
        energy=energy,
        line=[f"{e} · {s}" if several else e for e, s in zip(energy, hist["series"], strict=True)],
        commit=[
            f"{str(s)[:10]} · {_when(t, '%Y-%m-%d')}"
            for s, t in zip(hist["git_sha"], first, strict=True)
        ],
        first_run=[_when(t, "%Y-%m-%d %H:%M") for t in first],
        last_run=[_when(t, "%Y-%m-%d %H:%M") for t in last],
        trust=hist["trust"].fillna("").astype(str),
        interval=hist["interval"].fillna("").astype(str),
    )


def _when(t: pd.Timestamp, form: str) -> str:
    """A start time as ``form`` says, "unknown" where none was stored."""
    return "unknown" if pd.isna(t) else t.strftime(form)


def page(entry: Entry, hist: pd.DataFrame, site_title: str) -> html.Page:
    """The history page of ``entry`` over its `history_frame` ``hist``."""
    out = html.Page(f"{entry.config_name} · {entry.energy} — {site_title}", depth=1)
    out.add(
        f"<nav>{html.link('../index.html', '← ' + site_title)} "
        f"{html.link('../index.html#history-per-configuration', 'all histories')}</nav>",
        f"<h1>{html.escape(entry.config_name)}</h1>",
        f"<p>Workload <code>{html.escape(entry.workload)}</code>, energy: "
        f"<strong>{html.escape(entry.energy)}</strong>.</p>",
    )
    if entry.energy == "estimate":
        out.add(f'<blockquote class="estimate">Its J/token is an {ESTIMATE_FOLLOWS_TIME}: '
                "a time ratio, not a measured energy.</blockquote>")  # fmt: skip
    if hist.empty:
        out.add("<p>No stored repeats of this configuration.</p>")
        return out
    word = axes.POINT_NAMES[hist.attrs.get("by", "commit")]
    if hist["point"].nunique() < 2:
        out.add(f"<p>Only one {word} so far: a history needs runs from two {word}s or more.</p>")
    if hist.attrs.get("by") == "date":
        out.add("<p>Its runs were stored without a git sha (started outside a checkout): one "
                "point per day they ran.</p>")  # fmt: skip
    caption = f"Interval bars: {interval_caption(hist['n_repeats'])}."
    energy = charts.history_chart(hist, "joules_per_token", f"J/token, {entry.energy}")
    speed = charts.history_chart(hist, "tokens_per_s", "tokens/s")
    out.add(out.chart(energy.to_dict(), caption), out.chart(speed.to_dict(), caption))
    body, _ = html.markdown(table_lines(hist), set())
    out.add(body)
    return out


def table_lines(hist: pd.DataFrame) -> list[str]:
    """The history as a Markdown table: one row per commit (or day), energy label and run
    label."""
    lines = [
        "| commit | first run | last run | energy | J/token (median [interval]) | J/token net "
        "| tokens/s (median [interval]) | repeats | runs | interval | trust | label | branch |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in hist.itertuples(index=False):
        jpt = f"{g(r.joules_per_token)} [{g(r.joules_per_token_ci_low)}, "
        jpt += f"{g(r.joules_per_token_ci_high)}]"
        tps = f"{g(r.tokens_per_s)} [{g(r.tokens_per_s_ci_low)}, {g(r.tokens_per_s_ci_high)}]"
        sha = "unknown" if missing(r.git_sha) else str(r.git_sha)[:10]
        cells = [f"`{sha}`", r.first_run, r.last_run, r.energy, jpt, g(r.net_joules_per_token)]
        cells += [tps, str(r.n_repeats), str(r.n_runs), r.interval, r.trust or "–"]
        cells += [str(r.series), "–" if missing(r.git_branch) else str(r.git_branch)]
        lines.append(row(cells))
    return lines
