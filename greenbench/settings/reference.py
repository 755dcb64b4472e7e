"""docs/settings.md, written from the sections' fields: every setting by section, its default,
choices, when it counts toward a run's identity, and what it sets.

``python -m greenbench.settings.reference > docs/settings.md`` writes it; a test holds the file
to what this module writes, so the reference never drifts from the code.
"""

from __future__ import annotations

from greenbench.config import Setting, section_name, section_settings
from greenbench.settings import SCHEMA

IDENTITY_WORDS = {
    "always": "always",
    "never": "never",
    "away_from_default": "when not the default",
    "when": "where it applies",
}


def _row(s: Setting) -> str:
    choices = ", ".join(s.choices or sorted(s.registry() if s.registry else ()))
    bound = {"positive": "> 0", "non-negative": ">= 0"}.get(s.bound or "", "")
    allowed = "; ".join(p for p in (choices, bound, "an integer or auto" * s.auto_int) if p)
    doc = s.doc.replace("|", "\\|")
    return (
        f"| `{s.key}` | `{s.default!r}` | {allowed.replace('|', '/')} | "
        f"{IDENTITY_WORDS[s.identity.kind]} | {doc} |"
    )


def markdown() -> str:
    """The settings reference, as docs/settings.md holds it."""
    lines = [
        "# Settings",
        "",
        "Every setting greenbench's own workloads have, by section: its default, the values it",
        "takes, whether it counts toward a run's identity (`config_key`: runs are pooled only",
        "with runs of the same identity), and what it sets. Set them in a suite file, with",
        "`--set key=value` (a comma-separated value sweeps), or see them with",
        "`greenbench list settings`. A user workload has the settings not marked built-in, plus",
        "its own `user.*` settings. This page is written from the code",
        "(`python -m greenbench.settings.reference > docs/settings.md`).",
        "",
    ]
    for cls in SCHEMA.sections:
        name = section_name(cls) or "run"
        settings = section_settings(cls)
        built_in = " (built-in workloads only)" if all(s.built_in_only for s in settings) else ""
        lines += [
            f"## {name}{built_in}",
            "",
            cls.__section_doc__,  # type: ignore[attr-defined]
            "",
            "| setting | default | values | identity | what it sets |",
            "|---|---|---|---|---|",
            *(_row(s) for s in settings),
            "",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
