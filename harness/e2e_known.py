"""`known check --tier e2e`: what users see of each known issue on vLLM's whole engine with a real forward.

Each known issue the installed release carries has its repro replayed on tier e2e as shipped and with the issue's
fix; the row gives the e2e verdict (harness/e2e_verdict.py: visible, logprobs, clean, not expressible) with the
first diverging request's tokens beside the reference's, and whether the fix removes what stock shows. A CPU
kernel bug that stops every run first (runners ["cpu"], e.g. cpu-mamba2-prefill-checkpoint) has its fix kept in
both replays of the other issues, so what lies behind it is judged; its own row replays without it."""

from __future__ import annotations

from harness.known_issues import KNOWN_ISSUES, ROOT


def rows(config, issues=KNOWN_ISSUES) -> list[dict]:
    from harness.e2e.geometry import not_expressible
    from harness.e2e_verdict import from_trace
    from harness.errors import BadInput
    from harness.known_issues import cpu_kernel_issues
    from harness.oracles import judge
    from harness.replay import replay
    from harness.scenario import load_scenario

    cfg = config.but(tier="e2e", mutant=None, fixes=())
    platform = cpu_kernel_issues()
    out = []
    for issue in issues:
        row = {"id": issue.id, "releases": issue.releases.split(";")[0]}
        # an e2e repro of its own is expected wherever the fix's code is (repro_from is the original repro's)
        if not (issue.applicable() if issue.e2e_repro else issue.repro_expected()):
            out.append({**row, "verdict": "n/a", "status": "not carried by this release"})
            continue
        if not issue.runs_on("e2e"):
            out.append({**row, "verdict": "n/a", "status": f"not in code tier e2e runs ({issue.code})"})
            continue
        scenario = load_scenario(ROOT / issue.repro_for("e2e"))
        why = not_expressible(scenario)
        if why:
            out.append({**row, "verdict": "not expressible", "status": why})
            continue
        base = tuple(k.id for k in platform if k.id != issue.id)
        try:
            stock = replay(scenario, config=cfg.but(fixes=base))
            fixed = replay(scenario, config=cfg.but(fixes=(*base, issue.id)))
        except BadInput as exc:
            out.append({**row, "verdict": "not expressible", "status": str(exc)})
            continue
        shown, left = [f.signature for f in judge(stock)], [f.signature for f in judge(fixed)]
        verdict = from_trace(stock)
        status = ("fix removes it" if shown and not left else "stock shows nothing" if not shown else
                  "fix leaves " + ", ".join(left))
        out.append({**row, "verdict": verdict["verdict"], "status": status, "shown": shown, "with_fix": left,
                    "requests": verdict["requests"], "why": verdict["why"], "scale": verdict.get("scale"),
                    "kept_fixes": list(base), "exception": verdict.get("exception")})
    return out


def markdown(table: list[dict], command: str) -> str:
    from harness.stamp import stamp

    lines = ["# Known issues on tier e2e: what users see", "",
             "Each known issue's repro on vLLM's whole engine with a real forward (vLLM's CPU build, the tiny local "
             "Nemotron-H), scaled onto the CPU grid, outputs against the uncached reference. `visible`: greedy tokens "
             "differ; `logprobs`: same tokens, logprobs off beyond noise; `clean`: the output matches; a CPU-kernel "
             "crash's fix is kept for the other rows (named).", "",
             "| issue | e2e verdict | fix | first diverging request: cached vs reference tokens |",
             "|---|---|---|---|"]
    for r in table:
        reqs = r.get("requests") or []
        if reqs:
            q = reqs[0]
            tokens = (f"`{q['request']}` output {q['first_divergence']}: {q['cached']} vs {q['reference']} "
                      f"({q['symptom']}, max logprob diff {q['max_logprob_diff']:g})")
        else:
            tokens = r.get("exception") or r.get("why") or ""
        kept = f" (kept: {', '.join(r['kept_fixes'])})" if r.get("kept_fixes") else ""
        lines.append(f"| {r['id']} | {r['verdict']} | {r['status']}{kept} | {tokens} |")
    return "\n".join(lines + ["", stamp(command), ""])


__all__ = ["markdown", "rows"]
