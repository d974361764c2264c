#!/usr/bin/env python3
"""The known-issue tables, generated from the known-issue data (`harness/known_issues.toml`), never written by hand.

    python tools/known_table.py [--check]

Rewrites the block between `<!-- known-issues:begin -->` and `<!-- known-issues:end -->` in docs/known-issues.md
(the full table: releases, what goes wrong, who reaches it, repro, fix, which code carries it; the page is
created when missing) and in README.md (the counts only: how many, how many seen on the default release, how many
per vLLM concern their fixes patch, harness/fixes/). Text outside the markers is left alone; generated prose is
wrapped at 120 characters (table rows cannot be). `--check`: write nothing, exit 1 when either file differs from
what the data gives. Imports no vLLM (reading the data and the fixes' modules does not), so it runs in a second.
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
WIDTH = 120  # generated prose lines (README.md and docs/ keep lines at most this long)
DEFAULT_RELEASE = "0.33"  # the Makefile's DEFAULT_VLLM line: the release `.venv` holds
# harness/fixes/ concerns as the README names them (others: the module name, underscores as spaces)
CONCERN_LABELS = {"split": "the block-aligned split", "runner_accepted": "runners' accepted counts",
                  "runner_batch": "runners' batch order"}

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


def _covers(releases: str, release: str) -> bool:
    """'0.28.0-0.34.0' or '0.30.0 and 0.33.0' covers '0.33' (releases compared by their first two parts)."""
    part = lambda v: tuple(int(x) for x in v.split(".")[:2])  # noqa: E731
    return any(part(lo) <= part(release) <= part(hi or lo)
               for lo, hi in re.findall(r"(\d+\.\d+)(?:\.[\dx]+)?(?:-(\d+\.\d+))?", releases))


def _version(v: tuple) -> str:
    return ".".join(map(str, v))


# a line may not start with these: Markdown would read a list item, a quote, a heading or a table row
_OPENS_BLOCK = re.compile(r"[-+*>#|=]|\d+[.)]$")


def _wrap(text: str, indent: str = "") -> str:
    """Generated prose at most WIDTH characters a line where words allow: breaks only at spaces (never inside a
    code span or a link, whose generated forms hold none) and never before a word that would open a Markdown
    block at a line's start (the word before it moves down with it)."""
    lines: list[list[str]] = [[]]
    for word in text.split(" "):
        line = lines[-1]
        if not line or len(indent * (len(lines) > 1) + " ".join(line + [word])) <= WIDTH:
            line.append(word)
        elif not _OPENS_BLOCK.match(word):
            lines.append([word])
        elif len(line) > 1 and not _OPENS_BLOCK.match(line[-1]):
            lines.append([line.pop(), word])
        else:
            line.append(word)
    return "\n".join(indent * (i > 0) + " ".join(words) for i, words in enumerate(lines))


def concern_of(fix_name: str) -> str:
    """The harness/fixes/ module (the vLLM concern) that holds a fix."""
    import importlib

    from harness.fixes import CONCERNS

    for concern in CONCERNS:
        if any(f.name == fix_name for f in importlib.import_module(f"harness.fixes.{concern}").FIXES):
            return concern
    raise KeyError(f"no fix named {fix_name!r} in harness/fixes/")


def readme_table(issues=None) -> str:
    """The README's block: the counts, generated from the data (the table itself is docs/known-issues.md's)."""
    from harness.fixes import CONCERNS

    issues = _issues() if issues is None else issues
    latest = sum(_covers(_short_releases(k.releases), DEFAULT_RELEASE) for k in issues)
    per = {c: 0 for c in CONCERNS}
    for k in issues:
        per[concern_of(k.fix_name)] += 1
    concerns = ", ".join(f"{CONCERN_LABELS.get(c, c.replace('_', ' '))} {n}" for c, n in per.items() if n)
    return _wrap(f"**{len(issues)} known issues** of stock vLLM, {latest} of them seen on {DEFAULT_RELEASE}.0, "
                 "each a repro checked in and asserted in the tests plus the fix that removes it (found in vLLM's own "
                 "code paths on CPU, not yet confirmed on a GPU). By the vLLM concern their fixes patch "
                 f"(`harness/fixes/`): {concerns}. Every one, with releases, repro and fix: "
                 "[docs/known-issues.md](docs/known-issues.md).")


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
        where = f"`harness/fixes/{concern_of(k.fix_name)}.py`"
        rows += ["", f"### {k.id}", ""] + [_wrap(line, "  ") for line in (
                 f"- **What goes wrong:** {_md(k.summary)}.",
                 f"- **Reached by:** {_md(k.reached_by)}.",
                 f"- **Releases:** {_md(k.releases)}.",
                 f"- **Shows on:** {_shows_on(k)}.",
                 f"- **Repro:** {repro}.",
                 f"- **Fix:** `{k.fix.name}` in {where} (patches `{k.fix_target}`): "
                 f"{_md(k.fix_what)}.")]
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
