"""What users see of a finding: its scenario replayed on vLLM's whole engine with a real forward (tier e2e), the
outputs against the uncached reference.

- `visible`: some request's greedy tokens differ from the reference's (first divergence, tokens beside the
  reference's, a repeated span named `repeat`), or vLLM raises (the request fails with an error);
- `logprobs`: the same greedy tokens, logprobs off beyond float noise (harness.e2e.engine.TOLERANCE);
- `clean`: every generation matches the reference: the wrong state was not read by a step that generated, or
  its effect stayed within noise;
- `not expressible`: the e2e tier cannot run the scenario (the field is named);
- `unavailable`: this vLLM has no CPU build to run it (why), or the replay raised a harness error.

Pure bookkeeping over a trace (`from_trace`); `e2e_verdict` replays when the finding came from another tier.
Imports no vLLM itself."""

from __future__ import annotations

from harness.errors import BadInput, HarnessError

VERDICTS = ("visible", "logprobs", "clean", "not expressible", "unavailable")


def unavailable_reason() -> str | None:
    """Why tier e2e cannot run in this process (None: it can)."""
    from harness.release import cpu_build_reason

    return cpu_build_reason()


def from_trace(trace) -> dict:
    """The e2e verdict of a tier-e2e trace."""
    from harness.oracles import first_divergence, symptom_at, reference_output

    requests, visible, drift = [], False, False
    for rec in trace.outputs or ():
        first_logit, first_token = first_divergence(rec)
        if first_logit is None and first_token is None:
            continue
        out = rec.tokens[rec.prompt_len:]
        entry = {"request": rec.request, "cached": out, "max_logprob_diff": round(max(rec.max_diff), 6)}
        if first_token is not None:
            visible = True
            entry.update(first_divergence=first_token, reference=out[:first_token] + reference_output(rec)[first_token:],
                         symptom=symptom_at(rec, first_token), step=rec.steps[first_token])
        else:
            drift = True
            entry.update(first_divergence=first_logit, reference=out, symptom="logprobs",
                         step=rec.steps[first_logit])
        requests.append(entry)
    e2e = trace.e2e or {}
    generated = sum(len(rec.tokens) - rec.prompt_len for rec in trace.outputs or ())
    if visible or trace.exception is not None:  # a request that fails with an error is seen too
        verdict = "visible"
    elif drift:
        verdict = "logprobs"
    else:
        verdict = "clean"
    why = {"visible": ("greedy tokens differ from the uncached reference" if trace.exception is None else
                       f"vLLM raises: {trace.exception.error} at {trace.exception.site}"),
           "logprobs": "greedy tokens are the reference's; logprobs differ beyond float noise",
           "clean": (f"all {generated} generated token(s) of {len(trace.outputs or ())} request(s) match the uncached "
                     "reference, logprobs within noise: no generating step read a wrong state" if generated else
                     f"no request generated a token in the {trace.steps_run} step(s) run (the loop ended "
                     f"{trace.end.reason if trace.end else 'early'}): nothing to compare")}
    out = {"verdict": verdict, "why": why[verdict], "requests": requests, "vllm_version": trace.vllm_version,
           "scale": e2e.get("scale"), "block_size": e2e.get("block_size")}
    if trace.exception is not None:
        out["exception"] = f"{trace.exception.error} at {trace.exception.site}"
    return out


def e2e_verdict(scenario, config, fixes: tuple[str, ...] = ()) -> dict:
    """Replay `scenario` on tier e2e with the configuration's mutant and `fixes` (those of the replay that showed
    the finding, and the fixes of known crashes of vLLM's CPU kernels, which would stop the replay first), and say
    what users see."""
    why = unavailable_reason()
    if why:
        return {"verdict": "unavailable", "why": why}
    from harness.e2e.geometry import not_expressible
    from harness.known_issues import cpu_kernel_issues, issues_for
    from harness.replay import replay

    field = not_expressible(scenario)
    if field:
        return {"verdict": "not expressible", "why": field}
    runs_here = issues_for("e2e")
    # a known crash of vLLM's CPU kernels (runners ["cpu"]) would stop the replay before the finding: kept fixed
    platform = tuple(k.id for k in cpu_kernel_issues())
    ids = {k.id for k in runs_here}
    cfg = config.but(tier="e2e", fixes=tuple(dict.fromkeys([*platform, *(f for f in fixes if f in ids)])))
    try:
        trace = replay(scenario, config=cfg)
    except BadInput as exc:
        return {"verdict": "not expressible", "why": str(exc)}
    except HarnessError as exc:
        return {"verdict": "unavailable", "why": f"harness error on tier e2e: {exc}"}
    out = from_trace(trace)
    out["fixes"] = list(cfg.fixes)
    return out


def describe(verdict: dict) -> str:
    """One line per verdict, with the first diverging request's tokens."""
    head = f"e2e: {verdict['verdict']}"
    reqs = verdict.get("requests") or []
    if verdict["verdict"] in ("visible", "logprobs") and reqs:
        r = reqs[0]
        head += (f" (request {r['request']}, output {r['first_divergence']}: cached {r['cached']} vs reference "
                 f"{r['reference']}; {r['symptom']}, max |logprob diff| {r['max_logprob_diff']:g})")
    else:
        head += f" ({verdict.get('why', '')})"
    return head


__all__ = ["VERDICTS", "describe", "e2e_verdict", "from_trace", "unavailable_reason"]
