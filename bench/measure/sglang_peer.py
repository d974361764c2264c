"""SGLang's own unit tests as a peer of the SGLang wing: do they kill the wing's planted SGLang bugs?

    .venv/bin/python bench/measure/sglang_peer.py --tests DIR [--out bench/results/sglang_peer.md]

The bench/measure/peer_tests.py of the SGLang wing. DIR holds SGLang test files (test_*.py, pytest or unittest
style); nothing of SGLang is kept in this repository, so DIR is a local copy (artifacts/cache/ is git-ignored).
To fill it from a snapshot of SGLang's repository (the `fetch` tool, `github:sgl-project/sglang`, or a clone):

    G=/work/.mirror/sgl-project+sglang/repo   # or a clone's .git
    git --git-dir=$G ls-tree -r --name-only v0.5.23 test/registered/unit/mem_cache | grep -Ei 'mamba|unified'
    git --git-dir=$G show v0.5.23:test/registered/unit/mem_cache/FILE.py > artifacts/cache/sglang-tests/FILE.py

(the installed wheel, SGLang 0.5.23, ships the matching fixtures as `sglang.test.kits.unified_radix_cache`; test
files that import the pre-kit module `test_unified_radix_cache_unittest` get a shim of that name, written at run time,
that re-exports the kit's `CacheConfig`, `build_fixture` and `get_device`). Each row is one pytest process in the
SGLang venv (.venv-sglang) that loads this file as a plugin (`-p sglang_peer`): at session start it applies the
wing's own run-time patches and the row's mutant (harness/sglang/runtime.py `patched`, the function the sweep uses)
and undoes them at the end. A test that fails on stock is excluded; a mutant is killed by the peer when some test
that passes on stock fails or errors with it. Writes a Markdown table and the raw outcomes as JSON beside it. Exit 0
done, 2 no tests (or no SGLang venv).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
MUTANT_VAR = "HH_SGLANG_PEER_MUTANT"  # the row's mutant, read by the plugin half ("" is stock)
DEFAULT_TESTS = ROOT / "artifacts" / "cache" / "sglang-tests"
SHIM = '''"""Written by bench/measure/sglang_peer.py: the pre-kit name of SGLang's unified radix cache fixtures."""
from sglang.test.kits.unified_radix_cache.config import CacheConfig  # noqa: F401
from sglang.test.kits.unified_radix_cache.fixtures import build_fixture, get_device  # noqa: F401

_TREE_CORE_TEST_BACKEND = "python"
'''
_UNDO = []


# ---- the plugin half: runs inside pytest in the SGLang venv --------------------------------------------------

def pytest_configure(config) -> None:
    """Apply the wing's patches and the row's mutant before any test module imports SGLang."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from harness.sglang.runtime import patched

    _UNDO.append(patched(1, os.environ.get(MUTANT_VAR) or None))


def pytest_unconfigure(config) -> None:
    while _UNDO:
        _UNDO.pop()()


# ---- the driver half --------------------------------------------------------------------------------------------

def outcomes(junit: Path) -> dict[str, str]:
    """test id -> passed / failed / error / skipped, from pytest's JUnit XML."""
    result = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        result[f"{case.get('classname')}::{case.get('name')}"] = {"failure": "failed"}.get(kind, kind)
    return result


def run_row(tests: Path, shim: Path, mutant: str | None, timeout: float) -> dict:
    """One pytest process in the SGLang venv with `mutant` applied; its outcomes and wall time."""
    from harness.engines import _NOT_FOR_SGLANG, SGLANG_PYTHON

    env = {k: v for k, v in os.environ.items() if k not in _NOT_FOR_SGLANG}
    env.update({MUTANT_VAR: mutant or "", "PYTHONPATH": os.pathsep.join(map(str, (HERE, shim, tests, ROOT)))})
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        started = time.monotonic()
        out = subprocess.run([str(SGLANG_PYTHON), "-m", "pytest", "-p", "sglang_peer", "-p", "no:cacheprovider",
                              "-q", "--rootdir", str(tests), f"--junitxml={junit}", str(tests)],
                             cwd=ROOT, env=env, text=True, capture_output=True, timeout=timeout, check=False)
        wall = time.monotonic() - started
        found = outcomes(junit) if junit.exists() else {}
    return {"mutant": mutant or "stock", "exit": out.returncode, "wall": wall, "outcomes": found,
            "tail": out.stdout[-1500:] + out.stderr[-500:]}


def judge(stock: dict, row: dict) -> dict:
    """The tests that pass on stock and not with the mutant."""
    green = sorted(t for t, o in stock["outcomes"].items() if o == "passed")
    kills = [t for t in green if row["outcomes"].get(t, "missing") != "passed"]
    return {"green": len(green), "kills": kills}


def _bank_kill(bank: Path, mutant: str) -> str:
    """The project's own verdict for `mutant`, read from bench/results/sglang_bank.md (sweep and campaign)."""
    if not bank.exists():
        return "-"
    row = next((line for line in bank.read_text().splitlines() if line.startswith(f"| `{mutant}` |")), None)
    if row is None:
        return "-"
    cells = [c.strip() for c in row.strip("|").split("|")]
    sweep, campaign = cells[5], cells[11]
    return f"sweep {sweep}, campaign kept {campaign}"


def table(rows: list[dict], tests: list[str]) -> list[str]:
    """Long: the Markdown rows, stock first, then one per mutant with the peer's and the project's verdict."""
    from harness.sglang.runtime import MUTANTS

    stock = rows[0]
    red = sorted(t for t, o in stock["outcomes"].items() if o != "passed")
    lines = ["| mutant | tests run | failing on stock (excluded) | tests that kill it | killed by the peer | "
             "killed by the project (sglang_bank.md) | pytest exit | wall (s) |",
             "|---|---|---|---|---|---|---|---|",
             f"| `stock` | {len(stock['outcomes'])} | {len(red)} | - | - | - | {stock['exit']} | {stock['wall']:.1f} |"]
    bank = ROOT / "bench" / "results" / "sglang_bank.md"
    for row in rows[1:]:
        v = judge(stock, row)
        kills = ", ".join(f"`{t}`" for t in v["kills"]) or "-"
        lines.append(f"| `{row['mutant']}` | {len(row['outcomes'])} | {len(red)} | {kills} | "
                     f"{'yes' if v['kills'] else 'no'} | {_bank_kill(bank, row['mutant'])} | {row['exit']} | "
                     f"{row['wall']:.1f} |")
    assert {r["mutant"] for r in rows[1:]} == set(MUTANTS)
    return lines


def _provenance(tests: Path) -> list[str]:
    """Where the test files came from: DIR/PROVENANCE.md, written by whoever filled DIR, quoted as it stands."""
    note = tests / "PROVENANCE.md"
    if not note.exists():
        return ["Provenance of the test files: not recorded (no PROVENANCE.md in the test folder).", ""]
    return ["Provenance of the test files (the test folder's PROVENANCE.md):", "",
            *(f"> {line}".rstrip() for line in note.read_text().splitlines()), ""]


def write(args, rows: list[dict], files: list[str]) -> None:
    """Long: the Markdown table (provenance stamp first) and the raw rows as JSON beside it."""
    from harness.stamp import stamp

    stock = rows[0]
    red = sorted(t for t, o in stock["outcomes"].items() if o != "passed")
    green = sorted(t for t, o in stock["outcomes"].items() if o == "passed")
    text = "\n".join([
        "# SGLang's own unit tests against the SGLang wing's mutant bank (SGLang 0.5.23)", "",
        stamp(f"python bench/measure/sglang_peer.py --tests {args.tests_label} --out {args.out}"), "",
        "Each row: pytest over the SGLang test files below in `.venv-sglang`, one process per row, with the wing's "
        "run-time patches and the row's mutant applied at session start (harness/sglang/runtime.py `patched`, "
        "loaded by this script as a pytest plugin) and undone at the end. A test failing on stock is excluded; a "
        "mutant is **killed by the peer** when a test that passes on stock fails or errors with it. Beside it, the "
        "project's own verdict from bench/results/sglang_bank.md (scenarios with findings in the 300-scenario sweep; "
        "findings kept by the 2-minute campaign).", "",
        "Test files (SGLang's, read from a local copy that is not committed; see the script's docstring): "
        + ", ".join(f"`{f}`" for f in files) + ".", "",
        *table(rows, files), "",
        "Passing on stock (the suite that judges the mutants): " + (", ".join(f"`{t}`" for t in green) or "none")
        + ".", "", "Failing on stock (excluded): " + (", ".join(f"`{t}`" for t in red) or "none") + ".", "",
        *_provenance(args.tests)])
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(
        {"files": files, "rows": [{k: r[k] for k in ("mutant", "exit", "outcomes")} for r in rows]},
        indent=1, sort_keys=True) + "\n")


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from harness.engines import SGLANG_PYTHON
    from harness.sglang.runtime import MUTANTS

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tests", type=Path, default=DEFAULT_TESTS, help="a folder of SGLang test_*.py files")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sglang_peer.md")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per pytest process")
    args = ap.parse_args()
    files = sorted(p.name for p in args.tests.glob("test_*.py")) if args.tests.is_dir() else []
    if not files:
        print(f"no SGLang test files (test_*.py) in {args.tests}: copy them there (see this script's docstring)",
              file=sys.stderr)
        return 2
    if not SGLANG_PYTHON.exists():
        print(f"no SGLang venv at {SGLANG_PYTHON}: make venv-sglang", file=sys.stderr)
        return 2
    tests = args.tests.resolve()
    args.tests_label = os.path.relpath(tests, ROOT) if tests.is_relative_to(ROOT) else str(tests)
    rows = []
    with tempfile.TemporaryDirectory() as shim:
        (Path(shim) / "test_unified_radix_cache_unittest.py").write_text(SHIM)
        for mutant in (None, *MUTANTS):
            rows.append(run_row(tests, Path(shim), mutant, args.timeout))
            print(f"{rows[-1]['mutant']}: exit {rows[-1]['exit']}, {len(rows[-1]['outcomes'])} tests, "
                  f"{rows[-1]['wall']:.1f} s", file=sys.stderr)
    write(args, rows, files)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
