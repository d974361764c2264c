"""README.md stays a ten-minute page: short, every relative link resolves, and its known-issue table is the one
tools/known_table.py generates from the registry in harness/known.py (never edited by hand)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_LINES = 250


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
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/ (at most {MAX_LINES})"


def test_readme_relative_links_exist():
    links = _relative_links(README.read_text())
    assert links, "README.md links its docs pages"
    missing = [t for t in links if not (ROOT / t.split("#")[0]).exists()]
    assert not missing, f"README.md links to missing files: {missing}"
    outside = [t for t in links if not (ROOT / t.split("#")[0]).resolve().is_relative_to(ROOT)]
    assert not outside, f"README.md links outside the repository: {outside}"


def test_known_issue_tables_match_the_registry():
    kt = _known_table()
    assert kt.block(README.read_text()) == kt.readme_table(), \
        "README.md's known-issue table is stale: run python tools/known_table.py"
    assert kt.block(kt.DOCS.read_text()) == kt.docs_table(), \
        "docs/known-issues.md's table is stale: run python tools/known_table.py"


def test_module_map_names_every_module():
    """The pipeline section's module map lists every module of the package (a newcomer's index)."""
    text = README.read_text()
    modules = [p.relative_to(ROOT).as_posix() for p in (ROOT / "harness").rglob("*.py")
               if p.name not in ("__init__.py", "__main__.py")]
    missing = [m for m in modules if f"`{m}`" not in text]
    assert not missing, f"README.md's module map misses {missing}"
