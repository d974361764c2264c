"""Random scenarios over the space the driver understands (for sweeps and property tests).

Geometries mix hash < block and hash = block, K = 0/1/2, small pools that force eviction, tight token
budgets; requests share prefixes, take external (connector) hits, decode with speculative drafts, and get
preempted or aborted. Generation is seeded and deterministic.
"""

from __future__ import annotations

import random

from harness.scenario import Scenario, parse_scenario
from harness.trace import largest_admissible, largest_request


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def random_geometry(rng: random.Random, *, checkpoints: bool) -> dict:
    mamba = rng.choice([4, 8, 8, 16])
    attn = rng.choice([d for d in _divisors(mamba) if d >= 2] or [mamba])
    hash_bs = rng.choice(_divisors(attn)) if rng.random() < 0.7 else attn
    k = rng.choice([0, 0, 1, 2])
    return {
        "hash_block_size": hash_bs, "attn_block_size": attn, "mamba_block_size": mamba,
        "num_blocks": rng.choice([24, 32, 48, 64, 128, 256]),
        "max_model_len": 256,
        "num_speculative_tokens": k,
        "prefill_checkpoint": checkpoints and rng.random() < 0.3,
        "eagle_block_drop": k > 0 and rng.random() < 0.2,
        "token_budget": rng.choice([mamba, 2 * mamba, 3 * mamba + 1, 64, 2048]),
    }


def without_prefix_caching(doc: dict) -> dict:
    """A scenario document in Mamba cache mode "none" (prefix caching off): the prefix-caching features go
    (prefill checkpoints, EAGLE's block drop, external hits through the connector)."""
    doc["geometry"].update(mamba_cache_mode="none", prefill_checkpoint=False, eagle_block_drop=False)
    for req in doc["requests"]:
        req.pop("external", None)
    return doc


def without_drafts(doc: dict) -> dict:
    """The scenario document without speculative decoding: no drafts, no EAGLE block drop, no acceptance patterns."""
    doc["geometry"].update(num_speculative_tokens=0, eagle_block_drop=False)
    for req in doc["requests"]:
        req.pop("acceptance", None)
    return doc


def with_model(doc: dict, model: tuple[str | dict, tuple[int, ...], int], drop_drafts: bool = False) -> dict:
    """The scenario document on a real model's geometry (`model`: name, the block vLLM sets for it per K, its
    number of KV cache groups), moved by `rescaled`; the pool grows with the groups (each holds its own blocks).
    Unchanged where no block is known for its K, unless `drop_drafts` (`--model-config`: every generated scenario
    on that model): then its drafts go, for a model the engine tier follows without drafts only (Mamba1; ShortConv
    before 0.33)."""
    name, blocks, num_groups = model
    g = doc["geometry"]
    k = g.get("num_speculative_tokens", 0)
    if drop_drafts and blocks and k >= len(blocks):
        without_drafts(doc)
        k = 0
    if k >= len(blocks) or blocks[k] % g["mamba_block_size"]:
        return doc
    rescaled(doc, blocks[k])
    g.update(model=name, num_blocks=-(-g["num_blocks"] * num_groups // 2))
    return doc


def with_hidden_states(doc: dict, pick: tuple) -> dict:
    """The scenario document under vLLM's speculative method extract_hidden_states (`pick`: a model as
    `with_model` takes it, the aux hidden-state layers, the hash block vLLM resolves for the pair and the hidden-state
    group's block: harness.engine.model_catalog.hidden_entry): one draft (the acceptance patterns clipped to it,
    [1, 0] where there were none), no EAGLE block drop, align mode, on the model's geometry, the pool grown by the
    hidden-state group's blocks. Unchanged where the model has no block for one draft that is a multiple of the
    scenario's."""
    model, layers, hash_block, hidden_block = pick
    g = doc["geometry"]
    pool = g["num_blocks"]
    g.update(num_speculative_tokens=1, eagle_block_drop=False, mamba_cache_mode="align")
    for req in doc["requests"]:
        req["acceptance"] = [min(a, 1) for a in req.get("acceptance") or [1, 0]]
    with_model(doc, model)
    if g.get("model") is not None:
        g.update(hidden_state_layers=layers, hash_block_size=hash_block,
                 num_blocks=g["num_blocks"] + -(-pool * g["mamba_block_size"] // hidden_block))
    return doc


ALL_MODE_BLOCK = 256  # mode all: the Mamba block is a multiple of the Mamba2 chunk (harness.engine.config)


def with_all_mode(doc: dict) -> dict:
    """The scenario document in Mamba cache mode "all" (0.26-0.32), as vLLM configures it: the block a multiple of
    the Mamba2 chunk (the scenario moved by `rescaled`), one hash unit per block, speculative decoding as drawn
    (EAGLE's block drop is align mode's), no prefill checkpoints (align mode's), the Mamba group holding a block
    per block of tokens (the pool doubled)."""
    g = doc["geometry"]
    g.update(hash_block_size=g["mamba_block_size"], eagle_block_drop=False, prefill_checkpoint=False,
             mamba_cache_mode="all")
    rescaled(doc, ALL_MODE_BLOCK)
    g["num_blocks"] *= 2
    return doc


def rescaled(doc: dict, block: int) -> dict:
    """The scenario document on a larger block (a multiple of its Mamba block): every token count is moved by hash
    units, `x = q*hash + r -> q*hash' + r` with the blocks scaled by `block / mamba_block_size`, so each count
    keeps its place against hash and block boundaries (one token before a boundary stays one token before it).
    Output lengths and steps do not change."""
    g = doc["geometry"]
    f = block // g["mamba_block_size"]
    h = g["hash_block_size"]

    def scale(x: int) -> int:
        return x // h * h * f + x % h

    g.update(hash_block_size=h * f, attn_block_size=block, mamba_block_size=block,
             max_model_len=g["max_model_len"] * f, token_budget=min(scale(g["token_budget"]), 16384))
    for req in doc["requests"]:
        req["prompt"]["length"] = scale(req["prompt"]["length"])
        if req["prompt"].get("share"):
            req["prompt"]["share"]["tokens"] = scale(req["prompt"]["share"]["tokens"])
        if req.get("external"):
            req["external"]["tokens"] = scale(req["external"]["tokens"])
    return doc


def with_retention(doc: dict, draw: random.Random) -> dict:
    """The scenario document under a prefix-cache retention drawn by `draw` (align mode): dense a third of the
    time, vLLM 0.33.0's default 0 (replay boundaries and shared-prefix junctions only) a third, else one state
    per 2-4 scheduler blocks besides (CacheConfig.prefix_cache_retention_interval must be a multiple of the
    scheduler block, kv_cache_coordinator.py:57-62)."""
    g = doc["geometry"]
    if g.get("mamba_cache_mode", "align") != "align":
        return doc
    pick = draw.random()
    if pick >= 1 / 3:
        block = max(g["attn_block_size"], g["mamba_block_size"])  # align mode: one block (harness.scenario)
        g["prefix_cache_retention_interval"] = 0 if pick < 2 / 3 else draw.randint(2, 4) * block
    return doc


def with_scheduler_knobs(doc: dict, draw: random.Random) -> dict:
    """The scenario document with 0.34's scheduler knobs and prefix-cache hit limits drawn by `draw` (engine tier):
    parked connector loads under a cap (max_num_inflight_kv_loads, 1-4) a third of the time, with an async load
    aborted around its start half of those (its transfer running 2-4 steps on, another load now and then asking to
    start while it does), cache-aware admission (a window of 2-8, engaged from an empty or a
    half-full cache) a quarter, and a hit limit on one request in six (0: skip reading the cache; else prompt
    logprobs from a token inside the prompt)."""
    g = doc["geometry"]
    if draw.random() < 1 / 3:
        g["max_num_inflight_kv_loads"] = draw.choice([1, 1, 2, 4])
        # a parked or started load aborted in flight, half the time (`_aborted_kv_loads`, counted by the cap)
        loading = [r for r in doc["requests"] if (r.get("external") or {}).get("async")]
        if loading and draw.random() < 0.5:
            r = draw.choice(loading)
            at = r["arrival_step"] + draw.choice([0, 1, 1, 2])
            doc["events"].append({"step": at, "kind": "abort", "request": r["id"]})
            # its transfer outlives the abort (the cap still counts it), and another async load asks to start then
            r["external"]["load_steps"] = max(r["external"].get("load_steps", 1), draw.choice([2, 3, 4]))
            others = [q for q in doc["requests"] if q is not r and q["prompt"].get("length", 0) > 1]
            if others and at > r["arrival_step"]:  # aborted once its load started
                q = draw.choice(others)
                q["arrival_step"] = at + draw.choice([0, 1])
                if not (q.get("external") or {}).get("async"):
                    q["external"] = {"tokens": max(1, q["prompt"]["length"] // 2), "async": True, "load_steps": 1}
    if draw.random() < 1 / 4:
        g["cache_aware_admission_window"] = draw.choice([2, 4, 8])
        g["cache_aware_admission_threshold"] = draw.choice([0.0, 0.0, 0.0, 0.5])
    for req in doc["requests"]:
        if draw.random() < 1 / 6:
            n = req["prompt"]["length"]
            req["prefix_cache_hit_limit"] = 0 if draw.random() < 0.25 else draw.randint(1, max(1, n - 1))
    return doc


def with_drafter(doc: dict, draw: random.Random) -> dict:
    """The EAGLE-family drafter of an EAGLE scenario drawn by `draw` (engine tier): MTP with as many modules as
    drafts or one more (multi-module MTP, the releases with its prefill reserve) half the time, single-module MTP
    a sixth; the connector asking for lookahead block hashes (0.34+, vLLM's default without a connector) a
    third."""
    from harness.release import vllm_release

    g = doc["geometry"]
    if not g.get("eagle_block_drop"):
        return doc
    k, release = g["num_speculative_tokens"], vllm_release()
    pick = draw.random()
    if k >= 2 and release.mtp_reserve and pick < 1 / 2:
        g["mtp_modules"] = draw.choice([k, k + 1])
    elif pick >= 5 / 6:
        g["mtp_modules"] = 1
    if release.lookahead_hashes and draw.random() < 1 / 3:
        g["lookahead_hashes"] = True
    return doc


def with_late_pressure(doc: dict, draw: random.Random) -> dict:
    """One scenario in five (harness geometry, align mode) gets two requests that arrive after the others and
    together fill most of the pool, so the earlier requests' cached blocks are evicted and their keys removed
    (the pool's key rule, cache-key-outlives-block): short scenarios otherwise rarely evict a cached block."""
    g = doc["geometry"]
    if draw.random() >= 0.2 or g.get("model") is not None or g.get("mamba_cache_mode", "align") != "align":
        return doc
    block, k = g["mamba_block_size"], g["num_speculative_tokens"]
    each = min(g["max_model_len"] - 2, largest_request(g["num_blocks"], block, k) - 8) * 3 // 5
    if each < 2:
        return doc
    after = max(r["arrival_step"] for r in doc["requests"]) + draw.choice([12, 20, 30])
    for rid in ("y", "z"):
        doc["requests"].append({"id": rid, "prompt": {"length": each, "seed": draw.randrange(1 << 16)},
                                "arrival_step": after, "max_tokens": 1})
    return doc


class _PoolFilling:
    """Now and then one prompt near the pool's capacity (admission and eviction at the pool's edge, where an
    allocator that over-reserves stalls), from a stream of its own: a scenario's other draws stay what they were.
    Half of them may pass the most the request could ever hold, up to the fewest blocks it needs, where only the
    liveness witness judges a stall (a fix or patch that counts a block too many); half of those at the edge itself:
    the pool shrunk to the request (where max_model_len, not the pool, bounded it) plus 0-2 blocks (what stock
    counts beyond the fewest it needs), so that stock fills it exactly, and half of those with a connector hit in
    the prompt's last Mamba block (admission counts its blocks: sync-external-admission-undercount's class)."""

    def __init__(self, seed: int, small: bool) -> None:
        self.draw = random.Random(f"{seed}:pool-filling")
        self.at = self.draw.randrange(4) if not small and self.draw.random() < 0.2 else -1
        self.past_holding = self.draw.random() < 0.5
        self.at_edge = False

    def length(self, i: int, length: int, geo: dict) -> int:
        """Request i's prompt length (shrinking the pool at the edge)."""
        if i != self.at:
            return length
        largest = (largest_admissible(geo["num_blocks"], geo["attn_block_size"]) if self.past_holding
                   else largest_request(geo["num_blocks"], geo["mamba_block_size"], geo["num_speculative_tokens"]))
        cap = min(geo["max_model_len"], largest) - 8  # room for max_tokens
        self.at_edge = self.past_holding and self.draw.random() < 0.5
        length = max(length, cap if self.at_edge else self.draw.randint(max(2, cap // 2), cap))
        if self.at_edge:
            fewest = -(-(length + 8) // geo["attn_block_size"]) + 2
            geo["num_blocks"] = min(geo["num_blocks"], fewest + self.draw.choice([0, 1, 2]))
        return length

    def external(self, i: int, length: int, mamba: int) -> dict | None:
        """Request i's connector hit at the edge, or None."""
        if i != self.at or not self.at_edge or length <= 2 or self.draw.random() >= 0.5:
            return None
        hit = self.draw.randint(max(1, length - mamba), length - 1)
        return {"tokens": hit, "async": self.draw.random() < 0.5, "load_steps": 1}


def random_scenario(seed: int, *, checkpoints: bool = True, small: bool = False,
                    modes: tuple[str, ...] = ("align",), models: tuple = (), model_share: float = 0.2,
                    retention: bool = False, scheduler_knobs: bool = False, late_pressure: bool = False,
                    hidden: tuple = ()) -> Scenario:
    """small: the model tier's scenarios (shorter prompts, at least two outputs so repeats can show). modes: the
    Mamba cache modes to draw from (the engine tier with vLLM's runners: align and none), from a stream of its
    own, so every seed's scenario is otherwise the same. models: real models' geometries to draw from (the
    engine tier: harness.engine.model_catalog.shipped_geometries), `model_share` of the scenarios (one in five by
    default), from a stream of its own. retention: draw a prefix-cache retention (`with_retention`; releases with
    sparse retention), from a stream of its own. scheduler_knobs: draw 0.34's scheduler knobs and hit limits
    (`with_scheduler_knobs`; the engine tier on releases that have them); late_pressure: now and then two late
    requests that evict the cache (`with_late_pressure`); each from a stream of its own. hidden: `with_hidden_states`
    picks, one drawn for every scenario from a stream of its own (`--extract-hidden-states`)."""
    rng = random.Random(seed)
    geo = random_geometry(rng, checkpoints=checkpoints)
    mamba, k = geo["mamba_block_size"], geo["num_speculative_tokens"]
    requests = []
    lengths: dict[str, int] = {}
    sampling = random.Random(f"{seed}:temperature")
    filling = _PoolFilling(seed, small)
    for i in range(rng.choice([1, 2, 2, 3, 4])):
        rid = "abcdefgh"[i]
        length = filling.length(i, rng.randint(2, (3 if small else 5) * mamba), geo)
        prompt: dict = {"length": length, "seed": rng.randrange(1 << 16)}
        if requests and rng.random() < 0.6:
            other = rng.choice(requests)["id"]
            share = min(lengths[other], length)
            # shared prefixes ending on, just before and just after hash/block boundaries
            edge = rng.choice([0, -1, 1, 0])
            share = max(1, min(share, (share // geo["hash_block_size"]) * geo["hash_block_size"] + edge, length))
            prompt["share"] = {"request": other, "tokens": share}
        req: dict = {"id": rid, "prompt": prompt, "arrival_step": rng.choice([0, 0, 1, 2, 3, 5, 8]),
                     "max_tokens": rng.randint(2, 6) if small else rng.randint(1, 8)}
        if length > 1 and rng.random() < 0.4:
            hit = rng.choice([rng.randint(1, length - 1), min(length - 1, max(1, (length // mamba) * mamba)),
                              min(length - 1, max(1, (length // mamba) * mamba - 1))])
            req["external"] = {"tokens": hit, "async": rng.random() < 0.7, "load_steps": rng.choice([1, 1, 2])}
        req["external"] = filling.external(i, length, mamba) or req.get("external")
        if req["external"] is None:
            del req["external"]
        if k:
            req["acceptance"] = [rng.randint(0, k) for _ in range(rng.randint(1, 4))]
        # half the requests greedy (vLLM's greedy sampling and rejection paths), from a stream of its own: the
        # draws above stay what they were for every seed
        req["temperature"] = 0.0 if sampling.random() < 0.5 else 1.0
        lengths[rid] = length
        requests.append(req)
    events = []
    for _ in range(rng.choice([0, 0, 0, 1, 2])):
        events.append({"step": rng.randint(1, 12), "kind": rng.choice(["preempt", "preempt", "abort"]),
                       "request": rng.choice(requests)["id"]})
    doc = {"version": 1, "name": f"random-{seed}", "geometry": geo, "requests": requests, "events": events,
           "max_steps": 400}
    return parse_scenario(_configured(doc, seed, modes, models, model_share, retention, hidden,
                                      late_pressure=late_pressure and not small, scheduler_knobs=scheduler_knobs))


def _configured(doc: dict, seed: int, modes: tuple[str, ...], models: tuple, model_share: float,
                retention: bool, hidden: tuple = (), late_pressure: bool = False,
                scheduler_knobs: bool = False) -> dict:
    """The draws of a generated scenario's configuration, each from a stream of its own so that the others stay
    what they were: the Mamba cache mode, a real model's geometry, the prefix-cache retention; then the late
    requests that evict the cache, 0.34's scheduler knobs and the EAGLE-family drafter (`with_drafter`)."""
    doc = _configured_cache(doc, seed, modes, models, model_share, retention, hidden)
    if late_pressure:
        with_late_pressure(doc, random.Random(f"{seed}:late-pressure"))
    if scheduler_knobs:
        with_scheduler_knobs(doc, random.Random(f"{seed}:scheduler-knobs"))
        with_drafter(doc, random.Random(f"{seed}:drafter"))
    return doc


def _configured_cache(doc: dict, seed: int, modes: tuple[str, ...], models: tuple, model_share: float,
                      retention: bool, hidden: tuple) -> dict:
    if hidden:  # --extract-hidden-states: every scenario, on a model drawn from its own stream, in align mode
        with_hidden_states(doc, random.Random(f"{seed}:hidden-states").choice(hidden))
        return with_retention(doc, random.Random(f"{seed}:retention")) if retention else doc
    mode_draw = random.Random(f"{seed}:cache-mode")
    pinned = "align" not in modes  # --mamba-cache-mode none|all: every scenario
    if "none" in modes and (pinned or mode_draw.random() < 0.25):
        without_prefix_caching(doc)
    elif "all" in modes and (pinned or mode_draw.random() < 0.25):  # a draw of its own: the none draws stay
        return with_all_mode(doc)
    pick = random.Random(f"{seed}:model")
    if models and pick.random() < model_share:
        with_model(doc, pick.choice(models), drop_drafts=model_share >= 1.0)  # 1.0: --model-config
    if retention:
        with_retention(doc, random.Random(f"{seed}:retention"))
    return doc
