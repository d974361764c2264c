"""README.md stays a ten-minute page (at most 1,500 words, no line over 120 characters), every relative link of it
and of docs/architecture.md resolves, the known-issue blocks are the ones tools/known_table.py generates from the data
(harness/known_issues.toml, never edited by hand), and docs/architecture.md's module map names every module."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_WORDS = 1500  # `wc -w`: a ten-minute first read
MAX_WIDTH = 120


def _known_table():
    spec = importlib.util.spec_from_file_location("known_table", ROOT / "tools" / "known_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _relative_links(text: str) -> list[str]:
    """Targets of Markdown links and images that are neither absolute URLs nor in-page anchors."""
    targets = re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text)
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_readme_is_short():
    text = README.read_text()
    words = len(text.split())
    assert words <= MAX_WORDS, f"README.md has {words} words; move detail to docs/ (at most {MAX_WORDS})"
    long = [i for i, line in enumerate(text.splitlines(), 1) if len(line) > MAX_WIDTH]
    assert not long, f"README.md lines over {MAX_WIDTH} characters: {long}"


def test_readme_first_screen_has_the_two_commands_and_a_finding():
    """What a newcomer sees first: what it is, `make fuzz` and `make test`, and one finding as printed."""
    first = "\n".join(README.read_text().splitlines()[:45])
    assert "## The two commands" in first and "make fuzz" in first and "make test" in first
    assert "FINDING " in first, "the README's first screen shows one finding"


def test_architecture_page_is_linked_and_narrow():
    assert "(docs/architecture.md)" in README.read_text(), "README.md links the architecture page"
    long = [i for i, line in enumerate(ARCHITECTURE.read_text().splitlines(), 1) if len(line) > MAX_WIDTH]
    assert not long, f"docs/architecture.md lines over {MAX_WIDTH} characters: {long}"


def test_readme_relative_links_exist():
    for page in (README, ARCHITECTURE):
        links = _relative_links(page.read_text())
        assert links, f"{page.name} links its docs pages"
        missing = [t for t in links if not (page.parent / t.split("#")[0]).exists()]
        assert not missing, f"{page.name} links to missing files: {missing}"
        outside = [t for t in links if not (page.parent / t.split("#")[0]).resolve().is_relative_to(ROOT)]
        assert not outside, f"{page.name} links outside the repository: {outside}"


def test_known_issue_blocks_match_the_data():
    kt = _known_table()
    assert kt.block(README.read_text()) == kt.readme_table(), \
        "README.md's known-issue counts are stale: run python tools/known_table.py"
    assert kt.block(kt.DOCS.read_text()) == kt.docs_table(), \
        "docs/known-issues.md's table is stale: run python tools/known_table.py"


def harness_modules() -> list[str]:
    """Every module of the package, as a path from the repository root (packages' __init__.py included)."""
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "harness").rglob("*.py") if p.name != "__main__.py")


def test_module_map_names_every_module():
    """docs/architecture.md's module map lists every module of the package (a newcomer's index), each in backticks
    as its path; a module added without a line there fails here."""
    text = ARCHITECTURE.read_text()
    modules = harness_modules()
    assert len(modules) > 50, "the package's modules were found"
    missing = [m for m in modules if f"| `{m}` |" not in text]
    assert not missing, f"docs/architecture.md's module map misses {missing}"
