"""`hybrid-harness report-bug FINDING|ISSUE -o BUG.md`: the text vLLM's bug template asks for.

vLLM's template (.github/ISSUE_TEMPLATE/400-bug-report.yml): "Your current environment", "Describe the bug" (with
a minimal reproduction), then what was expected. Here, per finding: the environment; how a user meets it (the
`vllm serve` flags / `LLM(...)` arguments of the minimized scenario, which runners and scheduling modes carry the
code) and how severe it is (read off the oracles that fired); the scenario step by step; expected vs actual per
finding, with the vLLM lines the suggested patch changes (where vLLM's side and the fixed side part); the
regression range (`bisect --known`'s results file); the suggested patch (upstream/patches/); the `--style vllm`
test. `report-bug --open DIR` writes one per known issue open in the newest release the results file covers.
"""

from __future__ import annotations

import json
import re

from harness.errors import BadInput
from harness.known_issues import ROOT, KnownIssue, known_issue_by_id

RESULTS = ROOT / "bench" / "results" / "known_releases.json"
PATCHES = ROOT / "upstream" / "patches"
# what a user sees, by oracle (harness/oracles.py; docs/oracles.md)
SEVERITY = {"vllm-exception": "crash: an exception out of the scheduler kills the engine core (every request fails)",
            "liveness": "stall: the request is never scheduled (or thrashes); the engine hangs with it",
            "provenance": "wrong tokens: the model continues from a Mamba state of another prefix, silently",
            "cache-integrity": "wrong tokens for later requests: a cached block holds the state of another prefix",
            "live-column": "wrong tokens: scheduler and worker disagree on the request's state block",
            "retention": "lost prefix-cache hit rate: a state that should be cached is not (recomputed)",
            "pool-accounting": "leaked KV cache blocks: capacity shrinks until restart",
            "output": "wrong tokens (the model tier's output differs from the uncached reference)"}


def severity(signatures) -> list[str]:
    kinds = dict.fromkeys(s.split(":")[0] for s in signatures)
    return [SEVERITY.get(k, k) for k in kinds]


def exposure(issue: KnownIssue, scenario) -> list[str]:
    """Which runners / scheduling modes / defaults carry or hide it (item 5)."""
    g = scenario.geometry
    out = []
    if issue.runners is None:
        out.append("Scheduler/allocator code: every model runner (V1 and the default V2), synchronous and async "
                   "scheduling alike" + ("; only vLLM's own Scheduler reaches it (its own loop)" if issue.engine_only
                                         else ""))
    else:
        out.append(f"model runner code: only the {'/'.join(issue.runners).upper()} runner"
                   + (" (`VLLM_USE_V2_MODEL_RUNNER=0`; the default for hybrid models is V2 from 0.29, and 0.34.0 "
                      "has no V1 runner)" if issue.runners == ("v1",) else ""))
    if g.prefix_cache_retention_interval is not None:
        out.append(f"sparse prefix-cache retention `prefix_cache_retention_interval={g.prefix_cache_retention_interval}`"
                   + (" (0.33.0's default)" if g.prefix_cache_retention_interval == 0 else ""))
    if g.prefill_checkpoint:
        out.append("Mamba prefill checkpoint blocks (`num_prefill_checkpoint_blocks=1`, Mamba2's default in 0.33.0)")
    if g.num_speculative_tokens:
        out.append(f"speculative decoding with {g.num_speculative_tokens} draft token(s)")
    if any(r.external for r in scenario.requests):
        out.append("a KV connector (`--kv-transfer-config`) returning external hits")
    return out


def patched_lines(patch: str) -> list[str]:
    """file:line of each hunk the patch changes (its old side): where vLLM's side and the fix part."""
    out, current = [], None
    for line in patch.splitlines():
        if line.startswith("--- a/"):
            current = line[6:]
        m = re.match(r"@@ -(\d+),(\d+)", line)
        if m and current:
            start, n = int(m.group(1)), int(m.group(2))
            out.append(f"{current}:{start + 3}-{start + n - 4}")
    return out


def ranges_from_results(issue: KnownIssue) -> tuple[str, str | None]:
    """The issue's row of `bisect --known`'s results (bench/results/known_releases.json), or how to make it."""
    if not RESULTS.exists():
        return f"not measured here: run `hybrid-harness bisect {issue.id}`", None
    from harness.bisect import issue_target, ranges, status

    results = json.loads(RESULTS.read_text())
    releases = sorted(results, key=lambda v: tuple(map(int, v.split("."))))
    t = issue_target(issue)
    sts = [status(t, results[v].get(issue.id, {"error": "harness error"})) for v in releases]
    cells = ", ".join(f"{v} {s}" for v, s in zip(releases, sts))
    return "; ".join(ranges(releases, sts).describe()) + f" (per release: {cells})", releases[-1]


def open_issues() -> tuple[list[str], str]:
    """The known issues reproducing on the newest release of `bisect --known`'s results, and that release."""
    if not RESULTS.exists():
        raise BadInput(f"{RESULTS} is missing: run `hybrid-harness bisect --known -o bench/results/known_releases.md`")
    from harness.bisect import open_in

    results = json.loads(RESULTS.read_text())
    newest = max(results, key=lambda v: tuple(map(int, v.split("."))))
    return open_in(results, newest), newest


def finding_of(issue: KnownIssue) -> dict:
    """Replay the issue's repro here (the installed release) on its tier: a finding artifact (not written)."""
    from harness.artifacts import finding_artifact
    from harness.bisect import issue_config
    from harness.oracles import judge
    from harness.release import vllm_source
    from harness.replay import replay
    from harness.run_config import RunConfig
    from harness.scenario import load_scenario
    from harness.verdict import judge_scenario

    c = issue_config(issue)
    config = RunConfig.from_json({"tier": c["tier"], "engine": c.get("engine") or {}}).but(known_fixes=False)
    scenario = load_scenario(ROOT / issue.repro)
    trace = replay(scenario, config=config)
    findings = judge(trace)
    if not findings:
        raise BadInput(f"{issue.id}: its repro shows nothing on vLLM {vllm_source().describe()}")
    verdict = judge_scenario(scenario, findings, config=config)
    return finding_artifact(scenario, findings, vllm_source().version, config, verdict, trace)


def steps(scenario) -> list[str]:
    out = [f"{i}. request `{r.id}`: a {r.prompt.num_tokens}-token prompt"
           + (f" sharing its first {r.prompt.share.tokens} tokens with `{r.prompt.share.request}`"
              if r.prompt.share else "")
           + (f", arriving at step {r.arrival}" if getattr(r, "arrival", 0) else "")
           + (f", a {'n async' if r.external.async_load else ' sync'} external (connector) hit of "
              f"{r.external.tokens} tokens" if r.external else "")
           + f", `max_tokens={r.max_tokens}`" for i, r in enumerate(scenario.requests, 1)]
    n = len(out)
    for j, e in enumerate(scenario.events or [], n + 1):
        out.append(f"{j}. event: `{json.dumps(e.model_dump(exclude_none=True, by_alias=True))}`")
    return out


def render(artifact: dict, issue: KnownIssue | None, test_text: str | None, test_note: str) -> str:
    from harness.release import vllm_source
    from harness.scenario import parse_scenario
    from harness.vllm_style import user_config

    import platform

    import torch

    scenario = parse_scenario(artifact["scenario"])
    kw, flags = user_config(scenario)
    sigs = sorted({f["signature"] for f in artifact["findings"]})
    title = issue.summary.split(":")[0].split(";")[0] if issue else artifact["signature"]
    patch = (PATCHES / f"{issue.id}.patch").read_text() if issue and (PATCHES / f"{issue.id}.patch").exists() else None
    rng, _ = ranges_from_results(issue) if issue else ("run `hybrid-harness bisect FINDING`", None)
    md = [f"# [Bug]: hybrid Mamba prefix caching: {title}", "",
          f"_Generated by `hybrid-harness report-bug` from {'known issue `' + issue.id + '`' if issue else 'a finding'}"
          f" on vLLM {vllm_source().describe()}._", "", "## Your current environment", "",
          f"- vLLM {artifact.get('vllm_version')} ({vllm_source().kind}), torch {torch.__version__}, Python "
          f"{platform.python_version()}, {platform.system()} {platform.machine()}",
          "- Found by [hybrid-harness](../../README.md), which drives vLLM's own `KVCacheManager` / `MambaManager` "
          "(`mamba_cache_mode=\"align\"`)" + (" and `Scheduler` with vLLM's own model runner" if
                                               artifact.get("tier") == "engine" else "")
          + " on CPU and checks every Mamba state read and cached symbolically; the code at fault is "
          "device-independent.", "", "## Describe the bug", "", (issue.summary + "." if issue else ""), "",
          "### How a user meets it", "", f"- {issue.reached_by}." if issue else "",
          *(f"- {x}." for x in (exposure(issue, scenario) if issue else [])), "", "The minimized configuration:", "",
          "```bash", f"vllm serve MODEL {' '.join(flags)}", "```", "", "```python",
          f"LLM(model=MODEL, {', '.join(f'{k}={v!r}' for k, v in kw.items())})", "```", "",
          "(`MODEL`: a Mamba2 hybrid, e.g. Nemotron-H; the tiny block sizes and pool only make the repro short.)",
          "", "### Severity", "", *(f"- {s}" for s in severity(sigs)), "", "### Steps (the minimized scenario)", "",
          f"Geometry: `{json.dumps(artifact['scenario']['geometry'])}`", "", *steps(scenario), "",
          "### Expected vs actual", ""]
    for f in artifact["findings"]:
        md += [f"- **{f['signature']}** at step {f['step']}" + (f", request `{f['request']}`" if f.get("request")
                                                                 else "") + f": expected {f['expected']}; "
               f"actual {f['actual']} ({f['detail'].splitlines()[0] if f.get('detail') else ''})"]
    if patch:
        md += ["", "Where vLLM and the fixed code part (the lines the suggested patch changes): "
               + ", ".join(f"`{x}`" for x in patched_lines(patch)) + f" (vLLM {artifact.get('vllm_version')})."]
    md += ["", "### Regression range", "", rng, "", "### Suggested patch", ""]
    others = sorted(p.parent.name for p in PATCHES.glob(f"*/{issue.id}.patch")) if issue else []
    md += (["Applies with `patch -p1` to vLLM 0.33.0 (`upstream/patches/" + (issue.id if issue else "") + ".patch`"
            + "".join(f"; for {v}: `upstream/patches/{v}/{issue.id}.patch`, the same change" for v in others)
            + "; checked by `python tools/upstream.py patch ISSUE [--vllm X]`; vLLM's tests/v1/core and "
            "tests/v1/kv_connector/unit on the patched tree beside stock: `python tools/upstream.py suite`):",
            "", "```diff", patch.split("\n\n", 1)[1].rstrip(), "```"] if patch else
           ["None yet in upstream/patches/: the harness's run-time fix "
            + (f"`{issue.fix_name}` ({issue.fix_what}, patching `{issue.fix_target}`)"
               if issue else "") + " is the change to make."])
    md += ["", "### Regression test for vLLM's tree", "", test_note]
    if test_text:
        md += ["", "```python", test_text.rstrip(), "```"]
    md += ["", "### Reproduce with the harness", "", "```bash",
           f"hybrid-harness run {issue.repro if issue else 'FINDING.json'}" + (
               f" --tier {artifact['tier']}" if artifact.get("tier") == "engine" else ""),
           f"hybrid-harness bisect {issue.id if issue else 'FINDING.json'}",
           f"python tools/upstream.py test {issue.id}" if patch else "", "```", ""]
    return "\n".join(md)


def report(target: str) -> tuple[str, str]:
    """(Markdown, issue id or signature) for a known issue id or a finding artifact."""
    from harness.known_issues import KNOWN_ISSUES, fixes_for

    if any(k.id == target for k in KNOWN_ISSUES):
        issue = known_issue_by_id(target)
        artifact = finding_of(issue)
    else:
        from harness.fuzzing import read_finding

        artifact = read_finding(target)
        ids = fixes_for(artifact.get("verdict"))
        issue = ids[0] if len(ids) == 1 else None
    test_text, note = None, ""
    try:
        from harness.vllm_style import emit_vllm_test

        test_text, place = emit_vllm_test(artifact, [issue] if issue else [])
        note = (f"`hybrid-harness regression FINDING --style vllm` places it at `{place}`; "
                f"`python tools/upstream.py test {issue.id if issue else 'ISSUE'}` runs it inside vLLM's own test "
                "tree (its sdist's tests, vLLM's conftest): it fails on the release with the bug and passes with "
                "the patch.")
    except BadInput as exc:
        note = f"Not generated: {exc}."
    return render(artifact, issue, test_text, note), issue.id if issue else artifact["signature"]


__all__ = ["exposure", "open_issues", "patched_lines", "render", "report", "severity"]
