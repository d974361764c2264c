"""What vLLM gets from hybrid-harness, checked inside vLLM's own tree (issue 38):

    python tools/upstream.py patch ISSUE [--vllm X]      apply upstream/patches/ISSUE.patch to a copy of vLLM X's tree
    python tools/upstream.py suite [ISSUE ...] [--vllm X] vLLM's peer suite (tests/v1/core, tests/v1/kv_connector/unit)
                                                          on the stock tree and the patched one: counts side by side
    python tools/upstream.py test ISSUE [--vllm X] [--fixed-in Y] [--hand]
        the issue's `regression --style vllm` test, placed into vLLM X's own test tree (its sdist's tests, fetched and
        sha256-checked by bench/measure/peer_tests.py) and run there with vLLM's conftest: on stock X it must fail;
        on X with the patch (or on release Y) it must pass. Also replays the repro on the patched tree (clean) and,
        for a test outside the extracted tree (a model runner's, tests/v1/worker), runs vLLM's own tests there that
        import a module the patch changes, stock and patched: the patch adds no failure. --hand: the hand-sized
        test upstream/tests/ISSUE.py instead of the emitted one (what the bug report shows first): its first line,
        `# vLLM file: tests/...py`, names the existing vLLM test file it is appended to (in the copied test tree,
        stock and patched, after the patch's own test hunks), and only its tests there are run (`file::test_x`).
    python tools/upstream.py tests [ISSUE ...] [--vllm X] [--fixed-in Y] [--jobs N] [--out F.md]
        `test` for every known issue open on X (bisect --known's results), each test it has (emitted, hand-sized):
        a table and its JSON records (bench/results/upstream_tests_X.md, read by the bug reports)

Trees: artifacts/cache/vllm-trees/X (harness/vllm_trees.py), patched copies in artifacts/cache/vllm-patched/X/ISSUE
(hard links, then `patch -p1`: patch writes new files, so the stock tree is untouched). A patch may also change
vLLM's own tests (hunks under tests/, where a test pinned the bug): those go to a copy of the sdist's test tree that
runs for the patched tree only; the stock tree runs the unpatched tests. Every vLLM process here is one python
(`.venv-0.33.0`'s where built, else this one: its packages, not its vLLM) with the tree first on PYTHONPATH.
Exit 0 as expected, 1 not as expected, 2 bad input.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "measure"))

from harness.errors import BadInput  # noqa: E402
from harness.vllm_trees import CACHE, fetch_tree, venv_python  # noqa: E402

PATCHES = ROOT / "upstream" / "patches"
HAND_TESTS = ROOT / "upstream" / "tests"  # hand-sized tests for vLLM's tree, one per issue where written
PATCHED = CACHE / "vllm-patched"
PY = str(venv_python("0.33.0") or sys.executable)
SDIST_CACHE = Path.home() / ".cache" / "hybrid-harness"


def patch_file(issue: str, version: str = "0.33.0") -> Path:
    """upstream/patches/ISSUE.patch is against 0.33.0; upstream/patches/X/ISSUE.patch against release X."""
    path = PATCHES / version / f"{issue}.patch"
    path = path if path.exists() or version != "0.33.0" else PATCHES / f"{issue}.patch"
    if not path.exists():
        raise BadInput(f"no source patch for {issue} (have: {', '.join(p.stem for p in sorted(PATCHES.glob('*.patch')))})")
    return path


PATCHED_TOPS = ("vllm", "tests")  # what a patch may change: vLLM's package (the tree) and vLLM's own tests


def patch_parts(issue: str, version: str) -> dict[str, str]:
    """The issue's patch split by the top folder its files sit in: {"vllm": hunks, "tests": hunks}, each a patch of
    its own (the note above the first file dropped). A file elsewhere is bad input."""
    parts: dict[str, list[str]] = {}
    lines, top = patch_file(issue, version).read_text().splitlines(keepends=True), None
    for i, line in enumerate(lines):
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ b/"):
            top = lines[i + 1][6:].split("/", 1)[0]
            if top not in PATCHED_TOPS:
                raise BadInput(f"{issue}.patch changes {lines[i + 1][6:].strip()}: only vllm/ and tests/ are placed")
        if top:
            parts.setdefault(top, []).append(line)
    return {top: "".join(hunks) for top, hunks in parts.items()}


def apply_hunks(dest: Path, issue: str, version: str, top: str) -> None:
    """Apply the issue's hunks under `top` in `dest` (`patch -p1`); BadInput unless they apply cleanly."""
    hunks = patch_parts(issue, version).get(top)
    if not hunks:
        return
    out = subprocess.run(["patch", "-p1", "--no-backup-if-mismatch"], input=hunks, cwd=dest, capture_output=True,
                         text=True)
    if out.returncode or "offset" in out.stdout or "fuzz" in out.stdout.lower():
        raise BadInput(f"{issue}.patch does not apply cleanly to vLLM {version}'s {top}/: {out.stdout.strip()} "
                       f"{out.stderr.strip()}")


def patched_tree(version: str, issues: list[str]) -> Path:
    """A copy of vLLM `version`'s tree with the issues' vllm/ hunks applied (`patch -p1`, must apply cleanly). The
    copy is kept while its marker names the same hunks (a changed patch rebuilds it)."""
    stock = fetch_tree(version)
    dest = PATCHED / version / "+".join(issues)
    stamp = hashlib.sha256("".join(patch_parts(i, version).get("vllm", "") for i in issues).encode()).hexdigest()
    marker = dest / ".complete"
    if marker.exists() and marker.read_text().split()[-1:] == [stamp]:
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(stock), str(dest)], check=True)
    # the stock tree's own marker came along as a hard link: unlinked, so that neither it is rewritten nor an
    # interrupted copy counts as patched
    marker.unlink(missing_ok=True)
    try:
        for issue in issues:
            apply_hunks(dest, issue, version, "vllm")
    except BadInput:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    marker.write_text("\n".join(issues) + f"\n{stamp}\n")
    return dest


def patched_tests(tests: Path, version: str, issues: list[str], dest: Path) -> Path:
    """vLLM's test tree `tests` for the tree with these issues' patches: `tests` itself where no patch changes
    tests/, else `dest` (a copy of it, or `tests` itself when the same) with the patches' tests/ hunks applied
    (must apply cleanly)."""
    if not any("tests" in patch_parts(issue, version) for issue in issues):
        return tests
    if dest != tests:
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(tests, dest)
    for issue in issues:
        apply_hunks(dest, issue, version, "tests")
    return dest


def test_tree(version: str) -> Path:
    """vLLM `version`'s own tests (sdist, sha256-checked), extracted once by peer_tests."""
    import peer_tests

    return peer_tests.extract_tests(peer_tests.fetch_sdist(version, SDIST_CACHE), version, SDIST_CACHE)


def patched_modules(patch: Path) -> list[str]:
    """The vLLM modules a patch changes (`vllm.v1.worker.gpu.model_runner`), not the tests it changes."""
    return [line[6:].strip().removesuffix(".py").replace("/", ".")
            for line in patch.read_text().splitlines() if line.startswith("+++ b/vllm/")]


def folder_from_sdist(version: str, folder: str, tests: Path, importing: list[str] = ()) -> list[str]:
    """From vLLM's sdist, where the extracted test tree (vLLM's allocator and connector tests) lacks them: the
    package files (`__init__.py`, `conftest.py`) of `folder` and the folders above it, and the tests directly in
    `folder` that import one of the modules `importing` (vLLM's own tests of the code a patch changes). Returns
    those tests' paths."""
    import tarfile

    import peer_tests

    wanted = {f"{'/'.join(folder.split('/')[:i])}/{name}" for i in range(1, folder.count("/") + 2)
              for name in ("__init__.py", "conftest.py")}
    top, peers = f"vllm-{version}/", []
    with tarfile.open(peer_tests.fetch_sdist(version, SDIST_CACHE), "r:gz") as tar:
        for member in tar:
            rel = member.name[len(top):]
            if not member.isfile() or (tests / rel).exists():
                continue
            peer = rel.startswith(f"{folder}/test_") and "/" not in rel[len(folder) + 1:] and rel.endswith(".py")
            if rel in wanted or peer:
                text = tar.extractfile(member).read()
                if peer and not any(f"{m} import".encode() in text or f"import {m}\n".encode() in text
                                    for m in importing):
                    continue
                (tests / rel).parent.mkdir(parents=True, exist_ok=True)
                (tests / rel).write_bytes(text)
                peers += [rel] if peer else []
    (tests / folder).mkdir(parents=True, exist_ok=True)
    return sorted(peers)


HAND_HEADER = "# vLLM file: "


def hand_test(issue: str) -> tuple[Path, str, list[str]]:
    """upstream/tests/ISSUE.py: its path, the vLLM test file its first line names (`# vLLM file: tests/...py`, where
    it is appended) and the names of the tests it adds there."""
    import ast

    path = HAND_TESTS / f"{issue}.py"
    if not path.exists():
        raise BadInput(f"no hand-sized test {path.relative_to(ROOT)}")
    text = path.read_text()
    first = text.split("\n", 1)[0]
    target = first[len(HAND_HEADER):].strip() if first.startswith(HAND_HEADER) else ""
    if not (target.startswith("tests/") and target.endswith(".py")):
        raise BadInput(f"{path.relative_to(ROOT)}: its first line must name the vLLM test file it is appended to "
                       f"({HAND_HEADER}tests/...py)")
    names = [node.name for node in ast.parse(text).body
             if isinstance(node, ast.FunctionDef) and node.name.startswith("test")]
    if not names:
        raise BadInput(f"{path.relative_to(ROOT)} defines no test")
    return path, target, names


def appended(vllm_file: str, hand: str) -> str:
    """A vLLM test file with a hand-sized test appended as it would be merged: its header line dropped, two blank
    lines between."""
    return vllm_file.rstrip("\n") + "\n\n\n" + hand.split("\n", 1)[1].lstrip("\n")


def file_from_sdist(version: str, rel: str, tests: Path) -> None:
    """vLLM's test file `rel` from its sdist into `tests` where the extracted tree lacks it; BadInput if the sdist
    has none (a hand-sized test is appended to an existing file)."""
    import tarfile

    import peer_tests

    if (tests / rel).exists():
        return
    with tarfile.open(peer_tests.fetch_sdist(version, SDIST_CACHE), "r:gz") as tar:
        try:
            member = tar.getmember(f"vllm-{version}/{rel}")
        except KeyError:
            raise BadInput(f"vLLM {version}'s sdist has no {rel}") from None
        (tests / rel).parent.mkdir(parents=True, exist_ok=True)
        (tests / rel).write_bytes(tar.extractfile(member).read())


def pytest_run(tests: Path, tree: Path, paths: list[str], log: Path, stop_first: bool = False) -> dict:
    """pytest in vLLM's test folder with `tree` first on PYTHONPATH and peer_tests' plugin (its deselection rules
    and CPU settings): the plugin's counts, and the failing tests."""
    import peer_tests

    report = log.with_suffix(".json")
    report.unlink(missing_ok=True)
    cmd, env = peer_tests.pytest_command(None, report, False)
    cmd = [PY, *cmd[1:len(cmd) - len(peer_tests.SELECTED)], *paths]
    if not stop_first:
        cmd.remove("-x")
    env["PYTHONPATH"] = os.pathsep.join([str(tree), env["PYTHONPATH"]])
    env.pop("HH_VLLM", None)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        rc = subprocess.run(cmd, cwd=tests, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    doc = json.loads(report.read_text()) if report.exists() else {}
    return {"exit": rc, **{k: doc.get(k) for k in ("passed", "failed", "skipped", "errors")},
            "failures": [f.split(": ", 1)[0] for f in doc.get("failures") or []], "log": str(log)}


def cmd_patch(args) -> int:
    for issue in args.issues:
        print(f"{issue}: applies cleanly to vLLM {args.vllm}: {patched_tree(args.vllm, [issue])}")
    return 0


def cmd_suite(args) -> int:
    """Stock and patched counts of vLLM's peer suite; exit 1 when the patched tree fails a test stock passes."""
    import peer_tests

    tests = test_tree(args.vllm)
    # a folder of this run's own: two suites of one release at once would overwrite each other's pytest reports
    (CACHE / "upstream-logs").mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix=f"{args.vllm}-", dir=CACHE / "upstream-logs"))
    folder = PATCHES / args.vllm if (PATCHES / args.vllm).is_dir() else PATCHES
    issues = args.issues or sorted(p.stem for p in folder.glob("*.patch"))
    trees = {"stock": fetch_tree(args.vllm)}
    sets = [[i] for i in issues] + ([issues] if len(issues) > 1 and args.together else [])
    trees.update(("+".join(s), patched_tree(args.vllm, s)) for s in sets)
    # the stock tree runs vLLM's tests as shipped; a patched one, with its patches' tests/ hunks
    copies = Path(tempfile.mkdtemp(prefix="hh-upstream-tests-"))
    test_dirs = {"stock": tests, **{"+".join(s): patched_tests(tests, args.vllm, s, copies / "+".join(s))
                                    for s in sets}}
    rows = {name: pytest_run(test_dirs[name], tree, list(peer_tests.SELECTED), logs / f"{name}.log")
            for name, tree in trees.items()}
    kept = Path(args.out).with_suffix(".json") if args.out and args.update else None
    if kept and kept.exists():  # the other patches' rows of an earlier run stay (beside this run's stock)
        earlier = json.loads(kept.read_text())
        rows.update((k, {**v, "kept": True}) for k, v in earlier.items() if k not in rows)
    rows = {k: rows[k] for k in ["stock", *sorted(set(rows) - {"stock"})]}
    stock_failed = set(rows["stock"]["failures"])
    lines = [f"vLLM {args.vllm}'s peer suite ({', '.join(peer_tests.SELECTED)}), stock tree vs patched tree. A test "
             "that fails on the patched tree only is run again alone there: one that then passes is marked flaky "
             "(timing-sensitive on a loaded machine) and not counted.", "",
             "| tree | passed | failed | errors | skipped | new failures |", "|---|---|---|---|---|---|"]
    bad = False
    for name, r in rows.items():
        if r.pop("kept", False):  # judged against the stock run of its own time (this run's stock may differ)
            new = r.get("new_failures", sorted(set(r["failures"]) - stock_failed))
        else:
            new = r["new_failures"] = sorted(set(r["failures"]) - stock_failed)
            r["flaky"] = [n for n in new
                          if not pytest_run(test_dirs[name], trees[name], [n], logs / f"{name}.rerun.log")["exit"]]
        bad |= len(set(new) - set(r.get("flaky", []))) > 0
        lines.append(f"| {name} | {r['passed']} | {r['failed']} | {r['errors']} | {r['skipped']} | "
                     + (", ".join(f"`{n}`" + (" (flaky: passes alone)" if n in r.get("flaky", []) else "")
                                  for n in new)
                        or "none") + " |")
    print("\n".join(lines) + f"\n(logs in {logs})")
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
        Path(args.out).with_suffix(".json").write_text(json.dumps(
            {k: {x: y for x, y in v.items() if x != "log"} for k, v in rows.items()}, indent=1) + "\n")
    return 1 if bad else 0


def run_repro(issue: str, tree: Path, work: Path) -> subprocess.CompletedProcess:
    """`hybrid-harness run` of the issue's repro on `tree`, on the tier its code runs on (a runner's issue: the
    engine tier with that runner, as bisect replays it)."""
    from harness.bisect import issue_config
    from harness.known_issues import known_issue_by_id

    issue_ = known_issue_by_id(issue)
    config = issue_config(issue_)
    tier = ["--tier", "engine", "--runner", config["engine"]["runner"]] if config["tier"] == "engine" else []
    return subprocess.run([PY, "-m", "harness", "--vllm", str(tree), "run", str(ROOT / issue_.repro), *tier,
                           "--artifacts", str(work)],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


@functools.cache  # `tests` checks an issue's emitted and hand-sized tests against one patched tree: one replay
def repro_exit(issue: str, tree: Path) -> int:
    """The exit of the issue's repro replayed on `tree` (0: clean)."""
    return run_repro(issue, tree, Path(tempfile.mkdtemp(prefix="hh-upstream-repro-"))).returncode


def finding_for(issue: str, tree: Path, work: Path) -> Path:
    """The issue's repro run on `tree`: its finding artifact (the repro must show it there)."""
    out = run_repro(issue, tree, work)
    found = sorted(work.glob("*.json"))
    if out.returncode != 1 or not found:
        raise BadInput(f"{issue}: its repro shows nothing on {tree} (exit {out.returncode}): {out.stdout[-300:]}")
    return found[-1]


def _outcome(run: dict) -> str:
    """One test's pytest run: fails, passes, or what else happened (an error, nothing collected)."""
    if run["failed"]:
        return "fails"
    if run["passed"] and not run["errors"]:
        return "passes"
    return f"does not run (exit {run['exit']}, {run['errors'] or 0} errors)"


def check_test(issue: str, version: str, fixed_in: str | None = None, hand: bool = False,
               keep: str | None = None) -> dict:
    """The issue's test (the emitted one, or with `hand` the hand-sized one) in vLLM `version`'s own test tree,
    stock against patched (or against release `fixed_in`); beside a test outside the extracted tree, vLLM's own
    tests there of the patched modules; then the repro on the patched tree. A record of what happened; `ok` where
    all is as expected."""
    stock = fetch_tree(version)
    fixed_tree = fetch_tree(fixed_in) if fixed_in else patched_tree(version, [issue])
    work = Path(tempfile.mkdtemp(prefix="hh-upstream-"))
    names: list[str] = []
    if hand:  # the hand-sized test (upstream/tests/ISSUE.py), appended to the vLLM test file it names
        test_file, place, names = hand_test(issue)
    else:
        artifact = finding_for(issue, stock, work / "finding")
        test_file = work / "test.py"
        emit = subprocess.run([PY, "-m", "harness", "--vllm", str(stock), "regression", str(artifact), "--style",
                               "vllm", "--issue", issue, "-o", str(test_file)],
                              cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        if emit.returncode:
            raise BadInput(f"regression --style vllm failed: {emit.stderr.strip()[-400:]}")
        place = emit.stdout.split("its place in vLLM's tree: ", 1)[1].rstrip(")\n")
    results, peers = {}, {}
    # beside a test outside the extracted tree (tests/v1/worker), vLLM's own tests there of the patched modules
    importing = [] if fixed_in else patched_modules(patch_file(issue, version))
    own: list[str] = []
    for label, release, tree in (("stock", version, stock), ("fixed", fixed_in or version, fixed_tree)):
        tests = work / f"tests-{label}"
        shutil.copytree(test_tree(release), tests)
        own = folder_from_sdist(release, str(Path(place).parent), tests, importing)
        if hand:
            file_from_sdist(release, place, tests)
        if label == "fixed" and not fixed_in:  # the patch's own changes to vLLM's tests, if any
            patched_tests(tests, release, [issue], tests)
        if own:  # before the test is placed: a hand-sized one joins a file that may be among them
            peers[label] = pytest_run(tests, tree, own, work / f"{label}-peers.log")
        if hand:
            (tests / place).write_text(appended((tests / place).read_text(), test_file.read_text()))
        else:
            (tests / place).write_text(test_file.read_text())
        results[label] = pytest_run(tests, tree, [f"{place}::{n}" for n in names] or [place], work / f"{label}.log")
    if names:
        place = ", ".join(f"{place}::{n}" for n in names)
    record = {"issue": issue, "kind": "hand-sized" if hand else "emitted", "place": place, "version": version,
              "stock": _outcome(results["stock"]), "fixed": _outcome(results["fixed"]),
              "fixed_label": f"vLLM {fixed_in}" if fixed_in else f"vLLM {version} + {issue}.patch",
              "repro_on_patched": None, "peers": None, "logs": str(work)}
    ok = record["stock"] == "fails" and record["fixed"] == "passes"
    if peers:
        new = sorted(set(peers["fixed"]["failures"]) - set(peers["stock"]["failures"]))
        record["peers"] = {"modules": importing, "files": own, "new_failures": new,
                           **{k: {x: peers[k][x] or 0 for x in ("passed", "failed", "errors")} for k in peers}}
        ok &= not new and (peers["fixed"]["errors"] or 0) <= (peers["stock"]["errors"] or 0)
    if keep:
        Path(keep).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(test_file, keep)
    if not fixed_in:  # the repro on the patched tree: clean
        code = repro_exit(issue, fixed_tree)
        record["repro_on_patched"] = "clean" if code == 0 else f"NOT CLEAN (exit {code})"
        ok &= code == 0
    record["ok"] = bool(ok)
    return record


def describe(record: dict) -> list[str]:
    r, peers = record, record["peers"]
    out = [f"{r['issue']}: {r['kind']} test {r['place']} in vLLM {r['version']}'s own test tree: stock {r['stock']}; "
           f"{r['fixed_label']}: {r['fixed']} ({'as expected' if r['ok'] else 'NOT AS EXPECTED'}; logs in {r['logs']})"]
    if peers:
        out.append(f"{r['issue']}: vLLM's own tests of {', '.join(peers['modules'])} there ({', '.join(peers['files'])})"
                   f": stock {peers['stock']['passed']} passed, {peers['stock']['failed']} failed, "
                   f"{peers['stock']['errors']} errors; patched {peers['fixed']['passed']} passed, "
                   f"{peers['fixed']['failed']} failed, {peers['fixed']['errors']} errors; new failures: "
                   f"{', '.join(peers['new_failures']) or 'none'}")
    if r["repro_on_patched"]:
        out.append(f"{r['issue']}: repro on the patched tree: {r['repro_on_patched']}")
    return out


def cmd_test(args) -> int:
    record = check_test(args.issue, args.vllm, args.fixed_in, args.hand, args.keep)
    print("\n".join(describe(record)))
    return 0 if record["ok"] else 1


def cmd_tests(args) -> int:
    """Every known issue open on the release (bisect --known's results), or those named: each test it has (the
    emitted one, the hand-sized one where written) stock against patched. A table and its JSON records; exit 0 when
    every record is as expected."""
    from concurrent.futures import ThreadPoolExecutor

    from harness.bisect import open_in
    from harness.bug_report import RESULTS

    issues = args.issues or open_in(json.loads(RESULTS.read_text()), args.vllm)
    if not issues:
        raise BadInput(f"no known issue is open on vLLM {args.vllm} in {RESULTS.relative_to(ROOT)}")

    def one_issue(issue: str) -> list[dict]:
        from harness.known_issues import known_issue_by_id
        from harness.vllm_style import folder_for

        out = []
        kinds = (False, True) if (HAND_TESTS / f"{issue}.py").exists() else (False,)
        try:
            folder_for(known_issue_by_id(issue))
        except BadInput:  # no emitted shape for this code (vllm_style.folder_for): the hand-sized test alone
            kinds = kinds[1:] or kinds
        for hand in kinds:
            try:
                out.append(check_test(issue, args.vllm, args.fixed_in, hand))
            except BadInput as exc:  # this issue cannot be checked here: a row that says why, not a stop
                out.append({"issue": issue, "kind": "hand-sized" if hand else "emitted", "version": args.vllm,
                            "ok": False, "error": str(exc)})
            print("\n".join(describe(out[-1]) if "error" not in out[-1] else [f"{issue}: {out[-1]['error']}"]),
                  flush=True)
        return out

    with ThreadPoolExecutor(args.jobs) as pool:
        records = [r for rs in pool.map(one_issue, issues) for r in rs]
    kept = Path(args.out).with_suffix(".json") if args.out and args.update else None
    if kept and kept.exists():  # the other issues' records of an earlier run stay, these replace theirs
        records = [r for r in json.loads(kept.read_text())["records"] if r["issue"] not in issues] + records
    fixed = f"vLLM {args.fixed_in}" if args.fixed_in else "the patched tree"
    lines = [f"Regression tests of the known issues open on vLLM {args.vllm}, each in vLLM {args.vllm}'s own test tree "
             f"(its sdist's tests, vLLM's conftest), on stock and on {fixed} (`python tools/upstream.py tests "
             f"--vllm {args.vllm}{' --fixed-in ' + args.fixed_in if args.fixed_in else ''}`). Beside a model runner's "
             "test, vLLM's own tests of the modules the patch changes, stock and patched; then the repro replayed on "
             "the patched tree.", "",
             "| known issue | test | place in vLLM's tree | stock | fixed | vLLM's own tests of the patched modules "
             "(patched / stock) | repro on the patched tree | as expected |", "|---|---|---|---|---|---|---|---|"]
    for r in records:
        if "error" in r:
            lines.append(f"| `{r['issue']}` | {r['kind']} | cannot run: {r['error']} | | | | | **no** |")
            continue
        p = r["peers"]
        peers = (f"{p['fixed']['passed']} passed, {p['fixed']['failed']} failed / {p['stock']['passed']} passed, "
                 f"{p['stock']['failed']} failed; new failures: {', '.join(p['new_failures']) or 'none'}" if p
                 else "(in the peer suite)" if not args.fixed_in else "")
        lines.append(f"| `{r['issue']}` | {r['kind']} | `{r['place']}` | {r['stock']} | {r['fixed']} "
                     f"({r['fixed_label']}) | {peers} | {r['repro_on_patched'] or ''} | "
                     f"{'yes' if r['ok'] else '**no**'} |")
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
        Path(args.out).with_suffix(".json").write_text(json.dumps(
            {"version": args.vllm, "fixed_in": args.fixed_in,
             "records": [{k: v for k, v in r.items() if k != "logs"} for r in records]}, indent=1) + "\n")
    return 0 if all(r["ok"] for r in records) else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("patch")
    p.add_argument("issues", nargs="+")
    s = sub.add_parser("suite")
    s.add_argument("issues", nargs="*")
    s.add_argument("--together", action="store_true", help="also every patch applied at once")
    s.add_argument("--out")
    s.add_argument("--update", action="store_true", help="keep --out's rows of the patches not run")
    t = sub.add_parser("test")
    t.add_argument("issue")
    t.add_argument("--fixed-in", help="the release that fixed it (instead of the patch)")
    t.add_argument("--keep", help="also copy the emitted test here")
    t.add_argument("--hand", action="store_true", help="run the hand-sized test upstream/tests/ISSUE.py instead")
    m = sub.add_parser("tests")
    m.add_argument("issues", nargs="*", help="default: every known issue open on the release")
    m.add_argument("--fixed-in", help="the release that fixed them (instead of their patches)")
    m.add_argument("--jobs", type=int, default=1, help="issues checked at once")
    m.add_argument("--out", help="write the table here, and its records beside it as JSON")
    m.add_argument("--update", action="store_true", help="keep --out's records of the issues not named")
    for q in (p, s, t, m):
        q.add_argument("--vllm", default="0.33.0", help="the release whose tree and tests are used")
    args = parser.parse_args(argv)
    try:
        return {"patch": cmd_patch, "suite": cmd_suite, "test": cmd_test, "tests": cmd_tests}[args.cmd](args)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
