"""Time-to-detect: coverage-guided (atheris) vs random sampling, same decoder and budget (FuzzBench-style).

    .venv-0.27.1/bin/python bench/measure/time_to_detect.py [--trials 10] [--budget 120] [--out bench/results/ttd.md]
    .venv/bin/python bench/measure/time_to_detect.py --all-mutants [--trials 3] [--budget 30] [--out bench/results/mutants_guided_vs_random.md]

Without --mutant/--all-mutants it measures the seed bug on a release that carries it. With mutants, each
mutant is applied (in the fuzz workers and in the random loop) and detection is a finding whose scenario
does not fire on stock vLLM (differential), so stock bugs never count.

Run it on a release that carries the seed bug as published (0.26.0-0.27.1), on one core (taskset -c 0).
Coverage-guided: each trial is a fresh `fuzz/symbolic_target.py` process on an empty corpus (libFuzzer
seed = trial), with `make fuzz`'s settings (prefill checkpoints on where the release has them); start-up
(import + instrumentation, until the first input runs) is reported apart from the time-to-detect after
start-up. Random: `harness.genome.random_bytes` inputs through the same decoder, replay and oracles in one
process (start-up paid once). A trial that finds nothing within the budget counts as the budget (censored,
marked). Both strategies detect by one rule (`detects`): without a mutant, an input with a finding the seed
bug's known issue (`seed-external-hit-unmarked`) explains, the guided target replaying stock
(HH_KNOWN_FIXES=off); with a mutant, `harness.mutation.kills` (fires with the patch, not on stock, not known).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.campaign import LIBFUZZER_FLAGS

ROOT = Path(__file__).resolve().parents[2]
SEED_ISSUE = "seed-external-hit-unmarked"  # harness/known_issues.toml: the seed bug on 0.26.0-0.27.1


def detects(doc: dict, mutant: str | None) -> bool:
    """The detection rule both strategies share."""
    from harness.verdict import judge_scenario
    from harness.mutation import kills
    from harness.oracles import judge
    from harness.replay import replay
    from harness.run_config import RunConfig
    from harness.scenario import parse_scenario

    if mutant:
        return kills(doc, config=RunConfig(mutant=mutant)) is not None
    scenario = parse_scenario(doc)
    findings = judge(replay(scenario))
    # the seed bug is a known issue on the releases that ship it: detected is a finding its fix explains
    verdict = judge_scenario(scenario, findings, config=RunConfig(tier="symbolic")) if findings else None
    return verdict is not None and SEED_ISSUE in verdict.known.values()


def fuzz_trial(trial: int, budget: float, mutant: str | None = None) -> tuple[float, float | None, int]:
    with tempfile.TemporaryDirectory() as tmp:
        corpus, art = Path(tmp, "corpus"), Path(tmp, "findings")
        corpus.mkdir()
        # keep going: a new finding that is not a kill must not end the trial; without a mutant the seed bug is
        # known, so the target replays stock (no fixes) and keeps the finding without crashing
        env = dict(os.environ, HH_ARTIFACTS=str(art), PYTHONPATH=str(ROOT), HH_MUTANT=mutant or "",
                   HH_KEEP_GOING="1", HH_KNOWN_FIXES="on" if mutant else "off")
        started = time.monotonic()
        subprocess.run([sys.executable, str(ROOT / "fuzz/symbolic_target.py"), str(corpus), f"-seed={trial + 1}",
                        *LIBFUZZER_FLAGS, f"-max_total_time={int(budget)}", f"-dict={ROOT / 'fuzz/symbolic.dict'}",
                        f"-artifact_prefix={tmp}/"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=budget + 120)
        wall = time.monotonic() - started
        hits = []
        for f in sorted(art.glob("finding-*/finding.json")):
            doc = json.loads(f.read_text())
            if detects(doc["scenario"], mutant):
                d = doc["detection"]
                hits.append((d["after_startup_s"], d["startup_s"], d["execs"]))
        if hits:
            after, startup, execs = min(hits)
            return startup, after, execs
        return wall, None, 0


def random_trials(trials: int, budget: float, mutant: str | None = None) -> tuple[float, list[tuple[float | None, int]]]:
    from harness.replay import replay
    from harness.genome import decode, random_bytes, release_budget
    from harness.oracles import judge
    from harness.scenario import scenario_to_json
    from harness.run_config import RunConfig
    from harness.vllm_adapter import load_vllm

    startup = load_vllm()
    config = RunConfig(mutant=mutant)
    out = []
    for trial in range(trials):
        rng = random.Random(trial + 1)
        t0, execs, found = time.monotonic(), 0, None
        while time.monotonic() - t0 < budget:
            execs += 1
            scenario = decode(random_bytes(rng), release_budget())
            findings = judge(replay(scenario, config=config))
            if findings and detects(scenario_to_json(scenario), mutant):
                found = time.monotonic() - t0
                break
        out.append((found, execs))
    return startup, out


def row(name: str, times: list[float | None], budget: float) -> str:
    values = [t if t is not None else budget for t in times]
    misses = sum(t is None for t in times)
    med = statistics.median(values)
    return (f"| {name} | {med:.2f} | {min(values):.2f} | {max(values):.2f} | {len(times) - misses}/{len(times)} |", med)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--budget", type=float, default=120.0)
    parser.add_argument("--mutant", action="append", help="measure killing this mutant (repeatable)")
    parser.add_argument("--all-mutants", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from harness.stamp import stamp
    from harness.vllm_adapter import installed_version

    if args.mutant or args.all_mutants:
        from harness.mutants import REGISTRY

        names = args.mutant or list(REGISTRY)
        lines = [f"Guided (atheris) vs random sampling per mutant on vLLM {installed_version()}: {args.trials} trials, "
                 f"budget {args.budget:.0f} s each, 1 core, empty corpus, seconds after start-up; a kill fires with the "
                 "patch, not on stock, and no known fix explains it (harness.mutation.kills).", "",
                 "| mutant | guided median s | guided kills | random median s | random kills | ratio random/guided |",
                 "|---|---|---|---|---|---|"]
        for name in names:
            guided = [fuzz_trial(t, args.budget, name)[1] for t in range(args.trials)]
            _, rnd = random_trials(args.trials, args.budget, name)
            rtimes = [r[0] for r in rnd]
            g = statistics.median([t if t is not None else args.budget for t in guided])
            r = statistics.median([t if t is not None else args.budget for t in rtimes])
            lines.append(f"| `{name}` | {g:.2f} | {sum(t is not None for t in guided)}/{args.trials} | {r:.2f} | "
                         f"{sum(t is not None for t in rtimes)}/{args.trials} | {r / max(g, 1e-9):.2f} |")
            print(lines[-1], flush=True)
        lines += ["", stamp(f"taskset -c N python bench/measure/time_to_detect.py --all-mutants --trials {args.trials} "
                            f"--budget {args.budget:.0f}")]
        out = Path(args.out or ROOT / "bench" / "results" / "mutants_guided_vs_random.md")
    else:
        fuzz = [fuzz_trial(t, args.budget) for t in range(args.trials)]
        startup_random, rnd = random_trials(args.trials, args.budget)
        fuzz_row, fuzz_med = row("coverage-guided (atheris)", [f[1] for f in fuzz], args.budget)
        rnd_row, rnd_med = row("random sampling", [r[0] for r in rnd], args.budget)
        startups = [f[0] for f in fuzz if f[1] is not None]
        lines = [
            f"Time-to-detect of the seed bug on vLLM {installed_version()}, {args.trials} trials, budget "
            f"{args.budget:.0f} s, 1 core, empty corpus. Seconds after start-up.",
            "",
            "| strategy | median | min | max | detected |",
            "|---|---|---|---|---|",
            fuzz_row,
            rnd_row,
            "",
            f"Ratio random/guided (medians): {rnd_med / max(fuzz_med, 1e-9):.2f}. "
            f"Start-up of a fuzz worker (import + instrumentation): median "
            f"{statistics.median(startups) if startups else float('nan'):.1f} s; "
            f"random sampling start-up (import): {startup_random:.1f} s. "
            f"Execs to detect, guided: {[f[2] for f in fuzz]}; random: {[r[1] for r in rnd]}.",
            "",
            stamp(f"taskset -c 0 python bench/measure/time_to_detect.py --trials {args.trials} --budget {args.budget:.0f}"),
        ]
        out = Path(args.out or ROOT / "bench" / "results" / "time_to_detect.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
