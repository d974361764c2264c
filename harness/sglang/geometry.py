"""A scenario's geometry as SGLang's configuration, and the scenario fields this wing cannot express (BadInput).

| scenario field          | SGLang setting                                                                  |
|-------------------------|---------------------------------------------------------------------------------|
| mamba_cache_mode align  | the radix cache with the run's mamba_radix_cache_strategy (`--strategy`):       |
|                         | extra_buffer: page_size = attn_block_size; no_buffer: page_size 1 (SGLang's rule:|
|                         | srt/arg_groups/mamba_hook.py:157)                                               |
| mamba_block_size        | mamba_track_interval and the Mamba cache chunk (`_mamba_cache_chunk_size`)      |
| token_budget            | chunked_prefill_size (PrefillAdder's chunk budget); a multiple of the page, as   |
|                         | SGLang's server-argument validation requires                                    |
| num_blocks              | the KV pool: (num_blocks - 1) x attn_block_size tokens (the blocks vLLM's pool  |
|                         | holds beside its null block), whole pages; eviction and retraction under it are |
|                         | SGLang's. The Mamba slots and request rows stay generous (every request's own)  |
| max_model_len           | not mapped: max_context_len = the longest request + 2 pages (at least 256)      |
| prefill_checkpoint      | not mapped: SGLang always stashes a chunked prefix (checkpoint_kv_cache)        |
| temperature             | not mapped: greedy; tokens are the harness's token rule                         |
| num_speculative_tokens  | 2 only: NGRAM speculative decoding with speculative_num_draft_tokens D = 3 (the |
|                         | fixture's HybridReqToTokenPool holds 3 intermediate steps: fixtures.py:172),    |
|                         | topk 1, num_steps 2; the scheduler side is SGLang's, the NGRAM worker a stand-in|
|                         | (harness/sglang/spec.py). extra_buffer needs mamba_block_size >= D (SGLang's    |
|                         | rule: srt/arg_groups/mamba_hook.py:132-133)                                     |
| acceptance              | a request's drafts per verify (cycled by SGLang's own req.spec_verify_ct): the  |
|                         | first `a` of the D - 1 drafts right, the rest wrong; empty: all right           |
| external                | an external hit through SGLang's linker (`--enable-unified-cache-external-linker|
|                         | --unified-cache-external-linker-backend dynamic`, harness/sglang/linker.py): the |
|                         | store holds the prompt's first `tokens` (whole pages) from the request's arrival,|
|                         | a Mamba state every `mamba_block_size` and at the last page; content-addressed,  |
|                         | so any request with that prefix may load it. `load_fails`: the request's load    |
|                         | fails and SGLang aborts it; `async` and `load_steps` are not mapped (SGLang loads|
|                         | layer by layer within the admitting batch's forward)                             |

Refused (BadInput naming the field): num_speculative_tokens other than 0 and 2, eagle_block_drop, mtp_modules,
lookahead_hashes, hidden_state_layers, prefix_cache_retention_interval, the scheduler knobs, a real `model`,
mamba_cache_mode "all" and "none" (prefix caching off is SGLang's --disable-radix-cache, a ChunkCache the wing does
not build), `preempt` events (an `abort` event is SGLang's Scheduler.abort_request), a request's explicit chunks or
prefix_cache_hit_limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import BadInput
from harness.scenario import SCHEDULER_KNOBS, Scenario

SPEC_K = 2  # the one num_speculative_tokens the wing runs: D = SPEC_K + 1 draft tokens, the fixture pool's 3
MAX_RUNNING = 8  # PrefillAdder's max_running_requests, as the prototype ran it
# SGLang aborts every request whose rid starts with the one named (Scheduler.abort_request, scheduler.py:5677-5688):
# each scenario id gets this end in its rid, so aborting "a" never aborts "ab"
RID_END = "\x00"


def sglang_rid(request_id: str) -> str:
    return request_id + RID_END


def scenario_id(req) -> str:
    """The scenario's id of an SGLang request (`Req.rid` less RID_END)."""
    return req.rid[:-len(RID_END)]


@dataclass(frozen=True)
class SglangGeometry:
    strategy: str  # mamba_radix_cache_strategy: "extra_buffer" | "no_buffer"
    page: int
    cache_chunk: int  # Mamba cache chunk = track interval
    budget: int  # chunked_prefill_size
    kv_size: int
    mamba_slots: int
    max_reqs: int
    max_context: int
    tree_core: str = "rust"  # the radix tree's core: "rust" (SGLang's default, the bundled binding) or "python"
    external: bool = False  # a request has an external hit: the wing's store is SGLang's external linker
    draft_tokens: int = 0  # speculative_num_draft_tokens D (NGRAM, harness/sglang/spec.py); 0: no speculation

    @property
    def extra(self) -> bool:
        return self.strategy == "extra_buffer"


def _refuse(scenario: Scenario) -> None:
    g = scenario.geometry
    flags = {"num_speculative_tokens": g.num_speculative_tokens not in (0, SPEC_K),
             "eagle_block_drop": g.eagle_block_drop, "mtp_modules": g.mtp_modules > 0,
             "lookahead_hashes": g.lookahead_hashes,
             "hidden_state_layers": g.hidden_state_layers > 0, "model": g.model is not None,
             "prefix_cache_retention_interval": g.prefix_cache_retention_interval is not None,
             "mamba_cache_mode": g.mamba_cache_mode != "align"}
    flags.update({knob: getattr(g, knob) is not None for knob in SCHEDULER_KNOBS})
    for name, bad in flags.items():
        if bad:
            raise BadInput(f"scenario field geometry.{name}={getattr(g, name)!r}: not expressible on the SGLang wing")
    for i, event in enumerate(scenario.events):
        if event.kind != "abort":  # vLLM's forced preemption (reset_prefix_cache) has no SGLang counterpart
            raise BadInput(f"scenario field events[{i}].kind={event.kind!r}: not expressible on the SGLang wing")
    for i, req in enumerate(scenario.requests):
        for name in ("chunks", "prefix_cache_hit_limit"):
            if getattr(req, name) is not None:
                raise BadInput(f"scenario field requests[{i}].{name}: not expressible on the SGLang wing")


TREE_CORES = ("rust", "python")  # SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND's values; rust is SGLang's default
STRATEGIES = ("no_buffer", "extra_buffer")  # --mamba-radix-cache-strategy; no_buffer is SGLang's default


@dataclass(frozen=True)
class SglangRun:
    """How one replay runs, beside its scenario: the planted bug (harness/sglang/runtime.py MUTANTS), the radix
    tree's core and the Mamba radix-cache strategy."""
    mutant: str | None = None
    tree_core: str = "rust"
    strategy: str = "extra_buffer"

    def check(self) -> SglangRun:
        for name, value, known in (("tree core", self.tree_core, TREE_CORES),
                                   ("Mamba strategy", self.strategy, STRATEGIES)):
            if value not in known:
                raise BadInput(f"unknown SGLang {name} {value!r} (known: {', '.join(known)})")
        return self

    def describe(self) -> str:
        return f"{self.tree_core} tree core, {self.strategy}, mutant {self.mutant}"


def sglang_geometry(scenario: Scenario, run: SglangRun | None = None) -> SglangGeometry:
    """The SGLang configuration of a scenario (the table above) for `run` (its tree core and Mamba strategy);
    BadInput for what it cannot express."""
    run = (run or SglangRun()).check()
    _refuse(scenario)
    g = scenario.geometry
    extra = run.strategy == "extra_buffer"
    page = g.attn_block_size if extra else 1
    if g.mamba_block_size % page:
        raise BadInput(f"scenario field geometry.mamba_block_size={g.mamba_block_size}: must be a multiple of the "
                       f"page ({page}) on the SGLang wing")
    if g.token_budget % page:  # SGLang's own rule (srt/arg_groups/validation_hook.py:244 in 0.5.23)
        raise BadInput(f"scenario field geometry.token_budget={g.token_budget}: SGLang requires chunked_prefill_size "
                       f"divisible by page_size ({page})")
    draft = g.num_speculative_tokens + 1 if g.num_speculative_tokens else 0
    if extra and g.mamba_block_size < draft:  # mamba_track_interval >= speculative_num_draft_tokens (mamba_hook.py:133)
        raise BadInput(f"scenario field geometry.mamba_block_size={g.mamba_block_size}: SGLang requires "
                       f"mamba_track_interval >= speculative_num_draft_tokens ({draft}) with extra_buffer")
    longest = max(r.prompt.num_tokens + r.max_tokens for r in scenario.requests) + draft  # a verify overshoots
    reqs = max(MAX_RUNNING, len(scenario.requests))
    per_req = 8 if extra else 2  # a working slot, tracking slots (extra_buffer) and cached states
    return SglangGeometry(
        strategy=run.strategy, page=page, cache_chunk=g.mamba_block_size,
        budget=g.token_budget, kv_size=(g.num_blocks - 1) * g.attn_block_size // page * page,
        mamba_slots=max(20, reqs * per_req),
        max_reqs=reqs, max_context=max(256, longest + 2 * page), tree_core=run.tree_core,
        external=any(r.external is not None for r in scenario.requests), draft_tokens=draft)
