"""Re-run sweep findings with prefill checkpoints off (not a test).

    python bench/checkpoint_differential.py ARTIFACT_DIR   # sweep artifacts or a campaign's findings/

For every finding artifact whose geometry has prefill checkpoints, replays the same scenario with
`prefill_checkpoint: false` and reports whether the finding goes away: a finding that needs checkpoints to
show is the known checkpoint mid-block-start issue's territory (README).
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

from harness.oracles import judge
from harness.replay import replay
from harness.scenario import parse_scenario


def main() -> None:
    counts = collections.Counter()
    root = Path(sys.argv[1])
    for path in sorted([*root.glob("*.json"), *root.rglob("finding.json")]):
        artifact = json.loads(path.read_text())
        doc = artifact["scenario"]
        sig = artifact["findings"][0]["signature"]
        if not doc["geometry"]["prefill_checkpoint"]:
            counts[f"no checkpoints in geometry: {sig}"] += 1
            continue
        doc["geometry"]["prefill_checkpoint"] = False
        still = judge(replay(parse_scenario(doc)))
        counts[f"{'persists' if still else 'vanishes'} without checkpoints: {sig}"] += 1
    for key, n in counts.most_common():
        print(f"{n:5d}  {key}")


if __name__ == "__main__":
    main()
