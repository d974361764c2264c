"""Triage of a `sweep --extract-hidden-states` run's findings: each finding artifact is replayed on the fixed system
(every known issue's fix in force, as the sweep judges), then also with the scheduler's `cache_config.block_size`
left at the Mamba block instead of the engine core's minimum over the groups (harness.engine.model_geometry.
engine_block_size: the hidden-state group's smaller block). A finding that goes is the Mamba split aligning chunk
ends to the hidden-state group's grid (docs/engine-tier.md).

    .venv/bin/python bench/measure/block_grid_triage.py ARTIFACTS_DIR [--runner auto]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("artifacts", help="a sweep's --artifacts folder")
    parser.add_argument("--runner", default="auto")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from harness.vllm_env import prepare

    prepare()
    import harness.engine.model_geometry as mg
    from harness.known_issues import issues_for
    from harness.oracles import judge
    from harness.replay import replay
    from harness.run_config import RunConfig
    from harness.scenario import parse_scenario
    from harness.vllm_adapter import installed_version

    paths = sorted(Path(args.artifacts).glob("sweep-*.json"))
    if not paths:
        print(f"error: no sweep-*.json finding artifacts in {args.artifacts}", file=sys.stderr)
        sys.exit(2)
    # the fixed system, as the sweep judges it: every known issue's fix this configuration reaches in force
    config = RunConfig(tier="engine").but(runner=args.runner)
    config = config.but(fixes=tuple(k.id for k in issues_for(config.tier, config.engine.runner)))
    minimum = mg.engine_block_size
    stays, signatures, reproduced = [], Counter(), 0
    for path in paths:
        sc = parse_scenario(json.loads(path.read_text())["scenario"])
        found = {f.signature for f in judge(replay(sc, config=config))}
        signatures.update(found)
        reproduced += bool(found)
        mg.engine_block_size = lambda groups: max(g.kv_cache_spec.block_size for g in groups)
        try:
            left = {f.signature for f in judge(replay(sc, config=config))}
        finally:
            mg.engine_block_size = minimum
        if left:
            stays.append((path.name, sorted(found), sorted(left)))
    print(f"vLLM {installed_version()}: {len(paths)} finding artifacts, {reproduced} with findings on the fixed "
          f"system (signatures {dict(signatures)}); with block_size at the Mamba block {len(stays)} keep findings:")
    for row in stays:
        print("  ", *row)


if __name__ == "__main__":
    main()
