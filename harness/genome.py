"""Structure-aware byte encoding of scenarios, for coverage-guided fuzzing.

Every byte string decodes to a valid, bounded scenario: bytes are read as fields (missing bytes read as
0), each field maps a byte onto its range (`lo + b % span`). Because a field's byte *is* its value offset,
a mutator can aim a field at a value (an external hit one token before a Mamba block boundary, a shared
prefix ending on a hash boundary, K drafts all rejected) and encode it back exactly.

Layout: 7 geometry bytes, 1 request-count byte, then 12 bytes per request (1-4 requests), then 3 bytes per event (0-3 events).
An input starting with GENERATOR_MAGIC is instead the sweep generator's scenario for its seed, with a swarm mask.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from harness.errors import BadInput
from harness.generate import with_all_mode, with_hidden_states, with_model, without_drafts, without_prefix_caching
from harness.scenario import Scenario, parse_scenario, scenario_to_json
from harness.trace import largest_request

MAMBA_SIZES = (4, 8, 16)
POOL_SIZES = (12, 16, 24, 32, 48, 64, 128, 256)
GEOMETRY_BYTES = 7
REQUEST_BYTES = 12
EVENT_BYTES = 3
MAX_REQUESTS = 4
MAX_EVENTS = 3
MAX_STEPS = 120
MIN_FULL_INPUT = GEOMETRY_BYTES + 1 + REQUEST_BYTES  # geometry, count, one whole request


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        b = self.data[self.pos] if self.pos < len(self.data) else 0
        self.pos += 1
        return b

    def pick(self, options):
        return options[self.byte() % len(options)]

    def range(self, lo: int, hi: int) -> int:
        """lo..hi inclusive."""
        return lo + self.byte() % (hi - lo + 1)


@dataclass(frozen=True)
class Budget:
    """What the installed release supports; the decoder never emits what it cannot run."""

    checkpoints: bool = False
    small: bool = False  # the model tier: shorter prompts, at least two outputs (repeats can show)
    # the engine tier: only geometries vLLM itself builds in align mode (attention block = Mamba block,
    # platforms/interface.py:1114-1115 in 0.33.0; a hash unit finer than the block only where CacheConfig has
    # prefix_match_unit), so every input is one a user's config reaches
    align: bool = False
    sub_block_hash: bool = True
    load_failures: bool = False  # engine tier: async loads that fail (KVConnectorOutput.failed_recving)
    # Mamba cache modes the tier runs: "none" on the engine tier with vLLM's own runners (the mirror is align-only)
    cache_modes: tuple[str, ...] = ("align",)
    # real models' geometries the engine tier builds (harness/engine/model_catalog.py: the config's name or inline
    # document, vLLM's block per K, the number of KV cache groups)
    models: tuple[tuple[str | dict, tuple[int, ...], int], ...] = ()
    model_always: bool = False  # --model-config: every input on that model
    # sparse prefix-cache retention (0.29.0+): generator inputs draw CacheConfig.prefix_cache_retention_interval
    # (harness.generate.with_retention); byte-genome inputs stay dense, so their decoding is unchanged
    retention: bool = False
    # async scheduling asked of vLLM's V1 runner (EngineOptions.eagle_drafts_only): drafts are EAGLE's (align mode,
    # its block drop), none in the other modes, where the harness drafts n-gram only (`_drafts_for`)
    eagle_drafts: bool = False
    # an align-mode token budget below the block: 0.26.0 refuses it at engine start (vllm_adapter.
    # supports_budget_below_block); there the decoder raises the budget to the block (the same bytes consumed)
    budget_below_block: bool = True
    # generator inputs only (a draws bit of their own, DRAWS_LATER): 0.34's scheduler knobs and prefix-cache hit
    # limits (the engine tier on releases that have them), and late requests that evict the cache (every tier)
    scheduler_knobs: bool = False
    late_pressure: bool = True
    # tier e2e: every input in the form vLLM's whole engine runs (drafts where checked, align mode, no real model)
    e2e: bool = False
    # --extract-hidden-states: every input under it, on one of these (harness.generate.with_hidden_states picks)
    hidden: tuple = ()


def geometry_from(r: _Reader, budget: Budget) -> dict:
    mamba = r.pick(MAMBA_SIZES)
    attn = r.pick([d for d in _divisors(mamba) if d >= 2])
    hash_bs = r.pick(_divisors(attn))
    if budget.align:  # the same bytes consumed, so a symbolic-tier input decodes to its aligned form
        attn = mamba
        if not budget.sub_block_hash:
            hash_bs = mamba
    k = r.range(0, 2)
    blocks = r.pick(POOL_SIZES)
    budget_tokens = r.pick((mamba, 2 * mamba, 3 * mamba + 1, mamba // 2 + 1, 64, 2048))
    flags = r.byte()
    return {
        "hash_block_size": hash_bs, "attn_block_size": attn, "mamba_block_size": mamba,
        "num_blocks": blocks, "max_model_len": 512, "num_speculative_tokens": k,
        "prefill_checkpoint": budget.checkpoints and bool(flags & 1),
        "eagle_block_drop": k > 0 and bool(flags & 2),
        "token_budget": budget_tokens,
        "kv_load_failure_policy": "recompute" if budget.load_failures and flags & 4 else "fail",
        "mamba_cache_mode": _mode_of(budget.cache_modes, flags),
        # flag bits 4-5 both set: a real model's geometry (bits 6-7 pick it); applied by `decode` (with_model)
        "model": (budget.models[(flags >> 6) % len(budget.models)]
                  if budget.models and (budget.model_always or flags & 48 == 48) else None),
    }


def _hidden_picks(models: tuple, layers: int, eagle_drafts: bool) -> tuple:
    """`--extract-hidden-states N`: the models it runs on (harness.engine.model_catalog.hidden_entry); BadInput
    where none does."""
    from harness.engine.model_catalog import hidden_entry
    from harness.vllm_adapter import installed_version

    if eagle_drafts:
        raise BadInput("--extract-hidden-states: its drafts are not EAGLE's (asynchronous scheduling on vLLM's V1 "
                       "runner takes EAGLE drafts only)")
    picks = tuple(p for p in (hidden_entry(m, layers) for m in models) if p is not None)
    if not picks:
        raise BadInput(f"--extract-hidden-states: none of {', '.join(str(m[0]) for m in models)} runs it on vLLM "
                       f"{installed_version()} (a model with aux hidden-state outputs, a block for one draft and a "
                       "hash unit dividing every group's block)")
    return picks


def _mode_of(modes: tuple[str, ...], flags: int) -> str:
    """Flag bit 3: a mode other than align, bit 7 picks it where the release has two (none, all); a budget
    without align (`--mamba-cache-mode none|all`) is that one mode for every input."""
    if "align" not in modes:
        return modes[0]
    others = [m for m in modes if m != "align"]
    return others[(flags >> 7) % len(others)] if others and flags & 8 else "align"


# -- the generator inside the campaign ----------------------------------------------------------------------
# An input that starts with GENERATOR_MAGIC is a generator scenario (harness/generate.py, what `sweep` replays):
# 8 bytes of seed, then a swarm mask. A share of the mutator's outputs are such inputs, so a campaign samples
# at least as broadly as the sweep, and coverage keeps the generator scenarios that reach new behaviour.
GENERATOR_MAGIC = b"GEN\x00"
GENERATOR_INPUT = len(GENERATOR_MAGIC) + 8 + 1
# a byte after the mask: bit 0 set = the sweep's later draws too (the prefix-cache retention); bits 2-7 = how many
# models of DRAW_ORDER (harness/model_configs) the input draws from, the count shipped when it was written; bit 1
# without a count = the five DRAW_ORDER had before the count (lfm2-1.2b the last), neither = the first four. An
# input written before a draw or a model existed (no such byte or bit: read as 0) still decodes to the scenario it
# was kept for
DRAWS_RETENTION, DRAWS_EVERY_MODEL = 1, 2
# a second draws byte after it (absent, as in inputs written before it: 0): bit 0 = the draws added with vLLM 0.34,
# the scheduler knobs and hit limits (Budget.scheduler_knobs) and the late requests that evict the cache
DRAWS_LATER = 1
MODELS_SHIFT = 2
LEGACY_MODELS = (4, 5)  # models drawn by an input with no count: without / with DRAWS_EVERY_MODEL


def generator_draws_byte() -> int:
    """The draws byte a new generator input carries: the retention draw and every model DRAW_ORDER has now."""
    from harness.model_configs import DRAW_ORDER

    return DRAWS_RETENTION | DRAWS_EVERY_MODEL | (len(DRAW_ORDER) << MODELS_SHIFT)


# swarm testing (Groce et al., ISSTA 2012): each generator input switches whole features off, so a rare
# combination is not starved by the common ones; bit set = feature off (mask 0: the sweep's own scenario)
SWARM = ("checkpoints", "connector", "async_load", "spec_decode", "prefix_sharing", "events", "pool_pressure",
         "long_prompts")
SWARM_CHECKPOINTS_OFF = 1  # bit 0; `without_checkpoints` sets it


def generator_input(rng: random.Random, seed: int | None = None, mask: int | None = None) -> bytes:
    """A generator input: a fresh seed (or `seed`), with the swarm off half the time and a random mask else
    (or `mask`: 0 is exactly the sweep's scenario for that seed)."""
    seed = rng.getrandbits(64) if seed is None else seed
    if mask is None:
        mask = 0 if rng.random() < 0.5 else rng.randrange(1, 256)
    return GENERATOR_MAGIC + seed.to_bytes(8, "little") + bytes([mask, generator_draws_byte(), DRAWS_LATER])


def is_generator_input(data: bytes) -> bool:
    return data.startswith(GENERATOR_MAGIC)


def generator_fields(data: bytes) -> tuple[int, int]:
    """A generator input's (seed, swarm mask); missing bytes read as 0, as everywhere in the genome."""
    body = data[len(GENERATOR_MAGIC):].ljust(GENERATOR_INPUT - len(GENERATOR_MAGIC), b"\0")
    return int.from_bytes(body[:8], "little"), body[8]


def generator_draws(data: bytes, draw: int = DRAWS_RETENTION, byte: int = 0) -> bool:
    """Whether a generator input takes one of the sweep's later draws (a bit of the `byte`th draws byte after the
    swarm mask)."""
    return len(data) > GENERATOR_INPUT + byte and bool(data[GENERATOR_INPUT + byte] & draw)


def models_drawn(data: bytes) -> int:
    """How many models of DRAW_ORDER a generator input draws from (the count its draws byte carries)."""
    draws = data[GENERATOR_INPUT] if len(data) > GENERATOR_INPUT else 0
    return draws >> MODELS_SHIFT or LEGACY_MODELS[bool(draws & DRAWS_EVERY_MODEL)]


def _models_of(models: tuple, count: int) -> tuple:
    """The shipped models among the first `count` of DRAW_ORDER (by name: a release that builds fewer keeps the
    order)."""
    from harness.model_configs import DRAW_ORDER

    return tuple(m for m in models if m[0] in DRAW_ORDER[:count])


def budget_scenario(seed: int, budget: Budget, checkpoints: bool) -> Scenario:
    """The sweep's scenario for `seed` within what the release runs (`budget`): what `sweep` replays, and what a
    generator input decodes to before its swarm mask."""
    from harness.generate import random_scenario  # the sweep's generator, unchanged

    scenario = random_scenario(seed, checkpoints=checkpoints, small=budget.small, modes=budget.cache_modes,
                               models=budget.models, model_share=1.0 if budget.model_always else 0.2,
                               retention=budget.retention, scheduler_knobs=budget.scheduler_knobs,
                               late_pressure=budget.late_pressure, hidden=budget.hidden)
    if budget.eagle_drafts or not budget.budget_below_block:
        scenario = parse_scenario(_within_release(_drafts_for(scenario_to_json(scenario), budget), budget))
    if budget.e2e:
        from harness.e2e.geometry import expressible

        return expressible(scenario)
    return scenario


def _within_release(doc: dict, budget: Budget) -> dict:
    """The scenario document with what the release refuses at engine start made what it accepts: an align-mode
    token budget below the block becomes the block (0.26.0)."""
    g = doc["geometry"]
    if not budget.budget_below_block and g.get("mamba_cache_mode", "align") == "align":
        g["token_budget"] = max(g["token_budget"], math.lcm(g["attn_block_size"], g["mamba_block_size"]))
    return doc


def _decode_generated(data: bytes, budget: Budget) -> Scenario:
    seed, mask = generator_fields(data)
    off = {name for bit, name in enumerate(SWARM) if mask >> bit & 1}
    budget = budget if generator_draws(data) else replace(budget, retention=False)
    if not generator_draws(data, DRAWS_LATER, byte=1):
        budget = replace(budget, scheduler_knobs=False, late_pressure=False)
    if not budget.model_always:
        budget = replace(budget, models=_models_of(budget.models, models_drawn(data)))
    scenario = budget_scenario(seed, budget, checkpoints=budget.checkpoints and "checkpoints" not in off)
    doc = scenario_to_json(scenario)
    geo = doc["geometry"]
    if budget.align and not budget.sub_block_hash and not budget.hidden:  # (extract_hidden_states: vLLM's own)
        geo["hash_block_size"] = geo["mamba_block_size"]
    if "spec_decode" in off and not budget.hidden:  # extract_hidden_states always drafts one token
        without_drafts(doc)
    if "pool_pressure" in off:  # a pool that never evicts nor preempts (the hidden-state group's blocks besides)
        geo["num_blocks"] = max(256, geo["num_blocks"]) if budget.hidden else 256
    if "events" in off:
        doc["events"] = []
    rng = random.Random(seed ^ mask)
    for req in doc["requests"]:
        if "connector" in off:
            req.pop("external", None)
        elif "async_load" in off and req.get("external"):
            req["external"]["async"] = False
        if "prefix_sharing" in off:
            req["prompt"].pop("share", None)
        if "long_prompts" in off:  # prompts within one Mamba block: the same-block and sub-block paths
            req["prompt"]["length"] = min(req["prompt"]["length"], rng.randint(2, geo["mamba_block_size"]))
            share = req["prompt"].get("share")
            if share:
                share["tokens"] = min(share["tokens"], req["prompt"]["length"])
            ext = req.get("external")
            if ext and ext["tokens"] >= req["prompt"]["length"]:
                req.pop("external")
    for req in doc["requests"]:  # a shared prefix is no longer than the prompt it comes from
        share = req["prompt"].get("share")
        if share:
            other = next(r for r in doc["requests"] if r["id"] == share["request"])
            share["tokens"] = max(1, min(share["tokens"], other["prompt"]["length"], req["prompt"]["length"]))
    doc["name"] = f"generator-{seed}-swarm-{mask}"
    return parse_scenario(_within_release(doc, budget))


def _drafts_for(doc: dict, budget: Budget) -> dict:
    """The scenario document with drafts vLLM schedules under the budget: with `eagle_drafts`, n-gram drafts
    become EAGLE drafts in align mode and go in the other modes (the same bytes consumed)."""
    g = doc["geometry"]
    if not budget.eagle_drafts or not g.get("num_speculative_tokens") or g.get("eagle_block_drop"):
        return doc
    if g.get("mamba_cache_mode", "align") == "align":
        g["eagle_block_drop"] = True
        return doc
    return without_drafts(doc)


def decode(data: bytes, budget: Budget = Budget()) -> Scenario:
    """Bytes -> a valid scenario (total: never raises on any input); on tier e2e its form the whole engine runs
    (harness.e2e.geometry.expressible: the same bytes, what it cannot run dropped)."""
    scenario = _decode(data, budget)
    if budget.e2e:
        from harness.e2e.geometry import expressible

        return expressible(scenario)
    return scenario


def _decode(data: bytes, budget: Budget) -> Scenario:
    if is_generator_input(data):
        return _decode_generated(data, budget)
    r = _Reader(data)
    geo = geometry_from(r, budget)
    k, mamba = geo["num_speculative_tokens"], geo["mamba_block_size"]
    max_len = min(48, 3 * mamba) if budget.small else min(96, 6 * mamba)
    nreq = r.range(1, MAX_REQUESTS - 1 if budget.small else MAX_REQUESTS)
    # a request the pool could never hold is one vLLM never admits (harness.scenario refuses it): the longest
    # prompt that leaves room for the longest output
    fits = largest_request(geo["num_blocks"], mamba, k) - 6
    requests, lengths = [], []
    for i in range(nreq):
        rid = "abcd"[i]
        length = min(r.range(2, max_len), fits)
        arrival = r.range(0, 7)
        share_from = r.range(0, i)  # 0: none; j: request j-1
        share_len = r.range(1, 255)
        ext = r.range(0, 255)
        ext_mode = r.byte()
        max_tokens = r.range(2 if budget.small else 1, 6)
        accept = [r.range(0, k) for _ in range(4)]
        greedy = r.byte() & 1  # vLLM's greedy sampling paths (engine tier, V2 runner); keeps requests 12 bytes wide
        prompt: dict = {"length": length, "seed": i + 1}
        if share_from:
            other = share_from - 1
            prompt["share"] = {"request": "abcd"[other], "tokens": 1 + (share_len - 1) % min(length, lengths[other])}
        req: dict = {"id": rid, "prompt": prompt, "arrival_step": arrival, "max_tokens": max_tokens,
                     "temperature": 0.0 if greedy else 1.0}
        if ext and length > 1:
            req["external"] = {"tokens": 1 + (ext - 1) % (length - 1), "async": not ext_mode & 1,
                               "load_steps": 1 + (ext_mode >> 1) % 2,
                               "load_fails": budget.load_failures and not ext_mode & 1 and ext_mode & 12 == 12}
        if k:
            req["acceptance"] = accept
        requests.append(req)
        lengths.append(length)
    events = []
    for _ in range(r.range(0, MAX_EVENTS)):
        step, kind, who = r.range(1, 15), r.byte(), r.range(0, nreq - 1)
        events.append({"step": step, "kind": "abort" if kind % 4 == 3 else "preempt", "request": "abcd"[who]})
    model = geo.pop("model")
    doc = {"version": 1, "name": "fuzz", "geometry": geo, "requests": requests, "events": events,
           "max_steps": MAX_STEPS}
    if geo["mamba_cache_mode"] == "all":  # (a model's geometry is not followed in mode all)
        return parse_scenario(_drafts_for(with_all_mode(doc), budget))
    if budget.hidden:  # the model the flags picked where it is one of them
        picks = [p for p in budget.hidden if p[0] == model] or budget.hidden
        with_hidden_states(doc, picks[0])
    elif model is not None:
        with_model(doc, model, drop_drafts=budget.model_always)
    # the same bytes, mode none's features dropped (the bytes that chose them are still consumed)
    return parse_scenario(_within_release(_drafts_for(
        without_prefix_caching(doc) if geo["mamba_cache_mode"] == "none" else doc, budget), budget))


# -- structure-aware mutation ------------------------------------------------------------------------------
def _request_offset(i: int) -> int:
    return GEOMETRY_BYTES + 1 + i * REQUEST_BYTES


def _boundary_values(scenario: Scenario, rng: random.Random) -> int:
    """A token count on, just before or just after a hash or Mamba block boundary."""
    g = scenario.geometry
    unit = rng.choice((g.hash_block_size, g.mamba_block_size, g.attn_block_size))
    return max(1, rng.randint(1, 6) * unit + rng.choice((-1, 0, 0, 1)))


def mutate(data: bytes, rng: random.Random, budget: Budget = Budget()) -> bytes:
    """One structure-aware edit: aim a field at a boundary, add/drop a request, add an event, flip K."""
    scenario = decode(data, budget)
    nreq = len(scenario.requests)
    # missing bytes decode as 0: materialize them so every field of the decoded scenario can be edited
    buf = bytearray(data.ljust(_request_offset(nreq) + 1 + MAX_EVENTS * EVENT_BYTES, b"\0"))
    i = rng.randrange(nreq)
    base = _request_offset(i)
    choice = rng.randrange(9)
    if choice == 0:  # external hit landing on / next to a boundary
        buf[base + 4] = min(255, 1 + (_boundary_values(scenario, rng) - 1))
    elif choice == 1:  # prompt length on / next to a boundary
        buf[base] = max(0, min(255, _boundary_values(scenario, rng) - 2))
    elif choice == 2 and i > 0:  # share a prefix with an earlier request, ending near a boundary
        buf[base + 2] = rng.randint(1, i)
        buf[base + 3] = max(0, min(255, _boundary_values(scenario, rng) - 1))
    elif choice == 3:  # another request (more producers/consumers of cached prefixes)
        buf[GEOMETRY_BYTES] = min(MAX_REQUESTS - 1, (buf[GEOMETRY_BYTES] % MAX_REQUESTS) + 1)
        need = _request_offset(len(scenario.requests) + 1)
        if len(buf) < need:
            buf.extend(rng.randbytes(need - len(buf)))
    elif choice == 4:  # speculative tokens and acceptance patterns (all rejected, all accepted, mixed)
        buf[3] = rng.randrange(3)
        for j in range(4):
            buf[base + 7 + j] = rng.choice((0, 0, 1, 2))
    elif choice == 5:  # small pools force eviction and preemption
        buf[4] = rng.randrange(3)
    elif choice == 6:  # sync vs async load and its length
        buf[base + 5] = rng.randrange(4)
    elif choice == 7:  # an event
        end = _request_offset(nreq)
        buf[end:end + 1] = bytes([rng.randint(1, MAX_EVENTS)])
        need = end + 1 + MAX_EVENTS * EVENT_BYTES
        if len(buf) < need:
            buf.extend(rng.randbytes(need - len(buf)))
        e = rng.randrange(MAX_EVENTS)
        buf[end + 1 + e * EVENT_BYTES] = rng.randrange(15)
        buf[end + 2 + e * EVENT_BYTES] = rng.randrange(4)
    else:  # arrival order
        buf[base + 1] = rng.randrange(8)
    return bytes(buf)


def random_bytes(rng: random.Random) -> bytes:
    """A random input of the full layout (random sampling baseline uses the same decoder)."""
    return rng.randbytes(_request_offset(MAX_REQUESTS) + 1 + MAX_EVENTS * EVENT_BYTES)


FLAGS_BYTE = GEOMETRY_BYTES - 1  # bit 0: prefill checkpoint blocks, bit 1: EAGLE block drop


def without_checkpoints(data: bytes) -> bytes:
    """The same input with the prefill-checkpoint bit cleared. `fuzz --checkpoints off` applies it in the
    mutator, never in the decoder: how bytes decode depends on the bytes and the installed release only, so a
    crash file alone reproduces its finding."""
    if is_generator_input(data):
        at = GENERATOR_INPUT - 1
        if len(data) > at and data[at] & SWARM_CHECKPOINTS_OFF:
            return data
        buf = bytearray(data.ljust(GENERATOR_INPUT, b"\0"))
        buf[at] |= SWARM_CHECKPOINTS_OFF
        return bytes(buf)
    if len(data) <= FLAGS_BYTE or not data[FLAGS_BYTE] & 1:
        return data
    buf = bytearray(data)
    buf[FLAGS_BYTE] &= 0xFE
    return bytes(buf)


def _pinned_mode(mode: str, modes: tuple[str, ...], small: bool) -> str:
    """`--mamba-cache-mode`: the mode, where this release and configuration run it."""
    if mode in modes:
        return mode
    from harness.engine.config import has_cache_mode_all
    from harness.vllm_adapter import installed_version

    if mode == "all" and not has_cache_mode_all():
        raise BadInput(f"--mamba-cache-mode all: vLLM {installed_version()}'s CacheConfig has no mode all "
                       "(MambaCacheMode; releases before 0.32 have it)")
    raise BadInput(f"--mamba-cache-mode {mode}: not run {'with the model forward' if small else 'here'} "
                   f"(this configuration runs {', '.join(modes)})")


def _has_scheduler_knobs() -> bool:
    """Every 0.34 scheduler knob and the prefix-cache hit limit (harness/release.py)."""
    from harness.release import vllm_release
    from harness.scenario import SCHEDULER_KNOBS

    release = vllm_release()
    return release.hit_limit and set(SCHEDULER_KNOBS) <= release.scheduler_knobs


def run_budget(config) -> Budget:
    """The budget a run configuration (harness.run_config.RunConfig) decodes inputs with."""
    return release_budget(small=config.runs_model or config.tier == "e2e", tier=config.tier, runner=config.engine.runner,
                          model_config=config.model_config, eagle_drafts=config.engine.eagle_drafts_only,
                          cache_mode=config.cache_mode, hidden_states=config.hidden_states)


def release_budget(small: bool = False, tier: str = "symbolic", runner: str = "mirror",
                   model_config: str | None = None, eagle_drafts: bool = False,
                   cache_mode: str | None = None, hidden_states: int | None = None) -> Budget:
    """What the installed release can run for a tier and engine runner (with the bytes, all that decoding
    depends on): Mamba cache mode "none" on the engine tier with vLLM's own runners; real models' geometries on
    the engine tier (the shipped ones now and then, or `model_config` always). `cache_mode`: every input in
    that mode (BadInput where the release or the configuration does not run it)."""
    from harness.vllm_adapter import (
        supports_budget_below_block,
        supports_failed_recving,
        supports_prefill_checkpoints,
        supports_prefix_match_unit,
        supports_retention,
    )

    if tier == "e2e":  # vLLM's whole engine: align mode, its own chunking, the harness's tiny models
        return Budget(small=small, align=True, sub_block_hash=supports_prefix_match_unit(), e2e=True,
                      budget_below_block=supports_budget_below_block(), load_failures=supports_failed_recving())
    if tier == "engine":
        from harness.engine.config import has_cache_mode_all
        from harness.engine.model_catalog import model_entry, shipped_geometries

        models = (model_entry(model_config),) if model_config else () if small else shipped_geometries()
        # modes: none with vLLM's runners; all (0.26-0.32) with its V1 runner, the only one that runs it
        modes = ("align",) if runner == "mirror" else ("align", "none")
        if runner in ("v1", "auto") and has_cache_mode_all() and not small and not model_config:
            modes += ("all",)
        if cache_mode is not None:
            modes = (_pinned_mode(cache_mode, modes, small),)
        hidden = _hidden_picks(models, hidden_states, eagle_drafts) if hidden_states else ()
        if hidden:
            modes = ("align",)
        return Budget(checkpoints=supports_prefill_checkpoints(), small=small, align=True,
                      sub_block_hash=supports_prefix_match_unit(), load_failures=supports_failed_recving(),
                      cache_modes=modes, models=models, model_always=bool(model_config),
                      retention=supports_retention(), eagle_drafts=eagle_drafts,
                      budget_below_block=supports_budget_below_block(),
                      scheduler_knobs=_has_scheduler_knobs(), hidden=hidden)
    return Budget(checkpoints=supports_prefill_checkpoints(), small=small, retention=supports_retention(),
                  budget_below_block=supports_budget_below_block())
