#!/usr/bin/env python3
"""Write the checked-in seed corpora of the fuzz targets (bytes in harness.genome's layout).

    python fuzz/make_seed_corpus.py            # (re)write fuzz/corpus/symbolic/ and fuzz/corpus/model/
    python fuzz/make_seed_corpus.py --check    # exit 1 if a checked-in corpus differs from what it would write

fuzz/corpus/symbolic/ seeds fuzz/symbolic_target.py; its first entry encodes
scenarios/seed-external-hit-same-block.json (hash 2, attention 2, Mamba 8, 32 blocks; a 15-token request with
a 10-token async external hit; a second request sharing 14 tokens).

fuzz/corpus/model/ seeds fuzz/model_target.py. The model tier decodes the same layout with a smaller budget
(harness.genome.Budget(small=True): prompts up to min(48, 3 x Mamba block), 1-3 requests, 2-6 output tokens,
so that repeats can show), so the same bytes can mean another scenario there: these seeds are chosen (and
checked below) for what they decode to in the model tier. Each is cheap to replay with the tiny LM.

ClusterFuzzLite ships each folder as TARGET_seed_corpus.zip (.clusterfuzzlite/build.sh).
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.genome import Budget, decode

CORPUS = Path(__file__).parent / "corpus"

#          mamba attn hash K pool budget flags
GEO_SEED = [1, 0, 1, 0, 3, 4, 0]
SYMBOLIC = {
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

# Request bytes: length, arrival, share-from, share-len, external, ext-mode, max-tokens, 4 x acceptance, reserved.
# Model tier: length = 2 + b % (max_len - 1), max_tokens = 2 + b % 5, requests = 1 + b % 3.
MODEL = {
    # the seed scenario (the symbolic seed's bytes): a 15 tokens, 10-token async hit, 2 outputs; b 20 tokens
    # sharing 14 of a's, 3 outputs -- the wrong state a slip reads reaches the logits
    "seed-external-hit-same-block": SYMBOLIC["seed-external-hit-same-block"],
    # K=2 drafts with mixed acceptance (a: 5 outputs), so the spec post-copy and rejected drafts reach tokens
    "seed-spec-k2": SYMBOLIC["seed-spec-k2"],
    # hash = attention = Mamba block 16: a 40 tokens with a 31-token sync hit, b 32 tokens sharing 21 of a's,
    # a preempted at step 4 and resumed through a fresh lookup, 4 and 5 outputs
    "hash-equals-block-sync-preempt": SYMBOLIC["hash-equals-block-sync"],
    # Mamba 4, attention 2, hash 1 (sub-block partial hits), 12 blocks, a 4-token budget: three requests
    # chaining shared prefixes (b shares 4 of a, c 3 of b) and a 1-token sync hit for c, 4-5 outputs each
    "small-pool-three-requests": [0, 0, 0, 0, 0, 0, 0, 2,
                                  20, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0,
                                  17, 1, 1, 11, 0, 0, 2, 0, 0, 0, 0, 0,
                                  14, 2, 2, 7, 9, 1, 2, 0, 0, 0, 0, 0, 0],
    # prefill checkpoint blocks on (flags bit 0; Mamba2's default, decoded so on releases that have them):
    # Mamba 8, attention 2, hash 1, a 23 tokens; b 24 tokens sharing 14 of a's (a sub-block partial hit)
    # and a 5-token async hit, then 6 outputs each -- decode after a checkpointed prefill
    "prefill-checkpoint-partial-hit": [1, 0, 0, 0, 3, 4, 1, 1,
                                       21, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0,
                                       22, 2, 1, 13, 5, 0, 4, 0, 0, 0, 0, 0, 0],
}

CORPORA = {"symbolic": (SYMBOLIC, False), "model": (MODEL, True)}


def corpus_files() -> dict[Path, bytes]:
    """Every seed file of every corpus, as it should be on disk."""
    return {CORPUS / kind / name: bytes(values)
            for kind, (seeds, _) in CORPORA.items() for name, values in seeds.items()}


def describe(kind: str, data: bytes) -> str:
    small = CORPORA[kind][1]
    scenario = decode(data, Budget(checkpoints=True, small=small))  # checkpoints: as on 0.33.x
    g = scenario.geometry
    reqs = [(r.id, r.prompt.length, r.external.tokens if r.external else 0,
             r.prompt.share.tokens if r.prompt.share else 0, r.max_tokens) for r in scenario.requests]
    return (f"hash {g.hash_block_size} attn {g.attn_block_size} mamba {g.mamba_block_size} pool {g.num_blocks} "
            f"K {g.num_speculative_tokens} ckpt {int(g.prefill_checkpoint)}; (id, len, ext, share, out) {reqs}; "
            f"events {[(e.step, e.kind, e.request) for e in scenario.events]}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    files = corpus_files()
    if "--check" in argv:
        stale = sorted(str(p.relative_to(CORPUS)) for p, data in files.items()
                       if not p.exists() or p.read_bytes() != data)
        extra = sorted(str(p.relative_to(CORPUS)) for kind in CORPORA for p in (CORPUS / kind).glob("*")
                       if p not in files)
        for name in stale:
            print(f"stale or missing: fuzz/corpus/{name}")
        for name in extra:
            print(f"not written by this script: fuzz/corpus/{name}")
        return 1 if stale or extra else 0
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        print(f"{path.parent.name}/{path.name}: {describe(path.parent.name, data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
