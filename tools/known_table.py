#!/usr/bin/env python3
"""The known-issue tables, generated from the known-issue data (`harness/known_issues.toml`), never written by hand.

    python tools/known_table.py [--check]

Rewrites the block between `<!-- known-issues:begin -->` and `<!-- known-issues:end -->` in docs/known-issues.md
(the full table: releases, what goes wrong, who reaches it, repro, fix, which code carries it; the page is
created when missing) and in README.md (how many, then the short table: id, releases, one line). Text outside the markers is
left alone. `--check`: write nothing, exit 1 when either file differs from what the registry gives. Imports no
vLLM (reading the registry does not), so it runs in a second.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BEGIN = "<!-- known-issues:begin -->"
END = "<!-- known-issues:end -->"
README = ROOT / "README.md"
DOCS = ROOT / "docs" / "known-issues.md"
GENERATED = "_Generated from `harness/known_issues.toml` by `python tools/known_table.py`; do not edit by hand._"

# a word with an underscore is code (a vLLM function, field or file): backticks keep Markdown from reading it
_IDENT = re.compile(r"(?<![\w`.])([A-Za-z_][\w.]*_[\w.]*\w|_\w+)")


def _issues():
    from harness.known_issues import KNOWN_ISSUES

    return KNOWN_ISSUES


def _md(text: str) -> str:
    """Registry prose as a Markdown table cell."""
    text = " ".join(text.split()).replace("|", "\\|")
    return _IDENT.sub(r"`\1`", text)


def _first_clause(text: str) -> str:
    """Up to the first ': ' or '; ' (the registry's summaries state the bug first, then its consequence)."""
    cut = min([i for i in (text.find(": "), text.find("; ")) if i >= 0], default=len(text))
    text = text[:cut].strip()
    return text[:1].upper() + text[1:]


def _short_releases(text: str) -> str:
    """'seen on 0.26.0-0.33.0 (...)' -> '0.26.0-0.33.0'."""
    cut = min([i for i in (text.find(" ("), text.find("; ")) if i >= 0], default=len(text))
    return text[:cut].removeprefix("seen on ").strip()


def _version(v: tuple) -> str:
    return ".".join(map(str, v))


def readme_table(issues=None) -> str:
    """The README's short table: id, releases, one line on what goes wrong."""
    issues = _issues() if issues is None else issues
    latest = sum("0.33" in _short_releases(k.releases) for k in issues)
    rows = [f"{len(issues)} behaviours of stock vLLM that look like real bugs, {latest} of them in 0.33.0. Each is a "
            "known issue: a repro checked in and asserted in the tests, and the fix patch that removes it (found in "
            "vLLM's own code paths on CPU, not yet confirmed on a GPU). Details in "
            "[docs/known-issues.md](docs/known-issues.md).", "",
            "| known issue | releases | what goes wrong |", "|---|---|---|"]
    for k in issues:
        rows.append(f"| [`{k.id}`](docs/known-issues.md#{k.id}) | {_md(_short_releases(k.releases))} | "
                    f"{_md(_first_clause(k.summary))} |")
    return "\n".join(rows)


def _shows_on(issue) -> str:
    """Where the code carrying the bug runs (KnownIssue.runs_on): the mirrored tiers' worker shadow ("mirror")
    and the engine tier's model runners."""
    runners = issue.runners
    if issue.engine_only:
        return "engine tier, every runner (vLLM's own Scheduler code)"
    if runners is None:
        return "every tier (scheduler or allocator code)"
    where = ["symbolic and model tiers (the mirror)"] if "mirror" in runners else []
    engine = [r for r in runners if r != "mirror"]
    if engine:
        where.append("engine tier, " + ", ".join(f"`--runner {r}`" for r in engine))
    return "; ".join(where)


def docs_table(issues=None) -> str:
    """The full table of docs/known-issues.md, then one anchored section per issue."""
    from harness.known_issues import KnownIssue

    issues = _issues() if issues is None else issues
    default_from = KnownIssue.__dataclass_fields__["repro_from"].default
    rows = [GENERATED, "",
            "| known issue | releases | shows on | repro | fix (run-time patch) |", "|---|---|---|---|---|"]
    for k in issues:
        rows.append(f"| [`{k.id}`](#{k.id}) | {_md(_short_releases(k.releases))} | {_shows_on(k)} | "
                    f"[`{k.repro}`](../{k.repro}) | `{k.fix.name}` |")
    for k in issues:
        repro = f"[`{k.repro}`](../{k.repro})"
        if k.repro_from != default_from:
            repro += f" (reaches the bug from {_version(k.repro_from)} on)"
        rows += ["", f"### {k.id}", "",
                 f"- **What goes wrong:** {_md(k.summary)}.",
                 f"- **Reached by:** {_md(k.reached_by)}.",
                 f"- **Releases:** {_md(k.releases)}.",
                 f"- **Shows on:** {_shows_on(k)}.",
                 f"- **Repro:** {repro}.",
                 f"- **Fix:** `{k.fix.name}` (patches `{k.fix_target}`): {_md(k.fix.bug_class.removeprefix('fix: '))}."]
    return "\n".join(rows)


def replace_block(text: str, table: str) -> str:
    """`text` with the block between the markers replaced by `table` (markers kept)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"known_table: markers {BEGIN} ... {END} not found")
    return text[:start] + f"{BEGIN}\n{table}\n{END}" + text[end + len(END):]


def block(text: str) -> str:
    """The table between the markers of `text`."""
    start, end = text.find(BEGIN), text.find(END)
    return text[start + len(BEGIN):end].strip("\n")


def rendered() -> dict[Path, str]:
    """Each file's text as the registry would have it."""
    docs = DOCS.read_text() if DOCS.exists() else f"# Known issues\n\n{BEGIN}\n{END}\n"
    return {README: replace_block(README.read_text(), readme_table()),
            DOCS: replace_block(docs, docs_table())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, text in rendered().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path.relative_to(ROOT))
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if args.check and stale:
        print("out of date (run python tools/known_table.py): " + ", ".join(map(str, stale)), file=sys.stderr)
        return 1
    for path in stale:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
