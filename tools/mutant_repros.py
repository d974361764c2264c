"""A minimized killing scenario per bank mutant, for the emitted-regression tests (scenarios/mutants/NAME.json).

    .venv/bin/python tools/mutant_repros.py [--count 3000] [--only NAME ...]

Per mutant: generated scenarios (harness.generate.random_scenario, seeds 0..COUNT-1, checkpoints where the
release has them) until one kills it by the mutants-check rule (harness.mutation.kills: fires with the
patch, no known fix explains it, stock vLLM does not show it); that scenario is minimized under the same
rule and written with the mutant and signature it kills. A mutant nothing kills is reported, not written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--out", default=str(ROOT / "scenarios" / "mutants"))
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from harness.errors import HarnessError
    from harness.generate import random_scenario
    from harness.mutants import REGISTRY
    from harness.mutation import describe_scenario, kills, minimized_kill
    from harness.run_config import RunConfig
    from harness.replay import replay
    from harness.oracles import judge
    from harness.scenario import scenario_to_json
    from harness.vllm_adapter import supports_prefill_checkpoints, supports_retention

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    missing = []
    for name in args.only or list(REGISTRY):
        found = None
        config = RunConfig(mutant=name)
        for seed in range(args.count):
            scenario = random_scenario(seed, checkpoints=supports_prefill_checkpoints(), retention=supports_retention())
            try:
                fired = bool(judge(replay(scenario, config=config)))
                sig = kills(scenario_to_json(scenario), config=config) if fired else None
            except HarnessError:
                continue
            if sig:
                found = (seed, sig, scenario_to_json(scenario))
                break
        if found is None:
            missing.append(name)
            print(f"{name}: no killing scenario in seeds 0..{args.count - 1}")
            continue
        seed, sig, doc = found
        path = out / f"{name}.json"
        kept = minimized_kill(doc, sig, path, seconds=60, config=config)
        stored = json.loads(path.read_text())
        stored["scenario"]["name"] = f"kills mutant {name} ({sig}); generator seed {seed}, minimized"
        path.write_text(json.dumps(stored, indent=1) + "\n")
        print(f"{name}: seed {seed}, {sig}, {describe_scenario(kept)} -> {path}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
