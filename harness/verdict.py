"""Verdicts: a finding is KNOWN only when replaying its scenario with a known issue's fix applied makes it vanish
(ClusterFuzz's "fixed" test: a replay, never a pattern match). The known issues are an argument (default: the
data file's, harness/known_issues.py); the replays name their fixes in the RunConfig (harness/patching.py applies
them). Every finding of an input is classified (Jepsen: a history is never summarised by its first anomaly):

- S       the signatures the input shows (mutant applied, if any);
- S_fixed the signatures it shows with every applicable fix applied on top;
- known       = S - S_fixed, each attributed to the fix that alone removes it;
- unexplained = S & S_fixed: the fixes do not remove it, so it is new;
- revealed    = S_fixed - S: hidden behind a known issue on stock (e.g. the replay stopped at a known
                exception), or latent: shown once the fixes change the schedule (`latent` names the fixes that
                expose it). Also new.

An input is new when unexplained or revealed is non-empty; campaigns dedup by that set, so a known finding
can never shadow a new one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from harness.known_issues import KNOWN_ISSUES, cpu_kernel_issues, issues_for, regressed_for
from harness.run_config import RunConfig


def _ids(issues) -> tuple[str, ...]:
    return tuple(k.id for k in issues)


@dataclass
class Verdict:
    signatures: list[str]
    known: dict[str, str] = field(default_factory=dict)  # signature -> known issue id
    unexplained: list[str] = field(default_factory=list)
    revealed: list[str] = field(default_factory=list)
    # the fixes whose changed schedule exposes a revealed finding that stock vLLM does not reach (known ids): a real
    # bug of the system under test, latent on stock behind those fixes (`confirm_on_stock`)
    latent: list[str] = field(default_factory=list)
    # unexplained signatures a fixed known issue's fix removes, on a vLLM at or past the release that fixed it: its
    # old code is back (signature -> issue id); new, never KNOWN
    regressions: dict[str, str] = field(default_factory=dict)
    # the symbolic tier's new findings, replayed on the engine tier (`confirm_on_engine`): "confirmed",
    # "departure: ..." (vLLM's own Scheduler and runner show nothing new: the mirror departs, not vLLM),
    # "unconfirmable: ..." (the engine tier cannot express the scenario; the mirror's verdict stands); "" not asked
    engine: str = ""

    @property
    def new(self) -> list[str]:
        """What makes the input new: unexplained and revealed signatures."""
        return new_signatures(self.to_json())

    @property
    def is_new(self) -> bool:
        return bool(self.unexplained or self.revealed) and not self.departure

    @property
    def departure(self) -> bool:
        return is_departure({"engine": self.engine})

    @property
    def key(self) -> str:
        """Dedup key: the set of new signatures, or for an all-known input the set of known ones."""
        text = ("|".join(sorted(self.new)) if self.is_new else
                "departure|" + "|".join(sorted(self.new)) if self.departure else
                "known|" + "|".join(sorted(self.signatures)))
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    @property
    def headline_signature(self) -> str:
        return (self.unexplained or self.revealed or self.signatures)[0]

    def to_json(self) -> dict:
        out = {"signatures": self.signatures, "known": self.known, "unexplained": self.unexplained,
               "revealed": self.revealed, "new": self.is_new}
        if self.engine:
            out["engine"] = self.engine
        if self.latent:
            out["latent"] = self.latent
        if self.regressions:
            out["regressions"] = self.regressions
        return out

    def label(self, signature: str) -> str:
        if signature in self.known:
            return f"KNOWN {self.known[signature]}"
        if signature in self.regressions:
            return f"NEW (regression of {self.regressions[signature]})"
        if self.latent and signature in self.revealed:
            return f"NEW (latent behind {'+'.join(self.latent)})"
        return "NEW"


def is_departure(verdict: dict) -> bool:
    """A verdict's (Verdict.to_json) new findings are the mirror's alone: the engine tier showed nothing new."""
    return verdict.get("engine", "").startswith("departure")


def new_signatures(verdict: dict) -> list[str]:
    """A verdict's (Verdict.to_json) new signatures: the unexplained ones, then the revealed ones so marked."""
    return list(verdict.get("unexplained", [])) + [f"revealed:{s}" for s in verdict.get("revealed", [])]


def classify(signatures, replay_signatures, issues=None, regressed=()) -> Verdict:
    """Judge an input's signatures by the known fixes. `replay_signatures(issues)` replays the input with
    those issues' fixes applied (and the input's mutant, if any) and returns the signatures it shows.
    `issues`: the candidates (default: every applicable one); `regressed`: fixed issues whose code is back
    (harness.known_issues.regressed_for): what their fix removes stays new, marked a regression."""
    if issues is None:
        issues = [k for k in KNOWN_ISSUES if k.applicable()]
    verdict = _classify(signatures, replay_signatures, issues)
    for issue in regressed:
        if not verdict.unexplained:
            break
        base = [k for k in issues if k.id != issue.id]
        gone = set(verdict.unexplained) - set(replay_signatures([*base, issue])) - set(verdict.regressions)
        verdict.regressions.update({sig: issue.id for sig in sorted(gone)})
    return verdict


def _classify(signatures, replay_signatures, issues=None) -> Verdict:
    ordered = list(dict.fromkeys(signatures))  # oracle order: the first new one heads the report
    shown = set(ordered)
    verdict = Verdict(ordered)
    if not shown:
        return verdict
    if issues is None:
        issues = [k for k in KNOWN_ISSUES if k.applicable()]
    issues = list(issues)
    if not issues:
        verdict.unexplained = ordered
        return verdict
    fixed = set(replay_signatures(issues))
    verdict.unexplained = [s for s in ordered if s in fixed]
    verdict.revealed = sorted(fixed - shown)
    gone = shown - fixed
    if len(issues) == 1:
        verdict.known = {sig: issues[0].id for sig in gone}
        return verdict
    for issue in issues:
        if not gone:
            break
        removed = gone - set(replay_signatures([issue]))
        for sig in removed:
            verdict.known[sig] = issue.id
        gone -= removed
    for sig in sorted(gone):  # removed only by fixes together: the smallest set found by dropping one at a time
        needed = list(issues)
        for issue in list(issues):
            trial = [k for k in needed if k is not issue]
            if trial and sig not in set(replay_signatures(trial)):
                needed = trial
        verdict.known[sig] = "+".join(k.id for k in needed)
    return verdict


def _signature_replays(scenario, config: RunConfig, done: dict | None = None, base=()):
    """`replay_signatures(issues)` for `classify`: the signatures of a replay (under `config`) with those issues'
    fixes applied, and `base`'s always, each set of fixes replayed once (`done`: replays already made, keyed by
    the frozenset of issue ids)."""
    from harness.witness import signatures

    replays = dict(done or {})

    def replay_signatures(issues):
        key = frozenset(k.id for k in issues)
        if key not in replays:
            replays[key] = signatures(scenario, config.but(fixes=_ids([*base, *issues])))
        return replays[key]
    return replay_signatures


def judge_scenario(scenario, findings, *, config: RunConfig | None = None, issues=None, base=()) -> Verdict:
    """Classify a replayed scenario's findings (of a replay under `config`, default RunConfig's defaults, with
    `base`'s fixes only). `issues`: the candidates (default: the tier's); `base`: known issues whose fixes every
    replay keeps (what lies behind a crash that masks the rest)."""
    cfg = (config or RunConfig()).but(fixes=())
    base_ids = set(_ids(base))
    candidates = issues_for(cfg.tier, cfg.engine.runner) if issues is None else issues
    return classify([f.signature for f in findings], _signature_replays(scenario, cfg, base=tuple(base)),
                    [k for k in candidates if k.id not in base_ids],
                    [k for k in regressed_for(cfg.tier, cfg.engine.runner) if k.id not in base_ids])


def masking_issues(verdict: Verdict | None, tier: str) -> list:
    """The known issues a replay's verdict names that stop a tier-e2e run before anything else can show: vLLM's
    CPU kernels raising (runners ["cpu"]); what lies behind them is judged with their fixes kept."""
    if verdict is None or tier != "e2e":
        return []
    ids = {i for v in verdict.known.values() for i in v.split("+")}
    return [k for k in cpu_kernel_issues() if k.id in ids]


def replay_and_judge(scenario, *, config: RunConfig | None = None, issues=None, judged: dict | None = None):
    """Replay and judge one input; returns (trace, findings, verdict or None when nothing fired).

    `config` (default: RunConfig's defaults) with known_fixes (campaigns' and sweeps' default: fuzz the fixed
    system): the replay runs with every applicable known issue's fix applied, so known bugs neither fire nor mask
    new ones; only a finding of the fixed system is confirmed on the system as shipped (`confirm_on_stock`).
    Without known_fixes: the replay runs on stock and its findings are classified by the fixes (`judge_scenario`).

    `judged` (a campaign worker's): verdicts by the set of signatures a replay showed. A set judged before is
    not judged again (its replays with fixes, on stock, on the engine tier): the first input's verdict stands
    for it, as ClusterFuzz deduplicates crashes by signature, so a frequent bug does not stall the search. An
    input showing any other signature beside it (a second bug) is judged in full."""
    from harness.witness import judge_replay

    cfg = (config or RunConfig()).but(fixes=())
    if issues is None:
        issues = issues_for(cfg.tier, cfg.engine.runner)
    fixed = list(issues) if cfg.known_fixes else []
    trace, findings = judge_replay(scenario, cfg.but(fixes=_ids(fixed)))
    if not findings:
        return trace, findings, None
    key = (bool(fixed), frozenset(f.signature for f in findings))
    if judged is not None and key in judged:
        return trace, findings, judged[key]
    if not fixed:
        verdict = judge_scenario(scenario, findings, config=cfg, issues=issues)
    else:
        verdict = confirm_on_stock(scenario, findings, fixed, config=cfg)
    if cfg.tier == "symbolic" and verdict.is_new:
        confirm_on_engine(scenario, verdict, config=cfg)
    if judged is not None:
        judged[key] = verdict
    return trace, findings, verdict


def judge_input(scenario, config: RunConfig, *, report_known: bool = True, issues=None, judged: dict | None = None):
    """The pipeline's one judging step, shared by sweeps, the fuzz targets and the measurement scripts: replay and
    judge under `config`; where the fixed system is clean and `report_known`, the input is replayed on stock too,
    so the known issues it reaches are reported (never as new). `judged`: see `replay_and_judge`. Returns (trace,
    findings, verdict or None)."""
    trace, findings, verdict = replay_and_judge(scenario, config=config, issues=issues, judged=judged)
    if verdict is None and config.known_fixes and report_known:
        trace, findings, verdict = replay_and_judge(scenario, config=config.but(known_fixes=False), issues=issues,
                                                    judged=judged)
    return trace, findings, verdict


def confirm_on_engine(scenario, verdict: Verdict, *, config: RunConfig | None = None) -> Verdict:
    """The symbolic tier mirrors vLLM's scheduler loop and V1 runner by hand; before its new finding is called
    a vLLM bug, the same scenario runs on the engine tier: vLLM's own Scheduler and connector with the model
    runner vLLM picks (the engine options'; the mutant, an allocator patch, applies there too), scheduled
    synchronously as the mirror schedules it unless the options ask otherwise. New there too:
    confirmed. Nothing new there: a departure of the mirror, kept and reported as such, never as vLLM's. A
    scenario the engine tier cannot express keeps the mirror's verdict, and says so."""
    from harness.errors import BadInput

    cfg = (config or RunConfig()).but(tier="engine", known_fixes=True)
    if cfg.engine.async_scheduling == "auto":
        # the mirrored loop schedules synchronously: the same input on vLLM's own Scheduler runs as the mirror
        # runs it (as `diff` compares). vLLM's async decision makes another schedule, which may not reach the
        # state at all: that is not the mirror departing (measured: two blind-bank allocator bugs shown by
        # vLLM's own V1 and V2 runners synchronously were filed as departures under `auto`)
        cfg = cfg.but(async_scheduling="off")
    try:
        _, _, engine = replay_and_judge(scenario, config=cfg.but(fixes=()))
    except BadInput as exc:
        verdict.engine = f"unconfirmable: {exc}"
        return verdict
    if engine is not None and engine.is_new:
        verdict.engine = "confirmed"
    else:
        verdict.engine = (f"departure: vLLM's own Scheduler and runner (engine tier, --runner {cfg.engine.runner}) show "
                          f"nothing new: {', '.join(engine.signatures) if engine else 'no finding'}")
    return verdict


def confirm_on_e2e(scenario, config: RunConfig, verdict: Verdict | None) -> dict:
    """What users see of a finding of another tier (harness/e2e_verdict.py): the scenario on vLLM's whole engine
    with a real forward, under the configuration's mutant and the fixes of the replay that showed it (the fixed
    system's for a new finding, none for a known one, shown on stock)."""
    from harness.e2e_verdict import e2e_verdict

    fixed = verdict is not None and verdict.is_new and config.known_fixes
    fixes = _ids(issues_for(config.tier, config.engine.runner)) if fixed else ()
    return e2e_verdict(scenario, config.but(known_fixes=False), tuple(fixes))


def confirm_on_stock(scenario, fixed_findings, issues, *, config: RunConfig) -> Verdict:
    """A finding of the fixed system, replayed on the system as shipped (no fixes): shown there too ->
    unexplained (NEW); absent there while stock shows a finding the fixes remove (a known bug fires first) ->
    NEW, revealed (latent until vLLM fixes the known one); absent there and no known bug fires on stock -> NEW,
    revealed and latent: the fixes change the schedule (admission, chunking) so that the system under test
    reaches a state stock does not reach here; `latent` names the smallest set of fixes that still exposes it.
    Such a finding is the system's, never a harness error: the fixes' own correctness is guarded by stock
    campaigns and sweeps with the fixes on, which must stay clean (the CI gate, `make ci-fuzz`)."""
    from harness.witness import judge_replay

    config = config.but(fixes=())
    fixed = list(dict.fromkeys(f.signature for f in fixed_findings))
    stock = list(dict.fromkeys(f.signature for f in judge_replay(scenario, config)[1]))  # oracle order
    # the fixed and the stock replays are done already
    replay_signatures = _signature_replays(scenario, config, {frozenset(k.id for k in issues): set(fixed),
                                                              frozenset(): set(stock)})
    regressed = regressed_for(config.tier, config.engine.runner)
    verdict = classify(stock, replay_signatures, issues, regressed) if stock else Verdict([], revealed=fixed)
    if verdict.revealed and not verdict.known:
        verdict.latent = _exposing_fixes(set(verdict.revealed), list(issues), replay_signatures)
    return verdict


def _exposing_fixes(revealed: set, issues: list, replay_signatures) -> list[str]:
    """The smallest set of fixes (dropping one at a time, as `classify` does) with which the replay still shows a
    revealed signature; stock (no fix) does not, so the set is never empty."""
    needed = list(issues)
    for issue in list(issues):
        trial = [k for k in needed if k is not issue]
        if trial and revealed & set(replay_signatures(trial)):
            needed = trial
    return [k.id for k in needed]


def finding_artifact(scenario, findings, version: str, config: RunConfig, verdict: Verdict | None = None,
                     trace=None):
    """The vLLM wing's kept finding: the core's `FindingArtifact` with the vLLM build it ran on
    (harness.release.vllm_source, `version` as the replay named it) and, on tier e2e, what users see, from the
    trace itself (harness.e2e_verdict.from_trace)."""
    from harness.artifacts import FindingArtifact
    from harness.release import vllm_source

    e2e = None
    if config.tier == "e2e" and trace is not None:
        from harness.e2e_verdict import from_trace

        e2e = from_trace(trace)
    return FindingArtifact.of(scenario, findings, {**vllm_source().as_json(), "vllm_version": version}, config,
                              verdict, trace, e2e=e2e)
