"""Is an emitted regression test red exactly where its issue reproduces? Every vLLM-style test across the releases.

    python tools/emitted_across.py [ISSUE ...] [--releases A..B] [--from X] [--tests DIR] [--keep DIR]
                                   [--out bench/results/emitted_across_releases.md] [--update]

For each known issue with a vLLM-style test (`regression --style vllm`; default: all of them), the test is emitted
once, from the issue's finding on a release where it reproduces (the newest such release in
bench/results/known_releases.json, bisect --known's table, or --from X): the repro is run on that release's tree and
`regression FINDING --style vllm` records the test there (tools/upstream.py's finding_for, as its `test` does). Then
every covered release (harness/vllm_trees.RELEASES, or --releases) runs all the tests in one pytest session inside
its own test tree (its sdist's tests, tools/upstream.py's test_tree, with vLLM's conftest and peer_tests' plugin),
with that release's tree first on PYTHONPATH. A cell is the test's outcome there:

  fails       an assertion of the test fails, or vLLM's code under test raises (a ValueError where it must
              refuse): the test is red for the bug's reason
  passes      the test passes
  errors      the test raised what a call this release does not have raises (TypeError, AttributeError,
              ImportError, NameError): it cannot run its course there
  cannot run  the file did not collect, or pytest did not run it (the reason is kept)

and it is judged against the issue's row of the known x release table: red (fails) exactly where the issue
reproduces, green (passes) where it does not (fixed, clean, or other findings: the issue itself is not needed).
A release that cannot express the repro (n/a: the feature is absent) is not judged; its outcome is still shown.

--tests DIR reuses the tests emitted by an earlier run (DIR/ISSUE.py and DIR/places.json, what --keep writes)
instead of emitting them again. Writes a table and its JSON records (--out; --update keeps the other issues' rows
of an earlier run). Exit 0 when every judged cell matches, 1 when one does not, 2 bad input.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "measure"))

from harness.errors import BadInput  # noqa: E402
from harness.vllm_trees import RELEASES, fetch_tree, parse_releases  # noqa: E402

_spec = importlib.util.spec_from_file_location("upstream", ROOT / "tools" / "upstream.py")
upstream = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(upstream)

KNOWN_RELEASES = ROOT / "bench" / "results" / "known_releases.json"
OUT = ROOT / "bench" / "results" / "emitted_across_releases.md"
SESSION_TIMEOUT_S = 1800
# what a test raises where this release lacks a call it makes (another signature, attribute or module): the test
# cannot run its course there, which says nothing of the bug
API_ERRORS = ("TypeError", "AttributeError", "ImportError", "ModuleNotFoundError", "NameError")
# what a release raises on this CPU-only machine only (in vLLM's CI, on a GPU, it would run): vLLM 0.26.0-0.27.1
# resolve no CPU platform for their CUDA wheel here and pin host memory at import (torch_utils.PIN_MEMORY)
MACHINE_ERRORS = ("pin_memory=True requires a CUDA or other accelerator backend",)
MACHINE = "on this CPU-only machine"
ABSENT = "this release has no module"


# -- which issues, where they reproduce --------------------------------------------------------------------------
def issues_with_test() -> list[str]:
    """The known issues `regression --style vllm` writes a test for."""
    from harness.known_issues import KNOWN_ISSUES
    from harness.vllm_style import folder_for

    out = []
    for k in KNOWN_ISSUES:
        try:
            folder_for(k)
        except BadInput:
            continue
        out.append(k.id)
    return out


def table_status(issue: str, releases: list[str], results: dict | None = None) -> dict[str, str]:
    """{release: the issue's cell in the known x release table}: shows / clean / other / n/a / error (bisect's
    statuses), "missing" where the table has no such release."""
    from harness.bisect import issue_target, status
    from harness.known_issues import known_issue_by_id

    results = results if results is not None else json.loads(KNOWN_RELEASES.read_text())
    target = issue_target(known_issue_by_id(issue))
    return {v: status(target, results[v].get(issue, {"error": "harness error"})) if v in results else "missing"
            for v in releases}


def expected_outcome(status: str) -> str | None:
    """What the issue's test must do on a release with this table status; None: not judged (the release cannot
    express the repro, or the table has no row)."""
    from harness.bisect import CLEAN, OTHER, SHOWS

    return {SHOWS: "fails", CLEAN: "passes", OTHER: "passes"}.get(status)


def emit_release(issue: str, statuses: dict[str, str], chosen: str | None = None) -> str:
    """The release the test is emitted on: `chosen`, else the newest one where the issue reproduces."""
    from harness.bisect import SHOWS

    showing = [v for v in RELEASES if statuses.get(v) == SHOWS]
    if chosen:
        if statuses.get(chosen, SHOWS) != SHOWS:
            raise BadInput(f"{issue} does not reproduce on vLLM {chosen} ({statuses[chosen]}): emit it where it does")
        return chosen
    if not showing:
        raise BadInput(f"{issue} reproduces on no release in {KNOWN_RELEASES.relative_to(ROOT)}")
    return showing[-1]


# -- emit --------------------------------------------------------------------------------------------------------
def emit(issue: str, version: str, work: Path) -> tuple[str, str]:
    """(test text, its place in vLLM's tree): the issue's repro run on vLLM `version`'s tree, its finding emitted
    there by `regression --style vllm` (as tools/upstream.py's `test` emits it)."""
    tree = fetch_tree(version)
    artifact = upstream.finding_for(issue, tree, work / "finding")
    test_file = work / "test.py"
    out = subprocess.run([upstream.PY, "-m", "harness", "--vllm", str(tree), "regression", str(artifact), "--style",
                          "vllm", "--issue", issue, "-o", str(test_file)],
                         cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.returncode:
        raise BadInput(f"regression --style vllm on {version} failed: {out.stderr.strip()[-400:]}")
    return test_file.read_text(), out.stdout.split("its place in vLLM's tree: ", 1)[1].rstrip(")\n")


# -- run ---------------------------------------------------------------------------------------------------------
def _first_line(text: str) -> str:
    """The line of a failure that says what happened (a native traceback's exception line: `AssertionError: ...`),
    else pytest's first `E ...` line, else the last non-blank one."""
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    raised = [ln.strip() for ln in lines if re.match(r"^[\w.]*(Error|Exception|Exit|Interrupt)\b", ln)]
    e_lines = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    return (raised[-1] if raised else e_lines[0] if e_lines else lines[-1].strip() if lines else "")[:300]


def _outcome_of(case: ET.Element) -> tuple[str, str]:
    """One junit testcase: (outcome, why)."""
    for tag in ("failure", "error"):
        node = case.find(tag)
        if node is not None:
            text = (node.get("message") or "") + "\n" + (node.text or "")
            why = _first_line(node.text or "") or (node.get("message") or "")[:300]
            gone = re.search(r"No module named '(vllm[\w.]*)'", text)
            if gone:  # the code the test drives is not in this release (the V1 runner in 0.34.0)
                return "cannot run", f"{ABSENT} {gone.group(1)}"
            if tag == "error":  # a setup error or a file that does not collect
                return "cannot run", why
            # red for the test's reason: an assertion, or an exception vLLM's code under test raised (the bug's
            # consequence may be one: allocate_slots raising where it must refuse); the test could not run its course
            # here: what a call this release does not have raises (a signature, an attribute, an import)
            raised = (node.get("message") or why).split(":", 1)[0].rsplit(".", 1)[-1].strip()
            if any(m in text for m in MACHINE_ERRORS):
                return "cannot run", f"{MACHINE}: {why}"
            return ("errors" if raised in API_ERRORS else "fails"), why
    skipped = case.find("skipped")
    if skipped is not None:
        return "cannot run", f"skipped: {(skipped.get('message') or '')[:300]}"
    return "passes", ""


def run_release(version: str, tests: dict[str, tuple[str, str]], work: Path) -> dict[str, dict]:
    """Every test placed into vLLM `version`'s own test tree and run there in one pytest session (vLLM's conftest,
    peer_tests' plugin and settings, the release's tree first on PYTHONPATH). {issue: {outcome, why}}."""
    import peer_tests

    started = time.monotonic()
    try:
        tree = fetch_tree(version)
        sdist_tests = upstream.test_tree(version)
    except (BadInput, peer_tests.BadDownload, OSError) as exc:
        return {issue: {"outcome": "cannot run", "why": f"no tree or tests for vLLM {version}: {exc}"}
                for issue in tests}
    dest = work / f"tests-{version}"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(sdist_tests, dest)
    places = {}
    for issue, (text, place) in tests.items():
        # a folder outside the extracted tree (tests/v1/worker): its package files from the sdist
        upstream.folder_from_sdist(version, str(Path(place).parent), dest, [])
        (dest / place).write_text(text)
        places[issue] = place
    junit, report, log = work / f"{version}.xml", work / f"{version}.json", work / f"{version}.log"
    cmd, env = peer_tests.pytest_command(None, report, False)
    cmd = [upstream.PY, *cmd[1:len(cmd) - len(peer_tests.SELECTED)], f"--junitxml={junit}", *places.values()]
    cmd.remove("-x")
    cmd.insert(cmd.index("-q"), "--continue-on-collection-errors")  # a file that does not import stops no other
    env["PYTHONPATH"] = os.pathsep.join([str(tree), env["PYTHONPATH"]])
    env.pop("HH_VLLM", None)
    rc = peer_tests.run_logged(cmd, dest, env, log, SESSION_TIMEOUT_S)
    seconds = round(time.monotonic() - started, 1)
    cases: dict[str, ET.Element] = {}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            # "tests.v1.core.test_hh_x" (a test's class path, or a file that does not collect)
            cases.setdefault(case.get("classname") or case.get("name") or "", case)
    tail = (log.read_text().strip().splitlines() or [""])[-1][:300] if log.exists() else ""
    out_rows = {}
    for issue, place in places.items():
        module = place.removesuffix(".py").replace("/", ".")
        case = cases.get(module) or next((c for k, c in cases.items() if k.endswith(module)), None)
        if case is None:
            why = "timed out" if rc is None else f"pytest ran no test of it (exit {rc}): {tail}"
            out_rows[issue] = {"outcome": "cannot run", "why": why}
        else:
            outcome, why = _outcome_of(case)
            out_rows[issue] = {"outcome": outcome, "why": why}
    summary = ", ".join(f"{i} {r['outcome']}" for i, r in out_rows.items())
    print(f"  vLLM {version}: {summary} ({seconds} s; log {log})", flush=True)
    for r in out_rows.values():
        r["session_s"] = seconds
    return out_rows


# -- the table ---------------------------------------------------------------------------------------------------
CELL_STATUS = {"shows": "reproduces", "clean": "clean", "other": "other findings", "n/a": "n/a",
               "error": "harness error", "missing": "not in the table"}


def judge(outcome: str, status: str, why: str = "") -> str:
    """yes / no / n/a (not judged: the release cannot express the repro, this machine cannot run the test there, or
    the release has no module the test drives)."""
    want = expected_outcome(status)
    if want is None or (outcome == "cannot run" and why.startswith((MACHINE, ABSENT))):
        return "n/a"
    return "yes" if outcome == want else "no"


def _short(why: str) -> str:
    """A failure line without its object addresses (which differ run to run), for grouping like cells."""
    return re.sub(r" at 0x[0-9a-f]+", "", why or "")


def render(records: list[dict], releases: list[str], command: str) -> str:
    from harness.stamp import stamp

    lines = [stamp(command), "",
             "Each known issue's vLLM-style regression test (`regression --style vllm`), emitted once from the issue's "
             "finding on the release named (the newest where it reproduces), then run inside every release's own test "
             "tree (its sdist's tests, vLLM's conftest) with that release's tree first on PYTHONPATH. A cell: the "
             "test's outcome / the issue's row in bench/results/known_releases.md (bisect --known). The test must be "
             "red (`fails`: an assertion, or an exception vLLM's code under test raised) exactly where the issue "
             "reproduces and `pass` where it does not (fixed, clean, other findings). `errors`: it raised what a call "
             "this release lacks raises (TypeError, AttributeError, ImportError): it cannot run its course there. "
             "`cannot run`: it did not collect or was not run. Not judged: `n/a` releases (they cannot express the "
             "repro), a release without the module the test drives, and what this CPU-only machine cannot run. "
             "`matches`: judged cells as required / judged cells.", "",
             "| known issue | emitted on | place | " + " | ".join(releases) + " | matches |",
             "|---|---|---|" + "---|" * len(releases) + "---|"]
    mismatches, unjudged = [], []
    for r in records:
        if "error" in r:
            lines.append(f"| `{r['issue']}` | cannot emit: {r['error']} | | " + " | ".join("" for _ in releases)
                         + " | **no** |")
            continue
        cells, judged, good, shown = [], 0, 0, False
        groups: dict[tuple[str, str, str], list[str]] = {}
        for v in releases:
            c = r["releases"].get(v)
            if c is None:
                cells.append("")
                continue
            mark = {"yes": "", "no": " **MISMATCH**", "n/a": ""}[c["matches"]]
            label = "fixed" if c["status"] == "clean" and shown else CELL_STATUS.get(c["status"], c["status"])
            shown |= c["status"] == "shows"
            cells.append(f"{c['outcome']} / {label}{mark}")
            if c["matches"] != "n/a":
                judged += 1
                good += c["matches"] == "yes"
            if c["matches"] == "no":
                mismatches.append(f"- `{r['issue']}` on {v}: {c['outcome']} where the table says {label}: "
                                  f"{_short(c.get('why')) or 'passed'}" + (f" ({c['note']})" if c.get("note") else ""))
            elif c["outcome"] not in ("fails", "passes") or (c["matches"] == "n/a" and c["outcome"] == "fails"):
                groups.setdefault((label, c["outcome"], _short(c.get("why"))), []).append(v)
        for (label, outcome, why), vs in groups.items():
            unjudged.append(f"- `{r['issue']}` on {', '.join(vs)} ({label}): {outcome}: {why}")
        lines.append(f"| `{r['issue']}` | {r['emitted_on']} | `{r['place']}` | " + " | ".join(cells)
                     + f" | {good}/{judged}" + ("" if good == judged else " **no**") + " |")
    if mismatches:
        lines += ["", "Cells that do not match (the first line of what the test raised):", "", *mismatches]
    if unjudged:
        lines += ["", "Cells not judged, and cells whose test did not run its course:", "", *unjudged]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("issues", nargs="*", help="default: every known issue with a vLLM-style test")
    parser.add_argument("--releases", help="A..B or A,B,C (default: every release bisect covers)")
    parser.add_argument("--from", dest="emit_from", help="emit every named issue's test on this release")
    parser.add_argument("--tests", help="reuse the tests a --keep of an earlier run wrote here (no emitting)")
    parser.add_argument("--keep", help="also copy the emitted tests here (ISSUE.py and places.json)")
    parser.add_argument("--out", default=str(OUT), help="the table (and its records beside it as JSON)")
    parser.add_argument("--update", action="store_true", help="keep --out's records of the issues not named")
    args = parser.parse_args(argv)
    try:
        releases = parse_releases(args.releases)
        known = issues_with_test()
        issues = args.issues or known
        unknown = sorted(set(issues) - set(known))
        if unknown:
            raise BadInput(f"no vLLM-style test for {', '.join(unknown)} (have: {', '.join(known)})")
        results = json.loads(KNOWN_RELEASES.read_text())
        work = Path(tempfile.mkdtemp(prefix="hh-emitted-across-"))
        print(f"emitted tests of {len(issues)} issue(s) on vLLM {', '.join(releases)} (work: {work})", flush=True)
        tests, records = {}, {}
        places_file = Path(args.tests) / "places.json" if args.tests else None
        stored = json.loads(places_file.read_text()) if places_file else {}
        for issue in issues:
            statuses = table_status(issue, RELEASES, results)
            record = {"issue": issue}
            started = time.monotonic()
            try:
                if args.tests:
                    if issue not in stored:
                        raise BadInput(f"{places_file} has no test of {issue}")
                    record["emitted_on"], place = stored[issue]["emitted_on"], stored[issue]["place"]
                    text = (Path(args.tests) / f"{issue}.py").read_text()
                else:
                    record["emitted_on"] = emit_release(issue, statuses, args.emit_from)
                    text, place = emit(issue, record["emitted_on"], work / issue)
                record["place"] = place
                tests[issue] = (text, place)
                record["emit_s"] = round(time.monotonic() - started, 1)
                print(f"{issue}: emitted on vLLM {record['emitted_on']} ({place}, {record['emit_s']} s)", flush=True)
            except BadInput as exc:
                record["error"] = str(exc)
                print(f"{issue}: {exc}", flush=True)
            record["statuses"] = statuses
            records[issue] = record
        if args.keep:
            keep = Path(args.keep)
            keep.mkdir(parents=True, exist_ok=True)
            for issue, (text, _) in tests.items():
                (keep / f"{issue}.py").write_text(text)
            (keep / "places.json").write_text(json.dumps(
                {i: {"place": tests[i][1], "emitted_on": records[i]["emitted_on"]} for i in tests}, indent=1) + "\n")
        for v in releases:
            if not tests:
                break
            rows = run_release(v, tests, work)
            for issue, row in rows.items():
                status = records[issue]["statuses"].get(v, "missing")
                cell = {**row, "status": status, "matches": judge(row["outcome"], status, row.get("why", ""))}
                if status == "other":  # what the repro showed there instead
                    known = results[v][issue].get("known", {})
                    cell["note"] = "the repro there shows " + ", ".join(
                        f"{sig} [{known.get(sig, 'not attributed')}]" for sig in results[v][issue]["signatures"])
                records[issue].setdefault("releases", {})[v] = cell
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = [records[i] for i in issues]
    for r in out:
        r.pop("statuses", None)
    out_json = Path(args.out).with_suffix(".json")
    if args.update and out_json.exists():  # the other issues' records of an earlier run stay
        earlier = json.loads(out_json.read_text())["records"]
        out = [r for r in earlier if r["issue"] not in issues] + out
        order = issues_with_test()
        out.sort(key=lambda r: order.index(r["issue"]) if r["issue"] in order else len(order))
        releases = [v for v in RELEASES if any(v in r.get("releases", {}) for r in out)]
    command = "python tools/emitted_across.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    text = render(out, releases, command)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    out_json.write_text(json.dumps({"releases": releases, "records": out}, indent=1) + "\n")
    bad = [r for r in out if "error" in r or any(c["matches"] == "no" for c in r.get("releases", {}).values())]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
