#!/usr/bin/env python3
"""Replay every seed-corpus input and every kept crash file with its expected verdict (CI, `make ci-fuzz`).

    python fuzz/check_corpora.py [--update]

Each input is decoded with its target's budget (fuzz/corpus/<tier>/ by the tier's target, fuzz/regressions/ by
the symbolic target) and judged twice, as a campaign judges it:
- on the fixed system (every applicable known fix applied): no new finding, ever, on stock vLLM;
- on stock vLLM: the known issues it shows must be exactly those recorded in fuzz/expected-verdicts.json for
  the installed release (a release without a record is held to "nothing new" only).
`--update` rewrites the installed release's record. Exit 0 all as expected, 1 a verdict changed, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
EXPECTED = ROOT / "fuzz" / "expected-verdicts.json"
FOLDERS = {"symbolic": ["fuzz/corpus/symbolic", "fuzz/regressions"], "model": ["fuzz/corpus/model"],
           "engine": ["fuzz/corpus/engine"]}


def verdict_of(path: Path, tier: str) -> str:
    """'clean', or 'known ID[,ID]' (the known issues stock vLLM shows), or 'NEW ...' (never expected)."""
    from harness.genome import decode, release_budget
    from harness.run_config import RunConfig
    from harness.verdict import replay_and_judge

    config = RunConfig(tier=tier)
    runner = config.engine.runner  # the replays' runner: mode none decodes only for vLLM's runners
    scenario = decode(path.read_bytes(), release_budget(small=config.runs_model, tier=tier, runner=runner))
    _, _, fixed = replay_and_judge(scenario, config=config.but(known_fixes=True))
    if fixed is not None and fixed.is_new:
        return "NEW " + ", ".join(fixed.new)
    _, _, stock = replay_and_judge(scenario, config=config.but(known_fixes=False))
    if stock is None:
        return "clean"
    if stock.is_new:  # new on stock though the fixed system is clean: a fix hides it, the verdict is wrong
        return "NEW (stock) " + ", ".join(stock.new)
    ids = sorted({i for k in stock.known.values() for i in k.split("+")})
    return "known " + ",".join(ids)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="record the verdicts of the installed release")
    args = parser.parse_args(argv)
    import harness.engine.scheduler  # noqa: F401 - sets vLLM's environment for its runners before vLLM loads
    from harness.errors import BadInput
    from harness.vllm_adapter import installed_version, load_vllm

    load_vllm()
    version = installed_version()
    try:
        records = json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {}
    except json.JSONDecodeError as exc:
        print(f"error: {EXPECTED} is not JSON: {exc}", file=sys.stderr)
        return 2
    expected = records.get(version, {})
    seen, bad = {}, 0
    for tier, folders in FOLDERS.items():
        for folder in folders:
            for path in sorted((ROOT / folder).iterdir()):
                rel = str(path.relative_to(ROOT))
                try:
                    got = verdict_of(path, tier)
                except BadInput as exc:  # the release cannot express this input (e.g. checkpoints before 0.33)
                    got = f"not expressible: {exc}"
                seen[rel] = got
                want = expected.get(rel)
                ok = not got.startswith("NEW") and (args.update or want is None or want == got)
                bad += not ok
                print(f"{'ok ' if ok else 'BAD'} {rel} [{tier}]: {got}" + ("" if ok or want is None else f" (expected {want})"))
    if args.update:
        records[version] = seen
        EXPECTED.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(seen)} verdicts for vLLM {version} in {EXPECTED.relative_to(ROOT)}")
    print(f"{len(seen) - bad}/{len(seen)} inputs as expected on vLLM {version}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
