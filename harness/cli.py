"""`hybrid-harness` command line: run a scenario (or a finding artifact) through the real allocator."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from harness.errors import EXIT_BAD_INPUT, EXIT_FINDING, EXIT_HARNESS_ERROR, EXIT_OK, BadInput, HarnessError
from harness.sweep import tier_label

def _config(args: argparse.Namespace, recorded: dict | None = None, **given):
    """This command's run configuration (harness.run_config.RunConfig), built once here and passed down: for
    each field the value `given` by the command, else its flag, else what a finding artifact `recorded`, else
    the environment's HH_* variable (the CLI is an entry point), else the default."""
    from harness.run_config import ENV, RunConfig

    fields = ("tier", "mutant", "model", "runner", "async_scheduling", "kernels", "forward", "copy_timing",
              "model_config", "cache_mode", "hidden_states", "e2e_model", "witness_vllm")
    values = {k: os.environ.get(ENV[k]) or None for k in fields}
    if recorded:
        values.update({k: recorded.get(k) for k in ("tier", "mutant", "model") if recorded.get(k)})
        values.update({k: v for k, v in (recorded.get("engine") or {}).items() if k in fields and v})
    values.update({k: getattr(args, k) for k in fields if getattr(args, k, None) is not None})
    values.update({k: v for k, v in given.items() if v is not None})
    config = RunConfig.from_env({}, **values)
    if config.tier == "engine" and config.engine.runner == "v1":  # refused when the command starts, not per input
        from harness.release import vllm_release

        vllm_release().refuse_v1("--runner v1")
    return config


# `run` flags that configure vLLM's replay only: given with --engine sglang they are refused, not ignored
VLLM_ONLY_RUN_FLAGS = ("tier", "model", "runner", "forward", "async_scheduling", "kernels", "copy_timing",
                       "model_config", "e2e_model")


def _run_engine(args: argparse.Namespace) -> str:
    """--engine as given, else the file's own: a finding the SGLang wing wrote replays on the SGLang wing."""
    if args.engine is not None:
        return args.engine
    from harness.sglang.sweep import FINDING_KIND

    try:
        doc = json.loads(Path(args.scenario).read_text())
    except (OSError, ValueError):
        return "vllm"  # load_scenario names what is wrong with the file
    return "sglang" if isinstance(doc, dict) and doc.get("kind") == FINDING_KIND else "vllm"


def _cmd_run_sglang(args: argparse.Namespace) -> int:
    """The SGLang wing, in its own venv and process: its exit code is the run's."""
    from harness.engines import sglang_wing

    given = [f"--{name.replace('_', '-')}" for name in VLLM_ONLY_RUN_FLAGS if getattr(args, name, None) is not None]
    given += ["--e2e"] if args.e2e else []
    if given:
        raise BadInput(f"{', '.join(given)}: vLLM's replay options, not the SGLang wing's (--engine sglang)")
    return sglang_wing(args.scenario, *(["--mutant", args.mutant] if args.mutant else []),
                       *(["--json"] if args.json else [])).returncode


def _cmd_run(args: argparse.Namespace) -> int:
    if _run_engine(args) == "sglang":
        return _cmd_run_sglang(args)
    from harness.replay import replay
    from harness.verdict import finding_artifact, judge_scenario, masking_issues
    from harness.witness import judged
    from harness.release import vllm_source
    from harness.scenario import load_scenario
    from harness.vllm_adapter import check_supported, installed_version

    scenario = load_scenario(args.scenario)
    version = installed_version()
    check_supported(version)
    recorded = _artifact(args.scenario)
    recorded.pop("mutant", None)  # a replay applies --mutant only (an artifact found with a mutant replays on stock)
    config = _config(args, recorded, mutant=args.mutant)
    tier = config.tier
    if config.model_config and scenario.geometry.model is None:  # the scenario moved onto the model's geometry
        from harness.engine.model_catalog import model_entry
        from harness.generate import with_model
        from harness.scenario import parse_scenario, scenario_to_json

        scenario = parse_scenario(with_model(scenario_to_json(scenario), model_entry(config.model_config)))
    trace = replay(scenario, config=config)
    findings = judged(scenario, config, trace)
    verdict = judge_scenario(scenario, findings, config=config) if findings else None
    masking = masking_issues(verdict, tier)
    while masking:  # each CPU-kernel bug may hide another behind it
        trace = _behind(scenario, config, masking, trace, findings, verdict)
        deeper = [k for k in masking_issues(verdict, tier) if k not in masking]
        masking = [*masking, *deeper] if deeper else []
    e2e = _e2e(args, scenario, config, trace, verdict) if findings or tier == "e2e" else None
    artifact_path = None
    if findings:
        stem = Path(args.scenario).stem
        artifact = finding_artifact(scenario, findings, version, config, verdict, trace)
        if e2e is not None:
            artifact = artifact.but(e2e=e2e)
        artifact_path = artifact.write(Path(args.artifacts), stem)
    if args.json:
        print(json.dumps({
            "scenario": str(args.scenario), **vllm_source().as_json(), "mutant": args.mutant,
            "tier": tier, "steps": trace.steps_run, "ok": not findings, "outputs": _outputs_json(trace),
            "artifact": str(artifact_path) if artifact_path else None,
            "findings": [f.to_json() for f in findings], "verdict": verdict.to_json() if verdict else None,
            "unjudged": trace.unjudged, "e2e": e2e,
        }, indent=1, default=str))
    else:
        _print_run(args, config, trace, findings, verdict, artifact_path, e2e)
    # a replay is strict: any finding, known or new, exits 1 (campaigns and sweeps fail on new ones only)
    return EXIT_FINDING if findings else EXIT_OK


def _print_run(args, config, trace, findings, verdict, artifact_path, e2e) -> None:
    """The human-readable result of `run`."""
    from harness.oracles import describe_outputs, output_summary
    from harness.release import vllm_source

    label = f"vLLM {vllm_source().describe()}" + (f" + mutant {args.mutant}" if args.mutant else "") + f", {tier_label(config)}"
    if trace.outputs is not None:
        print(f"outputs: {describe_outputs(output_summary(trace))}")
    if not findings:
        print(f"OK  {args.scenario}: {trace.steps_run} steps on {label}; all oracles hold")
    else:
        state = "new" if verdict.is_new else "all known"
        print(f"FINDING  {args.scenario}: {len(findings)} finding(s) on {label}, {state} "
              f"(artifact: {artifact_path})")
        for f in findings:
            print(f"  [{verdict.label(f.signature)}] {f.headline()}")
            print(f"      {f.detail}")
        for sig in verdict.revealed:
            print(f"  [NEW, revealed once the known fixes are applied] {sig}")
    for oracle, why in trace.unjudged.items():
        print(f"  ({oracle} not judged: {why})")
    if e2e is not None:
        from harness.e2e_verdict import describe

        print(describe(e2e))


def _behind(scenario, config, masking, trace, findings, verdict):
    """vLLM's CPU kernels raised first (tier e2e): what lies behind, replayed with their fixes kept, added to
    `findings` and `verdict` (classified with those fixes in every replay). Returns the trace to report outputs of."""
    from harness.oracles import judge
    from harness.replay import replay
    from harness.verdict import judge_scenario

    behind = replay(scenario, config=config.but(fixes=tuple(k.id for k in masking)))
    extra = [f for f in judge(behind) if f.signature not in {g.signature for g in findings}]
    if extra:
        behind_verdict = judge_scenario(scenario, extra, config=config, base=masking)
        findings += extra
        verdict.signatures += behind_verdict.signatures
        for name in ("unexplained", "revealed", "latent"):
            getattr(verdict, name).extend(getattr(behind_verdict, name))
        verdict.revealed = [s for s in verdict.revealed if s not in verdict.unexplained]
        verdict.known.update(behind_verdict.known)
        verdict.regressions.update(behind_verdict.regressions)
    return behind if behind.exception is None else trace


def _e2e(args, scenario, config, trace, verdict) -> dict | None:
    """What users see: a tier-e2e trace's own outputs, or (`run --e2e`) the finding replayed on tier e2e."""
    from harness.e2e_verdict import from_trace
    from harness.verdict import confirm_on_e2e

    if config.tier == "e2e":
        return from_trace(trace)
    return confirm_on_e2e(scenario, config, verdict) if getattr(args, "e2e", False) else None


def _artifact(path: str) -> dict:
    """What a finding artifact recorded about how it was found (its `config`, else the `tier`, `model`,
    `mutant` and `engine` fields older artifacts carry); a plain scenario records nothing."""
    from harness.artifacts import FindingArtifact

    try:
        return FindingArtifact.read(path).config
    except BadInput:
        return {}  # a plain scenario (or a broken file: load_scenario reports the problem)


def _outputs_json(trace) -> list | None:
    if trace.outputs is None:
        return None
    from harness.oracles import output_symptom

    return [{"request": r.request, "prompt_len": r.prompt_len, "output": r.tokens[r.prompt_len:],
             "max_logit_diff": max(r.max_diff), "symptom": output_symptom(r)} for r in trace.outputs]


def _cmd_sweep(args: argparse.Namespace) -> int:
    from harness.vllm_adapter import check_supported, installed_version

    config = _config(args, known_fixes=args.known_fixes == "on")
    config = config.but(checkpoints=_checkpoints(args.checkpoints))
    version = installed_version()
    check_supported(version)
    return _sweep(args, version, config)


def _sweep(args: argparse.Namespace, version: str, config) -> int:
    from harness.oracles import describe_outputs
    from harness.sweep import run_sweep

    result = run_sweep(config, args.seed, args.count, Path(args.artifacts))
    print(f"sweep: {args.count} scenarios (seeds {args.seed}..{args.seed + args.count - 1}), {result.steps} steps, "
          f"{tier_label(config)}, vLLM {version}{' + mutant ' + args.mutant if args.mutant else ''}: "
          f"{len(result.new)} with findings ({len(result.known)} more with known vLLM issues), "
          f"{len(result.errors)} harness errors; {result.per_second:.1f} scenarios/s after {result.startup_s:.1f} s "
          "start-up")
    if result.outputs:
        print(f"outputs: {describe_outputs(result.outputs)}")
    for seed, err, path in result.errors:
        print(f"HARNESS ERROR seed {seed} (not a vLLM finding): {err} ({path})", file=sys.stderr)
    if result.errors:
        return EXIT_HARNESS_ERROR
    return EXIT_FINDING if result.new else EXIT_OK


def _cmd_fuzz(args: argparse.Namespace) -> int:
    if args.target == "main":
        return _fuzz_main(args)
    return _fuzz(args)


def _fuzz_main(args: argparse.Namespace) -> int:
    """The main job: the mirrored tier's campaign (fast: the allocator and the mirror of the Scheduler's loop) and,
    side by side, an engine-tier campaign of one worker (vLLM's own Scheduler, connector and model runner: code the
    mirror does not copy), for the same time or runs: the symbolic half under ARTIFACTS (its findings, corpus and
    report where a symbolic campaign keeps them), the engine half under ARTIFACTS/engine. Exit: the more serious
    of the two halves' (3 a harness error, 2 bad input, 1 a new finding, 0 clean)."""
    import subprocess

    if args.mutant:
        from harness.mutants import get_mutant

        get_mutant(args.mutant)  # bad name: exit 2 before any worker starts
    root = Path(args.artifacts)
    budget = ["--minutes", str(args.minutes)] if args.minutes is not None else (
        ["--runs", str(args.runs)] if args.runs else ["--minutes", "2"])
    engine = [sys.executable, "-m", "harness", "fuzz", "--tier", "engine", "--jobs", "1", "--seed", str(args.seed),
              "--artifacts", str(root / "engine"), "--known-fixes", args.known_fixes, "--checkpoints", args.checkpoints,
              "--no-progress", *budget, *(["--seed-corpus"] if args.seed_corpus else []),
              *(["--mutant", args.mutant] if args.mutant else []), *(["--no-minimize"] if args.no_minimize else [])]
    (root / "engine").mkdir(parents=True, exist_ok=True)
    with open(root / "engine" / "campaign.log", "w") as log:
        half = subprocess.Popen(engine, stdout=log, stderr=subprocess.STDOUT)
        try:
            symbolic = _fuzz(argparse.Namespace(**{**vars(args), "target": "symbolic"}))
        finally:
            engine_code = half.wait()
    print(f"main job, engine tier (vLLM's own Scheduler, one worker; log {root / 'engine' / 'campaign.log'}):")
    for line in (root / "engine" / "campaign.log").read_text().splitlines():
        if line.startswith(("fuzz:", "  ")) or "HARNESS ERROR" in line:
            print(f"  {line}")
    # the more serious outcome of the two halves: a harness error, bad input, a new finding, clean
    return max((symbolic, engine_code), key=lambda c: {3: 4, 2: 3, 1: 2, 0: 1}.get(c, 5))


def _fuzz(args: argparse.Namespace) -> int:
    from harness.campaign import Campaign
    from harness.verdict import is_departure, new_signatures
    from harness.mutants import get_mutant
    from harness.oracles import describe_outputs

    if args.mutant:
        get_mutant(args.mutant)  # bad name: exit 2 before any worker starts
    config = _config(args, tier=args.target, known_fixes=args.known_fixes == "on")
    config = config.but(checkpoints=_checkpoints(args.checkpoints))  # the workers get it (to_env)
    if args.jobs < 1:
        raise BadInput("--jobs must be at least 1")
    seconds = args.minutes * 60 if args.minutes is not None else (None if args.runs else 120.0)
    artifacts = Path(args.artifacts)
    corpus = Path(args.corpus) if args.corpus else artifacts / "corpus"
    campaign = Campaign(config=config, corpus=corpus, artifacts=artifacts, jobs=args.jobs, seconds=seconds,
                        runs=args.runs, seed=args.seed, seed_corpus=args.seed_corpus, progress=not args.no_progress)
    summary = campaign.run()
    new = summary["findings_new"]
    new_bugs = [name for name in new if summary["verdicts"][name]["new"]]  # known issues have their repro already
    if new_bugs and not args.no_minimize:
        _minimize_kept([artifacts / "findings" / name for name in new_bugs], config)
        summary = dict(campaign.summary(), elapsed=summary["elapsed"], execs_per_s=summary["execs_per_s"])
    n_new = sum(v["new"] for v in summary["verdicts"].values())
    n_departures = sum(map(is_departure, summary["verdicts"].values()))
    print(f"fuzz: {summary['execs']} execs in {summary['elapsed']} s ({summary['execs_per_s']}/s, {args.jobs} job(s)), "
          f"coverage {summary['cov']}, corpus {summary['corpus']}, kept inputs {summary['findings_total']} "
          f"({len(new)} kept this run): {n_new} with new findings, {summary['findings_total'] - n_new - n_departures} all known, "
          f"{n_departures} mirror departures (not vLLM findings); "
          f"harness errors {summary['harness_errors']}")
    if summary.get("outputs"):
        print(f"  outputs: {describe_outputs(summary['outputs'])}")
    unknown = 0
    for name, verdict in summary["verdicts"].items():
        folder = artifacts / "findings" / name
        extra = " (minimized)" if (folder / "minimized.json").exists() else ""
        is_new = verdict["new"]
        unknown += is_new
        departure = is_departure(verdict)
        label = (("NEW" if name in new else "NEW (kept by an earlier run)") if is_new else
                 "MIRROR DEPARTURE, not a vLLM finding" if departure else "KNOWN")
        what = new_signatures(verdict) if is_new or departure else []
        known = ", ".join(f"{s} = {k}" for s, k in verdict["known"].items())
        print(f"  [{label}] {name}: {'; '.join(what) or '-'}{'; known: ' + known if known else ''}{extra}  {folder}")
    other = summary.get("findings_other_configurations") or []
    if other:
        print(f"  {len(other)} finding(s) in {artifacts / 'findings'} were kept by campaigns of another configuration "
              "(vLLM release, mutant or tier): not judged here")
    if summary["harness_errors"]:
        print(f"harness errors (not vLLM findings) kept in {artifacts / 'findings' / 'harness-errors'}", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    if not summary.get("execs"):  # the workers ran nothing (each died at its first input): never green
        print("harness error (not a vLLM finding): the campaign executed no input", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    return EXIT_FINDING if unknown else EXIT_OK


def _minimize_kept(folders, config) -> None:
    from harness.artifacts import FindingArtifact, write_json_atomic
    from harness.known_issues import fixes_for
    from harness.minimize import minimize
    from harness.regression import emit_regression
    from harness.scenario import parse_scenario, scenario_to_json

    for folder in folders:
        artifact = FindingArtifact.read(folder)
        mutant = config.mutant
        try:  # under the configuration the finding recorded, else the campaign's
            small = minimize(parse_scenario(artifact.scenario), artifact.signature, seconds=60,
                             new_only=artifact.is_new, config=artifact.run_config(config))
        except BadInput as exc:  # e.g. the finding no longer reproduces: keep it as found, say why
            print(f"  {folder.name}: not minimized: {exc}", file=sys.stderr)
            continue
        write_json_atomic(folder / "minimized.json", artifact.but(scenario=scenario_to_json(small)).as_json())
        # recorded without the mutant (and with the known fixes): the test passes where the bug is gone
        try:
            test = emit_regression(small, artifact.signature, mutant, fixes_for(artifact.verdict))
        except BadInput as exc:  # the standalone test drives vLLM's allocator as the mirrored tier does: a
            # geometry only the engine tier runs (mode none or all, a real model's groups) has none
            print(f"  {folder.name}: no standalone regression test: {exc}", file=sys.stderr)
            continue
        (folder / "test_regression.py").write_text(test)


def _cmd_minimize(args: argparse.Namespace) -> int:
    from harness.artifacts import FindingArtifact, write_json_atomic
    from harness.minimize import minimize
    from harness.scenario import parse_scenario, scenario_to_json

    artifact = FindingArtifact.read(args.finding)
    config = _config(args, artifact.config)
    small = minimize(parse_scenario(artifact.scenario), artifact.signature, seconds=args.seconds,
                     new_only=artifact.is_new, config=config)
    write_json_atomic(Path(args.output), artifact.but(scenario=scenario_to_json(small)).as_json())
    print(f"minimized to {len(small.requests)} request(s), {len(small.events)} event(s): {args.output}")
    return EXIT_OK


def _cmd_regression(args: argparse.Namespace) -> int:
    from harness.artifacts import FindingArtifact
    from harness.known_issues import fixes_for
    from harness.regression import emit_regression
    from harness.scenario import parse_scenario

    artifact = FindingArtifact.read(args.finding)
    if args.style == "vllm":
        from harness.vllm_style import emit_vllm_test

        issues = fixes_for(artifact.verdict)
        if args.issue:
            issues = [k for k in issues if k.id == args.issue]
            if not issues:
                raise BadInput(f"regression --issue {args.issue}: the finding is not attributed to it")
        text, where = emit_vllm_test(artifact, issues)
        Path(args.output).write_text(text)
        print(f"wrote {args.output} (its place in vLLM's tree: {where})")
        return EXIT_OK
    text = emit_regression(parse_scenario(artifact.scenario), artifact.signature, artifact.mutant,
                           fixes_for(artifact.verdict))
    Path(args.output).write_text(text)
    print(f"wrote {args.output}")
    return EXIT_OK


def _cmd_report(args: argparse.Namespace) -> int:
    from harness.report import render

    md, page = render(args.directory)
    print(f"wrote {md} and {page}")
    return EXIT_OK


def _cmd_mutants(args: argparse.Namespace) -> int:
    from harness.mutants import REGISTRY

    if args.action == "list":
        for m in REGISTRY.values():
            where = f"{m.runner} worker" if m.runner else "core"
            print(f"{m.name:28s} {m.releases:22s} {where:9s} {m.origin or 'synthetic':28s} {m.bug_class}")
        return EXIT_OK
    from harness.mutation import check, mutant_names, table

    if args.jobs < 1 or args.trials < 1 or args.budget_seconds <= 0:
        raise BadInput("--jobs, --trials and --budget-seconds must be positive")
    names = mutant_names(args.only)
    results = check(names, budget_s=args.budget_seconds, jobs=args.jobs, trials=args.trials,
                    work=Path(args.work) if args.work else None, seed_corpus=args.seed_corpus,
                    full_budget=args.full_budget, tier=args.tier)
    command = "hybrid-harness mutants check " + " ".join(sys.argv[3:] if len(sys.argv) > 3 else [])
    text = table(results, command.strip())
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    survived = [r for r in results if r.verdict == "survived"]
    return EXIT_FINDING if survived else EXIT_OK


def _cmd_diff(args: argparse.Namespace) -> int:
    """The mirrored tier against the engine tier: exit 0 same everywhere, 1 some difference."""
    from harness.diff import diff, diff_sweep
    from harness.scenario import load_scenario
    from harness.vllm_adapter import check_supported, installed_version, supports_prefill_checkpoints, supports_retention

    check_supported(installed_version())
    from harness.run_config import ENV

    # diff checks the mirrored worker by default (the engine's default is vLLM's own runner), synchronously:
    # the mirrored tier is synchronous, so is the engine side it is compared with, unless asked (V2's async
    # schedule differs by design)
    defaults = {k: v for k, v in (("runner", "mirror"), ("async_scheduling", "off"))
                if getattr(args, k, None) is None and ENV[k] not in os.environ}
    config = _config(args, tier="engine", **defaults)
    if config.model_config:  # every scenario would be skipped: say so instead of a green run that compared nothing
        raise BadInput("diff --model-config: the mirrored tier runs the harness's own two-group geometry only; compare "
                       "a real model's runners with `sweep --tier engine --runner v1|v2|mirror --model-config NAME`")
    if args.scenario:
        report = diff(load_scenario(args.scenario), config=config)
        print(report.describe(limit=args.limit))
        return EXIT_OK if report.same else EXIT_FINDING
    if args.count is None or args.count < 1:
        raise BadInput("give a SCENARIO or --count N")
    checkpoints = supports_prefill_checkpoints() and _checkpoints(args.checkpoints)
    result = diff_sweep(config, args.seed, args.count, checkpoints, supports_retention())
    print(result.summary(installed_version()))
    return EXIT_FINDING if result.differing else EXIT_OK


def _cmd_engines(args: argparse.Namespace) -> int:
    """One scenario on vLLM's engine tier and on the SGLang wing (harness/engines.py)."""
    from harness.engines import compare, print_comparison
    from harness.scenario import load_scenario
    from harness.vllm_adapter import check_supported, installed_version

    check_supported(installed_version())
    scenario = load_scenario(args.scenario)
    result, code = compare(args.scenario, scenario, _config(args, tier="engine", mutant=args.mutant),
                           args.sglang_mutant)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_comparison(result)
    return code


def _checkpoints(mode: str) -> bool:
    """--checkpoints (sweep, fuzz, diff): `auto` (and `on`) generates prefill checkpoint geometries where the
    release has them, on every tier (the engine tier's V1 and V2 workers export them as vLLM's Mamba2 builder
    says); `off` never."""
    return mode != "off"


def _cmd_known(args: argparse.Namespace) -> int:
    from harness.known_issues import KNOWN_ISSUES

    if args.action == "list":
        for k in KNOWN_ISSUES:
            print(f"{k.id}\n  {k.summary}\n  repro: {k.repro}  ({k.releases})\n  reached by: {k.reached_by}\n"
                  f"  fix: {k.fix_what} (patches {k.fix_target})")
        return EXIT_OK
    from harness.known_check import BLOCKED, run_known_check
    from harness.vllm_adapter import installed_version

    config = _config(args, tier=args.tier, mutant="")
    if config.tier == "e2e":
        return _known_e2e(args, config)
    runner = config.engine.runner if config.tier == "engine" else None
    rows, runner_seen = run_known_check(config)
    from harness.known_issues import known_issue_by_id, upstream_fix_note

    for row in rows:
        print(f"{row['id']:38s} {row['status']}" + (f"  (shows {row['shown']}; with the fix {row['with_fix']})"
                                                     if "shown" in row else ""))
        note = upstream_fix_note(known_issue_by_id(row["id"]), gone=row["status"] == "NO LONGER REPRODUCES")
        if note:
            print(f"{'':38s} {note}")
    print(f"vLLM {installed_version()}, {args.tier} tier" + (f", runner {runner}" if runner else "")
          + (f" (vLLM picked {'/'.join(sorted(runner_seen))})" if runner_seen else ""))
    if any(r["status"] == "FIX DOES NOT REMOVE IT" for r in rows):
        return EXIT_HARNESS_ERROR  # the harness's fix is wrong
    return EXIT_FINDING if any(r["status"] in ("NO LONGER REPRODUCES", BLOCKED) for r in rows) else EXIT_OK


def _known_e2e(args: argparse.Namespace, config) -> int:
    """`known check --tier e2e`: each known issue's repro on vLLM's whole engine, what users see (exit 2 where
    this vLLM has no CPU build)."""
    from harness.e2e_known import markdown, rows
    from harness.e2e_verdict import unavailable_reason
    from harness.errors import BadInput

    why = unavailable_reason()
    if why:
        raise BadInput(why)
    table = rows(config)
    for r in table:
        reqs = r.get("requests") or []
        tokens = f"  {reqs[0]['request']}: {reqs[0]['cached']} vs reference {reqs[0]['reference']}" if reqs else ""
        print(f"{r['id']:40s} {r['verdict']:16s} {r['status']}{tokens}")
    if args.out:
        command = "hybrid-harness known check --tier e2e -o " + args.out
        Path(args.out).write_text(markdown(table, command))
        print(f"written {args.out}")
    return EXIT_OK


def _cmd_bisect(args: argparse.Namespace) -> int:
    from harness.bisect import command

    return command(args)


def _cmd_report_bug(args: argparse.Namespace) -> int:
    from harness.bug_report import index, open_issues, report

    if args.open:
        ids, newest = open_issues()
        out = Path(args.output or "docs/upstream")
        out.mkdir(parents=True, exist_ok=True)
        for issue_id in ids:
            (out / f"{issue_id}.md").write_text(report(issue_id)[0])
            print(f"wrote {out / issue_id}.md", flush=True)
        (out / "README.md").write_text(index(out))
        print(f"{len(ids)} known issue(s) open in vLLM {newest}; {out / 'README.md'} indexes every page there")
        return EXIT_OK
    if not args.target or not args.output:
        raise BadInput("report-bug: give FINDING|ISSUE and -o BUG.md (or --open [-o DIR])")
    text, what = report(args.target)
    Path(args.output).write_text(text)
    print(f"wrote {args.output} ({what})")
    if Path(args.output).parent.joinpath("README.md").exists() and Path(args.output).parent.name == "upstream":
        Path(args.output).parent.joinpath("README.md").write_text(index(Path(args.output).parent))
    return EXIT_OK


def _cmd_workload(args: argparse.Namespace) -> int:
    from harness.workload_cli import main as workload_main

    return workload_main(args.rest)


def _cmd_version(args: argparse.Namespace) -> int:
    from harness.release import vllm_release

    release = vllm_release()  # the version floor and every API the harness needs (exit 2 naming a missing one)
    print(f"vllm {release.source.describe()}")
    return EXIT_OK


def _cmd_witness_serve(args: argparse.Namespace) -> int:
    from harness.witness import serve

    return serve()


def build_parser() -> argparse.ArgumentParser:
    from harness.cli_parser import build_parser as parser

    return parser({"run": _cmd_run, "sweep": _cmd_sweep, "fuzz": _cmd_fuzz, "minimize": _cmd_minimize,
                   "regression": _cmd_regression, "report": _cmd_report, "mutants": _cmd_mutants, "diff": _cmd_diff,
                   "engines": _cmd_engines,
                   "known": _cmd_known, "bisect": _cmd_bisect, "report_bug": _cmd_report_bug,
                   "workload": _cmd_workload, "version": _cmd_version, "witness_serve": _cmd_witness_serve})


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from harness.vllm_env import prepare

        prepare(args.vllm)  # before anything imports vLLM (the tree --vllm names, the CPU platform)
        if args.witness_vllm:  # every worker of the run reads it back (RunConfig.from_env)
            from harness.release import ENV_WITNESS, tree_root

            os.environ[ENV_WITNESS] = tree_root(args.witness_vllm, "--witness-vllm")
        return args.func(args)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except HarnessError as exc:
        print(f"harness error (not a vLLM finding): {exc}", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    except BrokenPipeError:  # the reader went away (`| head`): not an error of ours
        sys.stderr.close()
        return EXIT_OK
    except Exception:  # any other error is the harness's, never the exit code of a finding
        import traceback

        traceback.print_exc()
        print("harness error (not a vLLM finding): uncaught exception above", file=sys.stderr)
        return EXIT_HARNESS_ERROR


if __name__ == "__main__":
    sys.exit(main())
