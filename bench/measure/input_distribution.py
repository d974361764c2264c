"""How often does each input distribution reach each bank mutant? (Why a campaign can lose to a sweep.)

    taskset -c 0 .venv/bin/python bench/measure/input_distribution.py [--count 1000] [--out bench/results/input_distribution.md]

Per mutant, COUNT inputs from each source are replayed with the mutant applied and judged by the kill rule
(harness.mutation.kills: a finding no known fix explains that stock vLLM does not show):
- sweep:   harness.generate.random_scenario(seed) — what `hybrid-harness sweep` replays;
- fuzz:    harness.genome.decode(random_bytes) — the fuzzer's input space, sampled uniformly (the start of
           every campaign, and the random-sampling baseline of bench/measure/time_to_detect.py).
A bug class the fuzz space reaches far less often than the sweep's needs coverage guidance to make up for it.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "input_distribution.md"))
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from harness.replay import replay
    from harness.run_config import RunConfig
    from harness.errors import HarnessError
    from harness.generate import random_scenario
    from harness.genome import decode, random_bytes, release_budget
    from harness.mutants import REGISTRY
    from harness.mutation import kills
    from harness.oracles import judge
    from harness.scenario import scenario_to_json
    from harness.stamp import stamp
    from harness.vllm_adapter import installed_version, supports_prefill_checkpoints

    checkpoints = supports_prefill_checkpoints()
    rng = random.Random(0)
    sources = {
        "sweep": [random_scenario(s, checkpoints=checkpoints) for s in range(args.count)],
        "fuzz": [decode(random_bytes(rng), release_budget()) for _ in range(args.count)],
    }
    rows = []
    for name in REGISTRY:
        counts = {}
        config = RunConfig(mutant=name)
        for source, scenarios in sources.items():
            n = 0
            for sc in scenarios:
                try:
                    fired = bool(judge(replay(sc, config=config)))
                    n += fired and kills(scenario_to_json(sc), config=config) is not None
                except HarnessError:
                    continue
            counts[source] = n
        rows.append(f"| `{name}` | {counts['sweep']} | {counts['fuzz']} |")
        print(rows[-1], flush=True)
    command = f"taskset -c 0 python bench/measure/input_distribution.py --count {args.count}"
    text = "\n".join([f"# Kills per {args.count} inputs, by input source (vLLM {installed_version()})", "",
                      stamp(command), "", __doc__.split("\n\n", 2)[2].strip(), "",
                      "| mutant | sweep scenarios that kill it | fuzz-space inputs that kill it |", "|---|---|---|",
                      *rows])
    Path(args.out).write_text(text + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
