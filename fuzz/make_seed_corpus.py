#!/usr/bin/env python3
"""Write the checked-in seed corpus for fuzz/symbolic_target.py (bytes in harness.genome's layout).

    python fuzz/make_seed_corpus.py

The first entry encodes scenarios/seed-external-hit-same-block.json (hash 2, attention 2, Mamba 8,
32 blocks; a 15-token request with a 10-token async external hit; a second request sharing 14 tokens).
"""

from pathlib import Path

from harness.genome import decode

OUT = Path(__file__).parent / "corpus" / "symbolic"

#          mamba attn hash K pool budget flags
GEO_SEED = [1, 0, 1, 0, 3, 4, 0]
SEEDS = {
    # a: len 15, arrival 0, ext 10 async; b: len 20, arrival 3, shares 14 tokens of a, max_tokens 2
    "seed-external-hit-same-block": GEO_SEED + [1,
                                                13, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0,
                                                18, 3, 1, 13, 0, 0, 1, 0, 0, 0, 0, 0, 0],
    # the same with K=2 drafts, mixed acceptance
    "seed-spec-k2": [1, 0, 1, 2, 3, 4, 0, 1,
                     13, 0, 0, 0, 10, 0, 3, 2, 0, 1, 2, 0,
                     18, 3, 1, 13, 0, 0, 4, 1, 1, 0, 2, 0, 0],
    # hash = block (16), sync external hit, preemption event
    "hash-equals-block-sync": [2, 3, 4, 1, 2, 1, 0, 1,
                               38, 0, 0, 0, 31, 1, 2, 1, 0, 1, 1, 0,
                               30, 2, 1, 20, 0, 0, 3, 1, 1, 1, 1, 0,
                               1, 3, 0, 0],
    # small pool, tight budget, four requests sharing prefixes
    "small-pool-four-requests": [0, 0, 0, 0, 0, 0, 0, 3,
                                 20, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0,
                                 17, 1, 1, 11, 0, 0, 2, 0, 0, 0, 0, 0,
                                 14, 2, 2, 7, 9, 1, 2, 0, 0, 0, 0, 0,
                                 25, 4, 1, 15, 0, 2, 2, 0, 0, 0, 0, 0, 0],
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, values in SEEDS.items():
        data = bytes(values)
        scenario = decode(data)
        (OUT / name).write_bytes(data)
        print(name, [(r.id, r.prompt.length, r.external.tokens if r.external else 0) for r in scenario.requests])


if __name__ == "__main__":
    main()
