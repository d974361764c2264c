"""A scenario on the CPU engine's grid: every token count scaled by one factor so the block is one vLLM's CPU
attention accepts, each request keeping its place against the block and the prefix-match unit.

vLLM's CPU attention takes blocks that are a multiple of its kernel block (16 on 0.26-0.27, 32 from 0.28:
`CPUAttentionBackend.get_supported_kernel_block_sizes`, v1/attention/backends/cpu_attn.py), while the symbolic
tiers' scenarios use blocks of 2-16 tokens. Scaling by `s` keeps every prompt length, shared prefix, external hit,
explicit chunk, token budget and model length at the same place in units of the block (`s * n` for `n`), so the
allocator takes the same branches: the seed bug's 15-token request with a 10-token hit in 8-token blocks becomes
60 tokens with a 40-token hit in 32-token blocks. Decode tokens are not scaled (a step decodes one token); a
scenario that needs the exact decode position against the block is what the symbolic tiers judge. Drafts
(`num_speculative_tokens`, the acceptance pattern) are not scaled either: each step verifies K drafts.

What the engine cannot run is not expressible, exit 2 naming the field (`not_expressible`), never silently dropped.
Pure but for two questions asked of the installed release when a scenario needs them (drafts, failed loads); the
kernel block comes in as an argument."""

from __future__ import annotations

import math

from harness.errors import BadInput
from harness.scenario import Scenario

# the tiny models' vocabulary (harness/e2e/models.py): scenario token ids fold into [FIRST_TOKEN, VOCAB)
VOCAB = 1024
FIRST_TOKEN = 2  # 0 and 1 are the tiny models' bos/eos: prompts never hold them


def scale_factor(block: int, kernel_block: int) -> int:
    """The smallest s with `block * s` a multiple of the CPU attention's kernel block."""
    return kernel_block // math.gcd(block, kernel_block)


def not_expressible(scenario: Scenario) -> str | None:
    """Why the whole engine with a real forward cannot run this scenario (the field), else None."""
    g = scenario.geometry
    if g.num_speculative_tokens:
        why = _drafts_reason()
        if why:
            return why
    if g.model is not None:
        return "geometry.model: a real model's geometry runs on the engine tier; e2e runs the tiny local models"
    if g.mamba_cache_mode != "align":
        return f"geometry.mamba_cache_mode {g.mamba_cache_mode!r}: tier e2e runs align mode"
    if g.prefill_checkpoint:
        return ("geometry.prefill_checkpoint: the mirrored tiers' model of checkpoint blocks; on tier e2e vLLM's "
                "own Mamba layer declares them")
    if g.eagle_block_drop or g.hidden_state_layers:
        name = next(n for n in ("eagle_block_drop", "hidden_state_layers") if getattr(g, n))
        return f"geometry.{name}: a drafter feature; tier e2e runs no drafter"
    for r in scenario.requests:
        if r.external is not None and r.external.load_fails and not _failed_loads_reported():
            return (f"requests[{r.id}].external.load_fails: this vLLM's connector API reports no failed load by "
                    "request (KVConnectorOutput.failed_recving, 0.30+)")
        if r.prefix_cache_hit_limit is not None:
            return f"requests[{r.id}].prefix_cache_hit_limit: tier e2e reads prompt logprobs of its own"
    return None


def _failed_loads_reported() -> bool:
    from harness.vllm_adapter import supports_failed_recving  # imports vLLM's outputs module (only when asked)

    return supports_failed_recving()


def _drafts_reason() -> str | None:
    from harness.release import e2e_drafts_reason  # reads the installed release's metadata, imports no vLLM

    return e2e_drafts_reason()


def expressible(scenario: Scenario) -> Scenario:
    """The scenario with what tier e2e cannot run dropped (a fuzz input's e2e form; harness.genome.decode): drafts
    only where this release runs them (else K 0, no acceptance), no checkpoint or EAGLE geometry, no real model,
    align mode, failed loads only where vLLM's connector API reports them, no hit limits."""
    doc = scenario.model_dump(by_alias=True, exclude_none=True)
    g = doc["geometry"]
    g.update(prefill_checkpoint=False, eagle_block_drop=False, mamba_cache_mode="align", hidden_state_layers=0)
    drafts = bool(g.get("num_speculative_tokens")) and _drafts_reason() is None
    if not drafts:
        g["num_speculative_tokens"] = 0
    g.pop("model", None)
    for r in doc["requests"]:
        if not drafts:
            r.pop("acceptance", None)
        r.pop("prefix_cache_hit_limit", None)
        if "external" in r and not _failed_loads_reported():
            r["external"]["load_fails"] = False
    return Scenario.model_validate(doc)


def scaled(scenario: Scenario, kernel_block: int) -> tuple[Scenario, int]:
    """The scenario on the engine's grid and the factor used (token ids fold into the tiny vocabulary when the
    engine runs them: `fold`)."""
    why = not_expressible(scenario)
    if why:
        raise BadInput(f"tier e2e cannot express this scenario: {why}")
    g = scenario.geometry
    s = scale_factor(g.mamba_block_size, kernel_block)
    doc = scenario.model_dump(by_alias=True, exclude_none=True)
    geo = doc["geometry"]
    for name in ("hash_block_size", "attn_block_size", "mamba_block_size", "token_budget"):
        geo[name] = getattr(g, name) * s
    if g.prefix_cache_retention_interval:  # tokens, a multiple of the block: scaled with it (0: sparse, kept)
        geo["prefix_cache_retention_interval"] = g.prefix_cache_retention_interval * s
    # the longest request, not the scaled cap: vLLM refuses a model length one request could not fit in the pool
    # (the scenario's own check: every request fits), and the cap changes no scheduling decision below it
    geo["max_model_len"] = max(r.prompt.num_tokens * s + r.max_tokens for r in scenario.requests)
    for req, spec in zip(doc["requests"], scenario.requests):
        p = req["prompt"]
        if spec.prompt.tokens is not None:  # explicit tokens: each s times, so shared prefixes stay shared
            p["tokens"] = [t for t in spec.prompt.tokens for _ in range(s)]
        else:  # generated: s times as long from the same seed, sharing s times as much
            p["length"] = spec.prompt.length * s
            if spec.prompt.share is not None:
                p["share"]["tokens"] = spec.prompt.share.tokens * s
        if spec.external is not None:
            req["external"]["tokens"] = spec.external.tokens * s
        if spec.chunks:
            req["chunks"] = [c * s for c in spec.chunks]
    return Scenario.model_validate(doc), s


def fold(token: int) -> int:
    return FIRST_TOKEN + token % (VOCAB - FIRST_TOKEN)


__all__ = ["VOCAB", "expressible", "fold", "not_expressible", "scale_factor", "scaled"]
