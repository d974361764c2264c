"""bench/ by kind: every file in bench/results/ is written by a command of bench/make_results.sh (`make results`
rewrites the folder in full), and every script that command runs is in bench/measure/ (or tools/)."""

from __future__ import annotations

import re
import subprocess

from testlib import ROOT

RESULTS = ROOT / "bench" / "results"
SCRIPT = (ROOT / "bench" / "make_results.sh").read_text()


def _committed_results() -> list[str]:
    out = subprocess.run(["git", "ls-files", "bench/results"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [line.split("/", 2)[2] for line in out.stdout.splitlines()]


def _written_by_the_script(name: str) -> bool:
    stem, _, ext = name.rpartition(".")
    if f"$R/{name}" in SCRIPT:
        return True
    if ext == "json":  # these write their rows as JSON beside their table
        return any(f"$R/{stem}.md" in line and any(w in line for w in ("peer_tests.py", "bisect --known", "upstream.py",
                                                                        "bank_034.py", "emitted_across.py",
                                                                        "patched_trees.py"))
                   for line in SCRIPT.splitlines())
    if ext == "md":  # plot.py writes the benchmark table beside the pytest-benchmark JSON it reads
        return f"$M/plot.py $R/{stem}.json" in SCRIPT
    if ext == "png":  # plot.py's scaling curves, one per benchmark function of bench/test_bench_*.py
        return "$M/plot.py" in SCRIPT and any(f"def {stem}(" in p.read_text()
                                               for p in (ROOT / "bench").glob("test_bench_*.py"))
    return False


def test_make_results_writes_every_committed_result():
    names = _committed_results()
    assert names, "no committed results found"
    unwired = [n for n in names if not _written_by_the_script(n)]
    assert not unwired, f"bench/results/ files no command of bench/make_results.sh writes: {unwired}"


def test_every_script_make_results_runs_exists():
    scripts = set(re.findall(r"\$M/(\w+\.py)", SCRIPT)) | set(re.findall(r"\b(tools/\w+\.py)", SCRIPT))
    assert scripts
    missing = [s for s in scripts if not ((ROOT / "bench" / "measure" / s).exists() or (ROOT / s).exists())]
    assert not missing, missing
    # bench/ itself holds the pytest-benchmark suites only (and this script, and its helpers)
    stray = [p.name for p in (ROOT / "bench").glob("*.py")
             if not (p.name.startswith("test_bench_") or p.name in ("conftest.py", "benchlib.py"))]
    assert not stray, f"not a benchmark suite: move to bench/measure/ or tools/: {stray}"
