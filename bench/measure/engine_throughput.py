"""Engine-tier throughput per worker: scenarios/s, start-up and ms per step, uninstrumented.

    taskset -c 0 .venv/bin/python bench/measure/engine_throughput.py --runner v2 --kernels torch --count 300
    .venv/bin/python bench/measure/engine_throughput.py --table --core 0 --out bench/results/engine_throughput.md

One measurement: a fresh process replays generated scenarios (harness.generate.random_scenario, prefill
checkpoints off: the V1/V2 workers do not simulate them) on the engine tier with the given runner and kernels,
judging each trace (the oracles' cost is part of a sweep's). Start-up = process start to the first scenario
judged (vLLM import, config, the first runner build); the rate counts the rest. Scenarios the engine tier cannot
express (BadInput) are skipped and counted. `--table` runs mirror, v1 and v2 with torch kernels and v2 with
Triton's interpreter (fewer scenarios), each in its own process (pinned with --core), and writes the table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

T0 = time.perf_counter()
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TABLE = (("mirror", "torch", 300), ("v1", "torch", 300), ("v2", "torch", 300), ("v2", "triton", 6))
# the default configuration (`sweep --tier engine`: runner auto, the sweep's scenarios on the run's budget, prefill
# checkpoints where the release has them), taken apart: one replay each ("sweep-one"), then as the sweep judges them
# (`judge_input`: the fixed system, and stock again where it is clean, to report the known issues it reaches)
DEFAULT_ROWS = (("auto", "torch", 300, "replay"), ("auto", "torch", 300, "sweep-one"), ("auto", "torch", 300, "sweep"))


def measure(runner: str, kernels: str, count: int, seed: int = 0, model_config: str | None = None,
            cache_mode: str | None = None, pipeline: str = "replay") -> dict:
    from harness.run_config import RunConfig

    config = RunConfig(tier="engine", model_config=model_config, cache_mode=cache_mode).but(runner=runner,
                                                                                            kernels=kernels)
    from harness.errors import BadInput
    from harness.generate import random_scenario
    from harness.oracles import judge
    from harness.replay import replay

    models = ()
    if model_config:  # every scenario on the model's geometry (what --model-config does to a sweep)
        from harness.engine.model_catalog import model_entry

        models = (model_entry(model_config),)

    from harness.genome import budget_scenario, run_budget
    from harness.verdict import judge_input
    from harness.vllm_adapter import supports_prefill_checkpoints

    budget, checkpoints = run_budget(config), supports_prefill_checkpoints()
    replays = [0]

    def one(s):
        if pipeline == "replay":
            # --mamba-cache-mode: every scenario in that mode (random_scenario pins a mode given alone)
            scenario = random_scenario(s, checkpoints=False, models=models, model_share=1.0,
                                       modes=(cache_mode,) if cache_mode else ("align",))
        else:  # the sweep's own scenarios
            scenario = budget_scenario(s, budget, checkpoints)
        if pipeline == "sweep":
            trace, _, verdict = judge_input(scenario, config)
            replays[0] += 1 + (verdict is None)  # the fixed system, then stock where it was clean
            return trace
        trace = replay(scenario, config=config.but(fixes=()) if pipeline == "replay" else config)
        judge(trace)
        replays[0] += 1
        return trace

    startup = None
    ran = skipped = steps = asynchronous = 0
    started = None
    for s in range(seed, seed + count + 1):
        try:
            trace = one(s)
        except BadInput:
            skipped += 1
            continue
        if startup is None:  # the first scenario judged: start-up ends, the rate starts
            startup = time.perf_counter() - T0
            started, cpu0 = time.perf_counter(), time.process_time()
            replays[0] = 0
            used = trace.runner
            continue
        ran += 1
        steps += trace.steps_run
        asynchronous += bool(getattr(trace, "async_scheduling", False))
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    scheduling = "async" if asynchronous == ran else "sync" if not asynchronous else f"async {asynchronous} of {ran}"
    return {"cpu_seconds": round(cpu, 3), "scenarios_per_cpu_s": round(ran / cpu, 2), "runner": runner,
            "kernels": kernels, "worker": used, "scheduling": scheduling, "scenarios": ran, "skipped": skipped,
            "pipeline": pipeline,
            "replays_per_scenario": round(replays[0] / max(ran, 1), 2),
            "steps": steps, "seconds": round(elapsed, 3), "scenarios_per_s": round(ran / elapsed, 2),
            "ms_per_step": round(1000 * elapsed / max(steps, 1), 3), "startup_s": round(startup, 2)}


def table(core: int | None, out: Path | None, counts: dict[str, int]) -> int:
    from harness.stamp import stamp

    rows = []
    for runner, kernels, count, pipeline in [(*row, "replay") for row in TABLE] + list(DEFAULT_ROWS):
        count = counts.get(f"{runner}:{kernels}", count)
        cmd = [sys.executable, __file__, "--runner", runner, "--kernels", kernels, "--count", str(count), "--json",
               "--pipeline", pipeline]
        if core is not None:
            cmd = ["taskset", "-c", str(core), *cmd]
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if res.returncode:
            print(res.stderr[-2000:], file=sys.stderr)
            return 3
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
        print(_line(rows[-1]), flush=True)
    pin = f"taskset -c {core} " if core is not None else ""
    lines = ["# Engine-tier throughput", "",
             stamp(f"{pin}.venv/bin/python bench/measure/engine_throughput.py --table"
                   + (f" --core {core}" if core is not None else "") + (f" --out {out}" if out else "")), "",
             "Generated scenarios (`random_scenario(seed, checkpoints=False)`, seeds from 0), each replayed on the "
             "engine tier and judged, one process per row (pinned to one core); start-up = process start to "
             "the first scenario judged (vLLM import, config, first runner build); the rate counts the rest.", "",
             "Wall-clock rates move with the machine's other load (a shared 2-core box here); scenarios per CPU "
             "second is the process's own time.", "",
             "Scheduling is what `--async-scheduling auto` resolves to: vLLM's decision where the worker follows it "
             "(async for its V2 runner, and for its V1 runner on configs without drafts; the mirror worker runs "
             "synchronously).", "",
             "Pipeline: `replay` = the table's configuration (one replay and the oracles per scenario, no checkpoint "
             "geometries); the default configuration of `sweep --tier engine` taken apart: `sweep-one` = the sweep's "
             "own scenarios (the run's budget, prefill checkpoints where the release has them) replayed once on the "
             "fixed system; `sweep` = judged as the sweep judges them (`judge_input`: the fixed system, then stock "
             "again wherever the fixed system is clean, so the known issues it reaches are reported).", "",
             "| runner | kernels | pipeline | scheduling | scenarios | skipped (BadInput) | steps | replays/scenario | "
             "scenarios/s | ms/step | scenarios/CPU-s | start-up (s) |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['runner']} ({r['worker']}) | {r['kernels']} | {r.get('pipeline', 'replay')} | "
                     f"{r.get('scheduling', '?')} | {r['scenarios']} | {r['skipped']} | {r['steps']} | "
                     f"{r.get('replays_per_scenario', 1)} | {r['scenarios_per_s']} | {r['ms_per_step']} | "
                     f"{r['scenarios_per_cpu_s']} | {r['startup_s']} |")
    text = "\n".join(lines) + "\n"
    if out:
        out.write_text(text)
    print(text)
    return 0


def _line(r: dict) -> str:
    return (f"{r['runner']} ({r['worker']}), kernels {r['kernels']}, {r.get('pipeline', 'replay')}, "
            f"{r.get('scheduling', '?')}: {r['scenarios']} scenarios ({r['skipped']} skipped), {r['steps']} steps in "
            f"{r['seconds']} s: {r['scenarios_per_s']} scenarios/s, {r['ms_per_step']} ms/step; "
            f"{r['scenarios_per_cpu_s']} scenarios per CPU second; start-up {r['startup_s']} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runner", choices=("mirror", "v1", "v2", "auto"), default="v2")
    ap.add_argument("--kernels", choices=("torch", "triton"), default="torch")
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="one JSON line (what --table reads)")
    ap.add_argument("--table", action="store_true", help="every runner in its own process; write the table")
    ap.add_argument("--core", type=int, default=None, help="with --table: pin each process to this core")
    ap.add_argument("--counts", default="", help="with --table: RUNNER:KERNELS=N,... overrides")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--model-config", default=None, help="every scenario on this real model's geometry (engine tier)")
    ap.add_argument("--mamba-cache-mode", dest="cache_mode", choices=("align", "none", "all"), default=None,
                    help="every scenario in this Mamba cache mode (default align)")
    ap.add_argument("--pipeline", choices=("replay", "sweep-one", "sweep"), default="replay",
                    help="replay: one replay per generated scenario; sweep-one / sweep: the default sweep's scenarios, "
                         "replayed once / judged as the sweep judges them")
    args = ap.parse_args(argv)
    if args.table:
        counts = {k: int(v) for k, v in (p.split("=") for p in args.counts.split(",") if p)}
        return table(args.core, args.out, counts)
    r = measure(args.runner, args.kernels, args.count, args.seed, args.model_config, args.cache_mode, args.pipeline)
    print(json.dumps(r) if args.json else _line(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
