"""The known issues of stock vLLM, as data: harness/known_issues.toml lists each one (id, title, releases, the user
configuration that reaches it, repro scenario, the name of its fix in harness/fixes/). A finding is KNOWN only
when replaying it with the issue's fix makes it vanish (harness/verdict.py); nothing here judges.

What a release carries is read once per process: `applicable()` asks the fix's probe (does the installed vLLM have
the code the fix changes) with no mutant or fix in place, and caches the answer."""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from harness.errors import BadInput

ROOT = Path(__file__).resolve().parent.parent  # repro paths are relative to the checkout
DATA = Path(__file__).with_name("known_issues.toml")
# upstream work on each issue (vLLM's public tracker): issues and pull requests that describe, fix or brought it
PRIOR_ART = Path(__file__).with_name("prior_art.toml")
RELATIONS = ("fixes", "same-bug", "introduced", "related")  # the order a report lists them in
RUNNERS = ("v1", "v2", "mirror", "cpu")  # cpu: vLLM's CPU kernels (tier e2e)


@dataclass(frozen=True)
class PriorArt:
    """One upstream issue or pull request about a known issue, as found in vLLM's public tracker."""

    ref: str  # owner/repo#N
    kind: str  # pr | issue
    state: str  # open | merged | closed | unknown
    relation: str  # RELATIONS
    title: str
    note: str  # how it relates, in one line

    @property
    def url(self) -> str:
        repo, number = self.ref.split("#")
        return f"https://github.com/{repo}/{'pull' if self.kind == 'pr' else 'issues'}/{number}"

    @property
    def upstream(self) -> bool:
        """vLLM's own tracker (not downstream work such as vllm-ascend's)."""
        return self.ref.startswith("vllm-project/vllm#")

    def line(self) -> str:
        """'[vllm-project/vllm#N](url) (open PR, fixes): title: note'."""
        return (f"[{self.ref}]({self.url}) ({self.state} {'PR' if self.kind == 'pr' else 'issue'}, {self.relation}): "
                f"{self.title}. {self.note}")


@dataclass(frozen=True)
class KnownIssue:
    id: str
    title: str  # one line, a bug report's title
    summary: str
    releases: str
    repro: str  # scenario file, relative to the repository root
    reached_by: str  # the configuration a user runs to reach it
    fix_name: str  # harness.fixes: the run-time patch that removes the bug
    repro_from: tuple = (0, 26, 0)  # first release whose scheduler lets the repro reach the bug
    # the model runners whose code carries the bug (engine tier); None: scheduler/allocator code, every runner
    runners: tuple | None = None
    # scheduler code only vLLM's own Scheduler runs (the engine tier, any runner): the mirrored tiers' scheduler
    # loop does not follow it
    engine_only: bool = False
    # reached only with a real forward and a real connector load (tier e2e, vLLM's CPU build): the simulated
    # tiers' connector delivers states before the runner runs, and they run no CPU kernels
    e2e_only: bool = False
    # tier e2e's own repro where the issue's repro is not expressible there (`known check --tier e2e`)
    e2e_repro: str = ""
    # the first release without the bug (None: open in the newest tested release); on a release or tree at or
    # past it, the bug showing again is a regression, never filed KNOWN (`regressed_for`)
    fixed_in: tuple | None = None
    # what the suggested patch (upstream/patches/) changes besides vLLM's code, and why: e.g. a vLLM test that
    # pinned the bug (shown in the bug report's Suggested patch section)
    patch_note: str = ""
    # a bug report's one-paragraph forms (docs/upstream: one page each): what breaks, and who meets it
    brief: str = ""
    who: str = ""
    prior_art: tuple = ()  # PriorArt, in RELATIONS order (harness/prior_art.toml)
    searched: tuple = ()  # what was searched upstream for it (so a report can say none was found)
    # the shape of its vLLM-style regression test (`regression --style vllm`, harness/vllm_style.py TEST_SHAPES):
    # "allocator" (a KVCacheManager replay, tests/v1/core), "split-grid", "accepted-counts", or a runner batch order
    # (harness/vllm_style_runner.SHAPES); "" where no vLLM unit test can carry it (engine-only, kernels)
    vllm_test: str = ""

    @property
    def open_fix(self) -> PriorArt | None:
        """An open pull request in vLLM's tracker that already fixes it: the evidence goes there as a comment, not
        into a new report."""
        return next((a for a in self.prior_art if a.relation == "fixes" and a.kind == "pr" and a.state == "open"
                     and a.upstream), None)

    @property
    def landed_fixes(self) -> tuple[PriorArt, ...]:
        """Merged pull requests in vLLM's tracker that fix it."""
        return tuple(a for a in self.prior_art if a.relation == "fixes" and a.state == "merged" and a.upstream)

    @property
    def fix(self):
        """The fix's Mutant (applied by harness.patching when a RunConfig names this issue)."""
        from harness.fixes import fix_by_name

        return fix_by_name(self.fix_name).mutant

    @property
    def fix_target(self) -> str:
        """The vLLM code the fix patches, by name."""
        from harness.fixes import fix_by_name

        return fix_by_name(self.fix_name).target

    @property
    def fix_what(self) -> str:
        """What the fix changes, in words."""
        from harness.fixes import fix_by_name

        return fix_by_name(self.fix_name).what

    def applicable(self) -> bool:
        """The installed release carries the code this issue's fix changes (read once per process)."""
        return self.id in _applicable_ids()

    @property
    def code(self) -> str:
        """Whose code carries the bug, for messages."""
        if self.runners is None:
            return "vLLM's own Scheduler" if self.engine_only else "scheduler or allocator"
        return "/".join(self.runners)

    def runs_on(self, tier: str, runner: str = "auto") -> bool:
        """Whether the code carrying the bug runs on this tier: the mirrored tiers run the harness's V1 worker
        shadow ("mirror"); the engine tier runs `runner` ("auto" may pick either of vLLM's runners)."""
        if self.engine_only and tier not in ("engine", "e2e"):
            return False
        if self.e2e_only and tier != "e2e":
            return False
        if self.runners is None:
            return True
        if tier == "e2e":  # vLLM's CPU model runner: the V1 runner's code, on CPU kernels
            return bool({"v1", "cpu"} & set(self.runners))
        if tier != "engine":
            return "mirror" in self.runners
        return runner in self.runners or (runner == "auto" and bool({"v1", "v2"} & set(self.runners)))

    def open_here(self) -> bool:
        """The installed vLLM is older than the release that fixed this issue (or it is still open)."""
        return self.fixed_in is None or _installed() < self.fixed_in

    def repro_expected(self) -> bool:
        """Should the repro show this issue on the installed release?"""
        return self.applicable() and _installed() >= self.repro_from

    def repro_for(self, tier: str) -> str:
        """The scenario that shows it on `tier`: tier e2e's own repro there where it has one."""
        return self.e2e_repro or self.repro if tier == "e2e" else self.repro


def _version(text: str, where: str, key: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split("."))
    except ValueError:
        raise BadInput(f"{where}: {key} {text!r} is not a release like 0.33.0") from None


def _toml(path: Path, what: str) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"{what} {path}: {exc}") from None


def load_prior_art(path: Path, ids: set[str]) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """(issue id -> its PriorArt in RELATIONS order, issue id -> the queries searched) of a prior-art file; BadInput
    for a malformed entry or an issue id not in `ids`."""
    if not path.exists():
        return {}, {}
    doc, art, searched = _toml(path, "prior-art data"), {}, {}
    for i, entry in enumerate(doc.get("art", [])):
        where = f"{path.name} art {i} ({entry.get('ref', '?')})"
        try:
            a = PriorArt(entry["ref"], entry["kind"], entry["state"], entry["relation"], entry["title"], entry["note"])
            issue = entry["issue"]
        except KeyError as exc:
            raise BadInput(f"{where}: missing {exc.args[0]!r}") from None
        if issue not in ids:
            raise BadInput(f"{where}: no known issue {issue!r}")
        if a.relation not in RELATIONS or a.kind not in ("pr", "issue") or "#" not in a.ref:
            raise BadInput(f"{where}: relation one of {', '.join(RELATIONS)}, kind pr or issue, ref owner/repo#N")
        art.setdefault(issue, []).append(a)
    for entry in doc.get("searched", []):
        if entry.get("issue") not in ids:
            raise BadInput(f"{path.name} searched: no known issue {entry.get('issue')!r}")
        searched[entry["issue"]] = tuple(entry.get("queries", ()))
    order = {r: i for i, r in enumerate(RELATIONS)}
    return ({k: tuple(sorted(v, key=lambda a: (order[a.relation], not a.upstream))) for k, v in art.items()},
            searched)


def load(path: Path = DATA, prior_art: Path = PRIOR_ART) -> tuple[KnownIssue, ...]:
    """The known issues of a data file, with their prior art (BadInput for a malformed one)."""
    doc = _toml(path, "known-issue data")
    issues = []
    for i, entry in enumerate(doc.get("issue", [])):
        where = f"{path.name} issue {entry.get('id', i)}"
        try:
            runners = entry.get("runners")
            if runners is not None and not set(runners) <= set(RUNNERS):
                raise BadInput(f"{where}: runners {runners} (choose from {', '.join(RUNNERS)})")
            issues.append(KnownIssue(
                id=entry["id"], title=entry["title"], summary=entry["summary"], releases=entry["releases"], repro=entry["repro"],
                reached_by=entry["reached_by"], fix_name=entry["fix"],
                repro_from=_version(entry.get("repro_from", "0.26.0"), where, "repro_from"),
                runners=tuple(runners) if runners is not None else None,
                engine_only=bool(entry.get("engine_only", False)), e2e_only=bool(entry.get("e2e_only", False)),
                e2e_repro=entry.get("e2e_repro", ""),
                fixed_in=_version(entry["fixed_in"], where, "fixed_in") if "fixed_in" in entry else None,
                patch_note=entry.get("patch_note", ""), brief=entry.get("brief", ""), who=entry.get("who", ""),
                vllm_test=entry.get("vllm_test", "")))
        except KeyError as exc:
            raise BadInput(f"{where}: missing {exc.args[0]!r}") from None
    ids = [k.id for k in issues]
    if len(set(ids)) != len(ids):
        raise BadInput(f"{path.name}: an id appears twice")
    art, searched = load_prior_art(prior_art, set(ids))
    return tuple(replace(k, prior_art=art.get(k.id, ()), searched=searched.get(k.id, ())) for k in issues)


KNOWN_ISSUES = load()


@functools.cache
def _applicable_ids() -> frozenset[str]:
    """Each fix's probe, asked once with every mutant and fix taken out (a probe reads vLLM's code as shipped)."""
    from harness.fixes import fix_by_name
    from harness.patches import suspended
    from harness.release import patched_issues

    patched = patched_issues()  # a patched tree's own issues: the patch is the fix
    with suspended("patch:", prefix=True):
        return frozenset(k.id for k in KNOWN_ISSUES if k.id not in patched
                         and ((probe := fix_by_name(k.fix_name).applies) is None or bool(probe())))


def upstream_fix_note(issue: KnownIssue, gone: bool) -> str:
    """What `known check` and `bisect` say of the issue's upstream fixes: where its repro no longer reproduces, the
    pull requests that fix it (landed, or still open: check which one the release carries); where it still does,
    an open pull request that fixes it (comment there, do not file anew)."""
    fixes = [a for a in issue.prior_art if a.relation == "fixes" and a.upstream]
    if gone and fixes:
        return "upstream fix landed? " + "; ".join(f"{a.ref} ({a.state})" for a in fixes)
    if not gone and issue.open_fix:
        return f"open upstream fix: {issue.open_fix.ref} ({issue.open_fix.url}): comment there, do not file anew"
    return ""


def known_issue_by_id(issue_id: str) -> KnownIssue:
    return next(k for k in KNOWN_ISSUES if k.id == issue_id)


def fixes_for(verdict: dict | None) -> list[KnownIssue]:
    """The known issues a finding's verdict (Verdict.to_json) attributes findings to: their fixes give the
    bug-free recording its emitted regression test compares against."""
    ids = {i for k in ((verdict or {}).get("known") or {}).values() for i in k.split("+")}
    return [k for k in KNOWN_ISSUES if k.id in ids and k.applicable()]


def _installed() -> tuple[int, ...]:
    from harness.release import vllm_source

    return vllm_source().parsed


@functools.cache
def issues_for(tier: str, runner: str = "auto") -> tuple[KnownIssue, ...]:
    """The known issues whose fixes can change a replay on this tier: the fix's target exists in the installed
    release, the release is older than the one that fixed it, and the code carrying the bug runs there (a
    V2-runner issue is not judged on the mirrored tiers)."""
    return tuple(k for k in KNOWN_ISSUES if k.runs_on(tier, runner) and k.applicable() and k.open_here())


def cpu_kernel_issues(besides: str | None = None) -> tuple[KnownIssue, ...]:
    """Known bugs of vLLM's CPU kernels that tier e2e carries here (runners ["cpu"]): they stop a run, or spoil
    every output, before anything else can show, so what lies behind them is judged with their fixes kept (run,
    known check, the e2e verdict of other tiers' findings), and the donors and references of tier e2e keep them.
    `besides`: all but that issue (the ones kept fixed while it is shown)."""
    return tuple(k for k in issues_for("e2e") if k.runners == ("cpu",) and k.id != besides)


@functools.cache
def regressed_for(tier: str, runner: str = "auto") -> tuple[KnownIssue, ...]:
    """Fixed known issues whose old code is back: a vLLM at or past the release that fixed one (a developer's
    tree, say) whose code the fix's probe finds again. A finding its fix removes is a regression: new, never
    KNOWN (harness.verdict marks it)."""
    return tuple(k for k in KNOWN_ISSUES if k.runs_on(tier, runner) and k.applicable() and not k.open_here())


__all__ = ["KNOWN_ISSUES", "KnownIssue", "ROOT", "fixes_for", "issues_for", "known_issue_by_id",
           "load", "regressed_for"]
