"""`known check`: for every known issue the installed release should show, does its repro still show it, and does
its fix remove it? Run per tier (the engine tier per model runner) by `hybrid-harness known check` and `make known`."""

from __future__ import annotations

from harness.known_issues import KNOWN_ISSUES, ROOT, KnownIssue, issues_for
from harness.verdict import classify


BLOCKED = "REPRO STOPS AT ANOTHER FINDING (the fix changes nothing)"


def _left_to_other_issues(issue: KnownIssue, left: set, replay_findings, runner: str | None) -> list[str] | None:
    """A repro that reaches a second known bug (0.26.0's seed repro under async scheduling also re-keys the prompt
    tail): the known issues whose fixes, on top of this one's, remove what this fix leaves, judged as any finding
    is (`classify`), provided their fixes alone do not remove this issue's part. None: something is left that no
    known fix explains, or this issue's fix is not needed. `left`: the repro's signatures with this issue's fix."""
    others = [k for k in issues_for("engine" if runner else "symbolic", runner or "auto") if k is not issue]

    def signatures(issues):
        return {f.signature for f in replay_findings(issue.repro, list(issues))}

    verdict = classify(sorted(left), lambda extra: signatures([issue, *extra]), others)
    if verdict.unexplained or verdict.revealed or not verdict.known:
        return None
    needed = sorted({i for ids in verdict.known.values() for i in ids.split("+")})
    if not signatures([k for k in others if k.id in needed]):
        return None
    return needed


def check_known(replay_findings, runner: str | None = None, picked=None, issues=KNOWN_ISSUES) -> list[dict]:
    """For every known issue the installed release should show: does its repro still show it, and does its
    fix remove it? `replay_findings(path, issues)` replays a repro with those fixes applied. `runner`: the
    engine tier's model runner (None: the mirrored tiers; "auto": `picked()` names the runner vLLM chose for the
    last replay); an issue in another runner's code is not expected, a repro the tier cannot express
    (BadInput) says why."""
    from harness.errors import BadInput

    rows = []
    for issue in issues:
        if not issue.repro_expected():
            rows.append({"id": issue.id, "status": "not expected on this release"})
            continue
        if not issue.runs_on("engine" if runner else "symbolic", runner):
            where = f"with runner {runner}" if runner else "on the mirrored tiers (the V1 worker shadow)"
            rows.append({"id": issue.id, "status": f"not expected {where} (in {issue.code} code)"})
            continue
        try:
            shown = [f.signature for f in replay_findings(issue.repro, [])]
        except BadInput as exc:
            rows.append({"id": issue.id, "status": f"not expressible here: {exc}"})
            continue
        pick = picked() if (runner == "auto" and picked is not None) else None
        if pick and issue.runners is not None and pick not in issue.runners:  # `picked`: the runner vLLM chose
            rows.append({"id": issue.id, "status": f"not expected: vLLM picked runner {pick} for the repro (the issue is "
                                                   f"in {'/'.join(issue.runners)} code)"})
            continue
        fixed = [f.signature for f in replay_findings(issue.repro, [issue])]
        # what the fix leaves, or all of it where the repro meets another known bug first (0.27.0-0.31.0's V1
        # runner: v1-readd's repro needs v1-draftless-step's fix too): explained by other issues' fixes
        rest = _left_to_other_issues(issue, set(fixed), replay_findings, runner) if shown and fixed else None
        status = ("reproduces, fix removes it" if shown and not fixed else
                  f"reproduces, fix removes it together with {', '.join(rest)}'s (either alone leaves a finding)"
                  if rest and set(shown) == set(fixed) else
                  f"reproduces, fix removes it (what remains is {', '.join(rest)}, which the repro also reaches)"
                  if rest else
                  "NO LONGER REPRODUCES" if not shown else
                  # the fix changes nothing: the repro stops at another finding before reaching the issue (e.g.
                  # an earlier release's own bug), which says nothing about the fix
                  BLOCKED if set(shown) == set(fixed) else "FIX DOES NOT REMOVE IT")
        rows.append({"id": issue.id, "status": status, "shown": shown, "with_fix": fixed})
    return rows


def run_known_check(config, issues=KNOWN_ISSUES) -> tuple[list[dict], set]:
    """`check_known` on this configuration's tier: each repro replayed with the named fixes (RunConfig.fixes).
    Returns the rows and, for the engine tier's runner `auto`, the runners vLLM picked."""
    from harness.witness import judged
    from harness.replay import replay
    from harness.scenario import load_scenario

    runner = config.engine.runner if config.tier == "engine" else None
    runner_seen: set = set()
    last_pick: list = [None]

    def replay_findings(repro, fixed):
        scenario, cfg = load_scenario(ROOT / repro), config.but(fixes=tuple(k.id for k in fixed))
        trace = replay(scenario, config=cfg)
        if runner == "auto":  # the runner vLLM picked for this repro's config
            last_pick[0] = getattr(trace, "runner", None)
            runner_seen.add(last_pick[0] or "auto")
        return judged(scenario, cfg, trace)

    return check_known(replay_findings, runner, picked=lambda: last_pick[0], issues=issues), runner_seen


__all__ = ["BLOCKED", "check_known", "run_known_check"]
