"""vLLM's own unit tests as a peer of the fuzzer: do they kill the harness's allocator-side mutants?

    .venv/bin/python bench/measure/peer_tests.py [--vllm X] [--only NAME ...] [--mutants-dir DIR] [--stock-only]
                                         [--jobs J] [--out bench/results/peer_tests.md]

Fetches vLLM X's source distribution from PyPI (sha256 checked, cached under ~/.cache/hybrid-harness/), extracts
tests/v1/core and tests/v1/kv_connector/unit plus the shared helpers they import, and runs them with pytest
(-x) on stock vLLM, then once per mutant with bench/measure/peer_plugin.py applying it at session start. A mutant is
killed when some test fails or errors. Worker-side mutants (model runner code) are out of reach of these tests
and listed as n/a. Writes a Markdown table and the raw rows as JSON next to it. Exit 0 done, 2 bad input or a
corrupt download, 3 the stock run is not green.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urljoin

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent  # this folder: peer_plugin.py, which `-p peer_plugin` loads
SELECTED = ("tests/v1/core/", "tests/v1/kv_connector/unit/")  # vLLM's tests of the allocator and scheduler
PYPI = "https://pypi.org/pypi/vllm"
EXIT_OK, EXIT_BAD, EXIT_STOCK_RED = 0, 2, 3


class BadDownload(Exception):
    pass


# ---- fetch ------------------------------------------------------------------------------------------------

def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.load(r)


def sdist_info(version: str) -> tuple[str, str, str]:
    """(url, sha256, filename) of vLLM's sdist for this release, from PyPI's JSON API."""
    url = f"{PYPI}/{version}/json"
    try:
        files = _get_json(url)["urls"]
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise
        # some PyPI mirrors serve only the project's JSON, not the per-release one: read the release from it
        url = f"{PYPI}/json"
        files = _get_json(url)["releases"].get(version)
        if not files:
            raise BadDownload(f"vLLM {version} is not on PyPI") from None
    sdist = next((f for f in files if f["packagetype"] == "sdist"), None)
    if sdist is None:
        raise BadDownload(f"vLLM {version} has no source distribution on PyPI")
    return urljoin(url, sdist["url"]), sdist["digests"]["sha256"], sdist["filename"]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_sdist(version: str, cache: Path) -> Path:
    """The cached sdist, downloaded once. Its expected sha256 (from PyPI) is kept beside it, so a cached file is
    re-verified on every run without the network."""
    folder = cache / "vllm-sdist"
    path = folder / f"vllm-{version}.tar.gz"
    digest_file = path.with_name(path.name + ".sha256")
    if path.exists() and digest_file.exists():
        want, got = digest_file.read_text().split()[0], _sha256(path)
        if got != want:
            raise BadDownload(f"cached {path} is corrupt: sha256 {got}, PyPI says {want}; delete it and rerun")
        return path
    url, want, filename = sdist_info(version)
    if filename != path.name:
        raise BadDownload(f"unexpected sdist name {filename} for vLLM {version}")
    folder.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    print(f"downloading {url}", flush=True)
    with urllib.request.urlopen(url, timeout=300) as r, part.open("wb") as f:
        while chunk := r.read(1 << 20):
            f.write(chunk)
    got = _sha256(part)
    if got != want:
        part.unlink()
        raise BadDownload(f"download of {url} is corrupt: sha256 {got}, PyPI says {want}")
    part.rename(path)
    digest_file.write_text(f"{want}  {path.name}\n")
    return path


# ---- extract ----------------------------------------------------------------------------------------------

def _tests_imported(rel: str, source: str, files: dict[str, bytes]) -> set[str]:
    """Files under tests/ that this file imports (`from tests.x import y`, `import tests.x`, relative imports)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    package = rel.rsplit("/", 1)[0].split("/")
    modules = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (node.module or "").split(".") if not node.level else \
                package[:len(package) - node.level + 1] + ((node.module or "").split(".") if node.module else [])
            base = [p for p in base if p]
            modules.append(".".join(base))
            modules += [".".join(base + [a.name]) for a in node.names]  # `from tests.v1 import utils`
    found = set()
    for mod in modules:
        if mod.split(".")[0] != "tests":
            continue
        stem = mod.replace(".", "/")
        for cand in (stem + ".py", stem + "/__init__.py"):
            if cand in files:
                found.add(cand)
    return found


def _with_packages(paths: set[str], files: dict[str, bytes]) -> set[str]:
    """Add each folder's __init__.py and conftest.py on the way down to every file (pytest loads those)."""
    out = set(paths)
    for p in paths:
        parts = p.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            for name in ("__init__.py", "conftest.py"):
                cand = "/".join(parts[:i] + [name])
                if cand in files:
                    out.add(cand)
    return out


def extract_tests(sdist: Path, version: str, cache: Path) -> Path:
    """Extract the selected test trees and the helpers they import into cache/vllm-tests/X (once)."""
    dest = cache / "vllm-tests" / version
    if (dest / ".complete").exists():
        return dest
    top = f"vllm-{version}/"
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            for m in tar:
                rel = m.name[len(top):] if m.name.startswith(top) else None
                # only regular files under tests/ and examples/ (and pytest's markers in pyproject.toml), no ".."
                if rel and m.isfile() and ".." not in rel.split("/") and (rel.startswith(("tests/", "examples/")) or
                                                                            rel == "pyproject.toml" or
                                                                            rel.endswith(".json")):
                    files[rel] = tar.extractfile(m).read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BadDownload(f"{sdist} does not read as a .tar.gz ({exc}); delete it and rerun") from None
    wanted = {rel for rel in files if rel.startswith(SELECTED)}
    todo = list(wanted)
    while todo:  # transitive closure of the shared helpers the selected tests import
        rel = todo.pop()
        for dep in _with_packages(_tests_imported(rel, files[rel].decode("utf-8", "replace"), files), files):
            if dep not in wanted:
                wanted.add(dep)
                todo.append(dep)
    # example scripts some tests load by path (the disaggregated-serving proxies): a quoted path ending in the name
    text = "\n".join(files[rel].decode("utf-8", "replace") for rel in wanted)
    wanted |= {rel for rel in files if rel.startswith("examples/") and rel.endswith(".py") and
               not rel.endswith("/__init__.py") and re.search(rf'["/]{re.escape(rel.rsplit("/", 1)[1])}"', text)}
    # data files the tests read by name (0.34.0's prompt-hash vectors under rust/, shared with the Rust client)
    wanted |= {rel for rel in files if rel.endswith(".json") and not rel.startswith("tests/") and
               f'"{rel.rsplit("/", 1)[1]}"' in text}
    wanted.add("pyproject.toml")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:  # staged beside dest: the rename is atomic
        staged = Path(tmp) / "tree"
        for rel in sorted(wanted & files.keys()):
            (staged / rel).parent.mkdir(parents=True, exist_ok=True)
            (staged / rel).write_bytes(files[rel])
        (staged / ".complete").write_text("\n".join(sorted(wanted)) + "\n")
        if dest.exists():  # an interrupted extraction: start over
            shutil.rmtree(dest)
        staged.rename(dest)
    return dest


# ---- run --------------------------------------------------------------------------------------------------

def pytest_command(mutant: str | None, report: Path, full_cleanup: bool) -> tuple[list[str], dict]:
    """The pytest call (run in the extracted folder) and its environment; this folder on the path for the plugin."""
    # --tb=native: pytest's own traceback formatter re-parses source with ast, which crashes CPython 3.11.7 on some
    # of vLLM's async tests (INTERNALERROR, "AST constructor recursion depth mismatch") and ends the session
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x", "--tb=native", "-p", "peer_plugin",
           # pytest-asyncio's default, set so that it does not warn
           "-o", "asyncio_default_fixture_loop_scope=function", f"--hh-report={report}", "--rootdir=.",
           # one token each: pytest finds its rootdir from the arguments before the plugin's options are known,
           # so a separate mutant-file path would be read as a test path (rootdir "/", the rules' paths unmatched)
           # a mutant file is passed absolute: the session runs in the extracted folder, not here
           *([f"--hh-mutant={Path(mutant).resolve() if mutant.endswith('.py') else mutant}"] if mutant else []),
           *(["--hh-full-cleanup"] if full_cleanup else []),
           *(s.rstrip("/") for s in SELECTED)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    return cmd, env


def run_logged(cmd: list[str], cwd: Path, env: dict, log: Path, timeout_s: float) -> int | None:
    """One pytest session with its output in log: its exit code, None when it ran past timeout_s."""
    with log.open("w") as out:
        try:
            return subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            return None


def run_tests(tests_dir: Path, mutant: str | None, logs: Path, timeout_s: float, full_cleanup: bool = False) -> dict:
    """One pytest session on stock vLLM (mutant None) or with the mutant applied: the plugin's summary plus wall
    seconds and a verdict (killed True/False, None with a note when the run gave none); the output is kept in logs/."""
    label = Path(mutant).stem if mutant and mutant.endswith(".py") else (mutant or "stock")
    logs.mkdir(parents=True, exist_ok=True)
    log, report = logs / f"{label}.log", logs / f"{label}.json"
    report.unlink(missing_ok=True)
    cmd, env = pytest_command(mutant, report, full_cleanup)
    started = time.monotonic()
    rc = run_logged(cmd, tests_dir, env, log, timeout_s)
    doc = json.loads(report.read_text()) if report.exists() else {}
    row = {"mutant": mutant or "stock", "seconds": round(time.monotonic() - started, 1), "exit": rc,
           **{k: doc.get(k) for k in ("passed", "failed", "skipped", "errors", "deselected", "first_failure")},
           "why": (doc.get("failures") or [": "])[0].split(": ", 1)[1] or None, "log": str(log)}
    if mutant and not doc.get("applied"):  # the plugin could not apply it (e.g. a mutant for another release)
        tail = log.read_text().strip().splitlines()[-1:]
        row.update(killed=None, note=f"not applied: {tail[0] if tail else 'no output'}")
    elif rc is None:  # a hang is not a failing test: reported apart, with the test it hung in
        row.update(killed=None, note=f"timed out after {timeout_s:.0f} s in {doc.get('running')}")
    elif "ERROR collecting" in log.read_text():  # a test module failed to import: the session says nothing
        row.update(killed=None, note="collection error (not a verdict): " + (row["why"] or "see the log"))
    elif rc in (0, 1):  # pytest: 0 all passed, 1 some test failed
        row.update(killed=bool(doc.get("failed") or doc.get("errors")))
    else:  # interrupted, internal or usage error: no verdict
        row.update(killed=None, note=f"pytest exit {rc}")
    return row


def bank_mutants() -> tuple[list[str], list[str]]:
    """(allocator/scheduler-side mutants, worker-side mutants) of the harness's bank."""
    from harness.mutants import REGISTRY

    return [n for n, m in REGISTRY.items() if not m.runner], [n for n, m in REGISTRY.items() if m.runner]


# ---- output -----------------------------------------------------------------------------------------------

def table(rows: list[dict], header: str, rules: list, stubs: list, settings: list) -> str:
    """The Markdown table, after a line on the stock run, footnoted with every rule, stub and setting used."""
    stock = next((r for r in rows if r["mutant"] == "stock"), None)
    counts = (stock or {}).get("deselected") or {}
    out = [header, ""]
    if stock:
        out += [f"Stock vLLM: {stock['passed']} passed, {stock['skipped']} skipped, {stock['failed']} failed, "
                f"{stock['errors']} errors, {sum(c['tests'] for c in counts.values())} deselected and "
                f"{sum(c['files'] for c in counts.values())} files not collected (rules below), "
                f"{stock['seconds']} s" + (f"; {stock['note']}" if stock.get("note") else "") + ".", ""]
    out += ["| mutant | vLLM's tests killed? | first failing test | seconds |", "|---|---|---|---|"]
    for r in rows:
        if r["mutant"] == "stock":
            continue
        if r.get("na"):
            killed, seconds = r["na"], "-"
        else:
            killed = r.get("note") if r["killed"] is None else "yes" if r["killed"] else "no"
            seconds = r["seconds"]
        first = f"`{r['first_failure']}`" if r.get("first_failure") else "-"
        out.append(f"| `{r['mutant']}` | {killed} | {first} | {seconds} |")
    out += ["", "Not run as written (named rules in `bench/measure/peer_plugin.py`; counts from the stock run):", ""]
    for name, reason, _ in rules:
        c = counts.get(name, {"tests": 0, "files": 0})
        out.append(f"- `{name}`: {reason} ({c['tests']} tests deselected, {c['files']} files not collected)")
    out += ["", "Stubs (network or GPU only):", "", *(f"- `{n}`: {why}" for n, why in stubs or [("none", "")]),
            "", "Settings:", "", *(f"- `{n}`: {why}" for n, why in settings or [("none", "")])]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm", help="vLLM release whose tests to fetch (default: the installed one)")
    parser.add_argument("--only", action="append", default=[], help="run only this mutant (repeatable)")
    parser.add_argument("--mutants-dir", help="also run every *.py mutant file in this folder")
    parser.add_argument("--stock-only", action="store_true", help="run stock vLLM only")
    parser.add_argument("--jobs", type=int, default=1, help="mutant runs at once (processes)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per pytest session")
    parser.add_argument("--full-cleanup", action="store_true",
                        help="keep vLLM's per-test global cleanup (slower; see the plugin's SETTINGS)")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "hybrid-harness"),
                        help="where the sdist, the extracted tests and the run logs are kept")
    parser.add_argument("--out", help="Markdown table here, the raw rows as JSON beside it (.json)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be positive")
    installed = importlib.metadata.version("vllm")
    version = args.vllm or installed
    if version != installed:
        print(f"note: vLLM {version}'s tests run against the installed vLLM {installed}", file=sys.stderr)
    cache = Path(args.cache)
    from harness.errors import BadInput
    from harness.mutants import get_mutant

    core, worker = bank_mutants()
    try:
        for name in args.only:
            get_mutant(name)  # an unknown name or a broken file is bad input, before anything runs
        tests_dir = extract_tests(fetch_sdist(version, cache), version, cache)
    except (BadDownload, BadInput, urllib.error.URLError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD
    chosen = args.only or core
    names = [] if args.stock_only else [n for n in chosen if n not in worker]
    if args.mutants_dir and not args.stock_only:
        names += [str(p) for p in sorted(Path(args.mutants_dir).glob("*.py"))]
    not_run = [] if args.stock_only else [n for n in (args.only or worker) if n in worker]

    sys.path.insert(0, str(HERE))
    import peer_plugin  # for its lists only: importing it changes nothing

    settings = [s for s in peer_plugin.SETTINGS if not (args.full_cleanup and s[0] == "skip_global_cleanup")]
    print(f"vLLM {version}'s tests in {tests_dir}")
    for title, entries in (("deselection rules", [(n, why) for n, why, _ in peer_plugin.RULES]),
                           ("stubs", peer_plugin.STUBS), ("settings", settings)):
        print(f"{title}:", *(f"  {n}: {why}" for n, why in entries), sep="\n")
    logs = cache / "peer-logs" / version
    stock = run_tests(tests_dir, None, logs, args.timeout, args.full_cleanup)
    print(f"stock: {stock['passed']} passed, {stock['skipped']} skipped, {stock['failed']} failed, "
          f"{stock['errors']} errors, {stock['seconds']} s; deselected {stock['deselected']}", flush=True)
    rows = [stock]
    if stock["killed"] is not False:  # on a red or hung stock run every mutant would look killed
        print(f"error: the stock run is not green: {stock.get('note') or stock['first_failure']} "
              f"({stock['why']}); log {stock['log']}", file=sys.stderr)
    else:
        def one(name: str) -> dict:
            row = run_tests(tests_dir, name, logs, args.timeout, args.full_cleanup)
            print(f"{name}: killed={row['killed']} first={row['first_failure']} {row['seconds']} s "
                  f"{row.get('note') or row['why'] or ''}", flush=True)
            return row

        with ThreadPoolExecutor(args.jobs) as pool:
            rows += pool.map(one, names)
        rows += [{"mutant": n, "na": "n/a (worker code)", "killed": None} for n in not_run]
    if args.out:
        from harness.stamp import stamp

        command = "bench/measure/peer_tests.py " + " ".join(sys.argv[1:] if argv is None else argv)
        text = table(rows, stamp(command.strip()) + f"\n\nvLLM {version}'s own unit tests "
                     f"({', '.join(SELECTED)}), `pytest -x` once per mutant: killed = some test fails or errors.",
                     peer_plugin.RULES, peer_plugin.STUBS, settings)
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
        raw = [{k: v for k, v in r.items() if k != "log"} for r in rows]  # logs are this machine's, not results
        out.with_suffix(".json").write_text(json.dumps({"vllm": version, "selected": SELECTED, "rows": raw},
                                                       indent=1) + "\n")
        print(f"wrote {out} and {out.with_suffix('.json')}; pytest logs in {logs}")
    return EXIT_OK if stock["killed"] is False else EXIT_STOCK_RED


if __name__ == "__main__":
    sys.exit(main())
