"""Which user configurations make vLLM's `cache_config.block_size` (the grid its Mamba chunk split aligns to) fall
below the Mamba group's block in align mode, per release (issue 37, item 6).

    .venv/bin/python bench/measure/block_sizes.py [--releases 0.26.0..0.34.0] [--out bench/results/block_sizes.md]

Each release runs in its own process (its venv, else its unpacked wheel: harness/vllm_trees.py). Per shipped model
(harness/model_configs) x drafter x K x `--block-size`, vLLM's own code builds the geometry, as the engine tier
does (harness/engine/model_geometry.py): its config hooks and `Platform._align_hybrid_block_size` (the attention
block raised until its page holds a Mamba state; in align mode the Mamba block set to it), each layer's spec, the
drafter's layers as its model builds them, and the grouping (page-size unification, hidden-state groups). Then the
engine core's rule after KV init: `cache_config.block_size` = the minimum block over the groups (0.26-0.29,
v1/engine/core.py:311-314 in 0.26.0) or over the prefix-cacheable groups (0.30+, core.py:366-377 in 0.34.0), and
(scheduler block, hash block) from `resolve_kv_cache_block_sizes` as core.py:388 computes them. The Scheduler's
`_mamba_block_aligned_split` aligns chunk ends to `cache_config.block_size` (sched/scheduler.py:589 in 0.34.0,
:379 in 0.26.0); the Mamba manager keeps one state per Mamba block.

Drafters: n-gram (no drafter layers), Qwen3-Next's own MTP head (its layers at the target's attention spec,
qwen3_next_mtp.py), an EAGLE3 head (one Llama decoder layer: 8 KV heads x 128, as the published EAGLE3 heads for
these models), and `extract_hidden_states` (num_speculative_tokens=1; one cache-only layer of num_kv_heads = the
aux layers extracted, head_size = hidden_size: models/extract_hidden_states.py:341-357 in 0.34.0; vLLM runs it on
models with aux hidden-state outputs only, `supports_eagle3`, gpu_model_runner.py:5428 in 0.26.0).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
USER_BLOCKS = (None, 64, 2048)  # no --block-size (FlashAttention's 16, raised), one below every model's, one above
DRAFTERS = (("none", 0), ("ngram", 1), ("ngram", 2), ("mtp", 1), ("mtp", 2), ("eagle3", 1), ("eagle3", 2),
            ("extract_hidden_states:1", 1), ("extract_hidden_states:3", 1), ("extract_hidden_states:4", 1))


def _row(name: str, drafter: str, K: int, user_block: int | None) -> dict:
    import torch
    from vllm.model_executor.models.interfaces import supports_eagle3
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, MambaSpec

    from harness.engine.config import engine_block_sizes, vllm_config
    from harness.engine.model_geometry import (HIDDEN_LAYER, kv_cache_groups_of, engine_block_size, hidden_state_spec,
                                               model_config_for, model_layer_specs)
    from harness.errors import BadInput
    from harness.model_configs import load

    _, doc = load(name)
    vc = vllm_config(8, 2048, 65536, 16, 16, K, drafter in ("mtp", "eagle3"), "v1")
    asked = user_block or 16
    block = model_config_for(name, doc, vc, asked, "align")[0].cache_config.block_size
    vc2, model_cls, specs = model_layer_specs(name, vc, block, "align", K)
    if drafter == "mtp" and not any(k.startswith("mtp.") for k in specs):
        return {"skip": True}
    if drafter.startswith("extract_hidden_states"):
        specs[HIDDEN_LAYER] = hidden_state_spec(vc2, model_cls, int(drafter.partition(":")[2]), block)
    elif drafter == "eagle3":
        if not supports_eagle3(model_cls):
            raise BadInput(f"{model_cls.__name__} has no aux hidden-state outputs (SupportsEagle3)")
        specs = {k: v for k, v in specs.items() if not k.startswith("mtp.")}  # the EAGLE3 head, not the MTP one
        specs["draft.layers.0.self_attn.attn"] = FullAttentionSpec(block_size=block, num_kv_heads=8, head_size=128,
                                                                   dtype=torch.bfloat16)
    groups = kv_cache_groups_of(vc2, specs)
    cc_block = engine_block_size(groups)
    mamba = {g.kv_cache_spec.block_size for g in groups if isinstance(g.kv_cache_spec, MambaSpec)}
    kinds: dict = {}
    for g in groups:
        label = f"{type(g.kv_cache_spec).__name__.replace('Spec', '')} {g.kv_cache_spec.block_size}"
        kinds[label] = kinds.get(label, 0) + 1
    try:  # (scheduler block, hash block) as the engine core resolves them, no --prefix-match-unit
        _, sched, hashb = engine_block_sizes(vc2, KVCacheConfig(num_blocks=1, kv_cache_tensors=[],
                                                               kv_cache_groups=groups))
    except BadInput as exc:
        sched, hashb = f"refused: {exc}", ""
    else:  # vLLM's coordinator needs every group's block a multiple of the hash unit (kv_cache_coordinator.py:563-569
        # in 0.26.0; the prefix-cacheable groups', :663-676 in 0.34.0, every group here): else the engine does not start
        if any(g.kv_cache_spec.block_size % hashb for g in groups):
            hashb = f"{hashb} (refused at engine start: not a divisor of every group's block)"
    return {"align_block": block, "groups": ", ".join(f"{k} x{v}" if v > 1 else k for k, v in kinds.items()),
            "cache_block": cc_block, "mamba_block": max(mamba), "scheduler_block": sched, "hash_block": hashb,
            "below": cc_block < min(mamba)}


def worker() -> None:
    from harness.vllm_adapter import installed_version, load_vllm

    load_vllm()
    from harness.errors import BadInput
    from harness.model_configs import shipped

    for name in shipped():
        for drafter, K in DRAFTERS:
            for ub in USER_BLOCKS:
                key = {"release": installed_version(), "model": name, "drafter": drafter, "K": K, "user_block": ub}
                try:
                    row = _row(name, drafter, K, ub)
                except BadInput as exc:
                    row = {"refused": str(exc).splitlines()[0][:160]}
                if not row.get("skip"):
                    print(json.dumps({**key, **row}), flush=True)


def _flags(r: dict) -> str:
    out = []
    if r["user_block"]:
        out.append(f"--block-size {r['user_block']}")
    d = r["drafter"]
    if d != "none":
        method, _, n = d.partition(":")
        out.append(f"spec {method} K={r['K']}" + (f", {n} aux layers" if n else ""))
    return " ".join(out) or "defaults"


def _ranges(releases: list[str], picked: list[str]) -> str:
    spans, cur = [], []
    for v in releases:
        if v in picked:
            cur.append(v)
        elif cur:
            spans.append(cur)
            cur = []
    if cur:
        spans.append(cur)
    return ", ".join(s[0] if len(s) == 1 else f"{s[0]}..{s[-1]}" for s in spans)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--releases", default=None, help="A..B or A,B,C (default: every release)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "block_sizes.md"))
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.worker:
        from harness.vllm_env import prepare

        prepare()
        worker()
        return
    from harness.errors import BadInput
    from harness.stamp import stamp
    from harness.vllm_trees import parse_releases, run_json_lines, runner_for

    try:
        releases = parse_releases(args.releases)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    rows = []
    for v in releases:
        print(f"vLLM {v}", file=sys.stderr, flush=True)
        rows += run_json_lines(runner_for(v, fetch=False), [str(Path(__file__).resolve()), "--worker"])
    by_conf: dict = {}
    refused: dict = {}
    for r in rows:
        if r.get("refused"):  # one line per model and reason (the release named in a reason is dropped)
            why = r["refused"].replace(f"vLLM {r['release']}'s ", "").replace(f"vLLM {r['release']} ", "")
            refused.setdefault((r["model"], why), {}).setdefault(r["release"], set()).add(
                r["drafter"] + (f" K={r['K']}" if r["K"] else ""))
            continue
        conf = (r["model"], _flags(r))
        result = tuple(r[k] for k in ("groups", "cache_block", "mamba_block", "scheduler_block", "hash_block", "below"))
        by_conf.setdefault(conf, {}).setdefault(result, []).append(r["release"])
    lines = ["# cache_config.block_size vs the Mamba block, per user configuration and release", "",
             ("Groups: each KV cache group's spec and block size as vLLM builds them; `block_size`: "
              "`cache_config.block_size` after KV init (the grid `_mamba_block_aligned_split` aligns chunk ends to); "
              "sched / hash: `resolve_kv_cache_block_sizes` (no --prefix-match-unit). **below**: `block_size` < the "
              "Mamba block. Every configuration runs `--mamba-cache-mode align --enable-prefix-caching`."), "",
             "| model | configuration | releases | groups | block_size | Mamba block | sched / hash | below |",
             "|---|---|---|---|---|---|---|---|"]
    below = []
    for (model, flags), results in by_conf.items():
        for (groups, cc, mb, sb, hb, low), vs in results.items():
            span = _ranges(releases, vs)
            lines.append(f"| {model} | {flags} | {span} | {groups} | {cc} | {mb} | {sb} / {hb} | "
                         f"{'**below**' if low else ''} |")
            if low:
                stops = "refused" in str(sb) + str(hb)
                below.append(f"- {model}, {flags}: {span}: block_size {cc} < Mamba block {mb}"
                             + (": vLLM refuses it at engine start" if stops else ""))
    lines += ["", "## Refused (no geometry)", ""]
    for (model, why), per_release in refused.items():
        drafters = sorted(set().union(*per_release.values()))
        lines.append(f"- {model}, {', '.join(drafters)} ({_ranges(releases, list(per_release))}): {why}")
    runs = sum("refuses" not in line for line in below)
    lines += ["", f"## block_size below the Mamba block: {len(below)} configuration x release spans, {runs} of them "
              "engines that start", ""] + below
    command = "python bench/measure/block_sizes.py" + (f" --releases {args.releases}" if args.releases else "")
    lines += ["", stamp(command), ""]
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}: {len(below)} spans below", file=sys.stderr)


if __name__ == "__main__":
    main()
