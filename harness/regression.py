"""Write a (minimized) finding as a standalone pytest file in vLLM's own test style.

The emitted file imports only vLLM and torch: it builds the same KVCacheManager, makes the same requests,
and makes the allocator calls the harness's driver made, in order, setting request fields as vLLM's
scheduler does. It keeps the worker's block-table row the way the V1 model runner does (new and resumed
requests replace it with the full table, running requests append what `allocate_slots` returned) and
asserts after every step that every column the worker reads or writes names the same block as the
scheduler's table. A `vllm-exception` finding fails by raising. Paste it under
`tests/v1/core/prefix_cache/` in vLLM.
"""

from __future__ import annotations

import pprint
from dataclasses import dataclass, field

from harness import driver as driver_mod
from harness.scenario import Scenario
from harness.vllm_adapter import MAMBA_GROUP


@dataclass
class _Recorder:
    lines: list[str] = field(default_factory=list)
    blocks_var: dict[str, str] = field(default_factory=dict)
    seen: dict[str, tuple] = field(default_factory=dict)


def _record(scenario: Scenario, mutant: str | None) -> tuple[list[str], driver_mod.Driver]:
    """Replay once with the adapter wrapped, turning each vLLM call into a line of test code."""
    rec = _Recorder()
    d = driver_mod.Driver(scenario, mutant)
    alloc = d.alloc
    status_name = {v: k for k, v in alloc.status.__members__.items()}

    def sync(request) -> None:
        rid = request.request_id
        state = (request.num_computed_tokens, request.status, request.num_preemptions)
        if rec.seen.get(rid) != state:
            rec.seen[rid] = state
            rec.lines.append(f"reqs[{rid!r}].num_computed_tokens = {state[0]}")
            rec.lines.append(f"reqs[{rid!r}].status = RequestStatus.{status_name[state[1]]}")
            if state[2]:
                rec.lines.append(f"reqs[{rid!r}].num_preemptions = {state[2]}")

    def wrap(name, render):
        original = getattr(alloc, name)

        def call(*args, **kwargs):
            if args and hasattr(args[0], "request_id"):
                sync(args[0])
            out = original(*args, **kwargs)
            rec.lines.extend(render(out, *args, **kwargs))
            return out
        setattr(alloc, name, call)

    def lookup(out, request):
        var = f"hit_{request.request_id}"
        rec.blocks_var[request.request_id] = var
        return [f"{var}, _n, *_ = manager.get_computed_blocks(reqs[{request.request_id!r}])",
                f"assert _n == {out[1]}"]

    def truncate(out, blocks, n):
        rid = next(k for k, v in rec.blocks_var.items())
        return [f"{rec.blocks_var[rid]} = manager.truncate_computed_blocks({rec.blocks_var[rid]}, {n})"]

    def allocate(out, request, n, *, num_local=0, blocks=None, lookahead=0, num_external=0, delay_cache=False,
                 has_scheduled_reqs=True):
        rid = request.request_id
        hit = rec.blocks_var.pop(rid, "None") if blocks is not None else "None"
        return [f"new = manager.allocate_slots(reqs[{rid!r}], {n}, num_new_computed_tokens={num_local}, "
                f"new_computed_blocks={hit}, num_lookahead_tokens={lookahead}, "
                f"num_external_computed_tokens={num_external}, delay_cache_blocks={delay_cache}, "
                f"has_scheduled_reqs={has_scheduled_reqs})",
                "assert new is not None" if out is not None else "assert new is None",
                f"returned[{rid!r}] = new.get_block_ids() if new is not None else None"]

    wrap("lookup", lookup)
    wrap("truncate", truncate)
    wrap("allocate", allocate)
    wrap("cache_blocks", lambda out, request, n: [f"manager.cache_blocks(reqs[{request.request_id!r}], {n})"])
    wrap("free", lambda out, request: [f"manager.free(reqs[{request.request_id!r}])"])
    wrap("new_step", lambda out: ["", "manager.new_step_starts()"])
    wrap("take_copies", lambda out: ["_copies, retained = manager.take_kv_cache_block_copies()"])
    wrap("release_retained", lambda out, retained: ["manager.block_pool.free_blocks(retained)"] if retained else [])
    wrap("take_zero_ids", lambda out: ["manager.take_new_block_ids()"])
    wrap("append_output", lambda out, request, tokens: [f"reqs[{request.request_id!r}].append_output_token_ids({list(tokens)})"])

    original_update = d.worker.update_states

    def update_states(so):
        kinds = original_update(so)
        for rid, ns in so.num_scheduled.items():
            kind = kinds.get(rid, "RUNNING")
            if kind == "RUNNING":
                rec.lines.append(f"rows[{rid!r}] = rows[{rid!r}] + list(returned[{rid!r}][MAMBA])")
            else:
                rec.lines.append(f"rows[{rid!r}] = list(manager.get_block_ids({rid!r})[MAMBA])")
                rec.lines.append(f"prev_state_col.pop({rid!r}, None)")
            nc = d.worker.requests[rid].num_computed
            rec.lines.append(f"check_live_columns({rid!r}, num_computed={nc}, num_scheduled={ns})")
        return kinds
    d.worker.update_states = update_states
    d.run()
    return rec.lines, d


TEMPLATE = '''# SPDX-License-Identifier: Apache-2.0
"""Regression test emitted by hybrid-harness from a minimized finding.

Finding signature: {signature}
vLLM release it was found on: {version}{mutant_line}
Scenario: {name}

The allocator calls below are the ones vLLM's Scheduler makes for this schedule. The worker row is kept
as the V1 GPUModelRunner keeps it (new/resumed requests: replace with the full table; running requests:
append the blocks allocate_slots returned). Every column the worker reads (the previous running column)
or writes (the running column and its speculative columns) must name the scheduler's block.
"""

import torch

from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core import kv_cache_utils
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
from vllm.v1.request import Request, RequestStatus

MAMBA = {mamba_group}
BLOCK_SIZE = {block_size}
NUM_SPEC = {num_spec}


def cdiv(a, b):
    return -(-a // b)


def test_{func}():
    kv_cache_utils.init_none_hash(sha256)
    hasher = kv_cache_utils.get_request_block_hasher({hash_block_size}, sha256)
    config = KVCacheConfig(
        num_blocks={num_blocks},
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(["attn"], FullAttentionSpec(block_size={attn_block_size}, num_kv_heads=1, head_size=1,
                                                         dtype=torch.float32)),
            KVCacheGroupSpec(["mamba"], MambaSpec(block_size=BLOCK_SIZE, shapes=((1, 1),), dtypes=(torch.float32,),
                                                  mamba_cache_mode="align", num_speculative_blocks=NUM_SPEC{ckpt})),
        ],
    )
    manager = KVCacheManager(config, max_model_len={max_model_len}, scheduler_block_size={scheduler_block_size},
                             hash_block_size={hash_block_size}, enable_caching=True, use_eagle={eagle})
    prompts = {prompts}
    max_tokens = {max_tokens}
    reqs = {{rid: Request(request_id=rid, prompt_token_ids=tokens, sampling_params=SamplingParams(max_tokens=max_tokens[rid]),
                         pooling_params=None, block_hasher=hasher) for rid, tokens in prompts.items()}}
    rows, returned, prev_state_col = {{}}, {{}}, {{}}

    def check_live_columns(rid, num_computed, num_scheduled):
        core = manager.get_block_ids(rid)[MAMBA]
        row = rows[rid]
        curr = cdiv(num_computed + num_scheduled, BLOCK_SIZE) - 1
        prev = prev_state_col.get(rid, (num_computed - 1) // BLOCK_SIZE)
        live = {{curr}} | ({{prev}} if prev not in (-1, curr) else set())
        live |= set(range(curr, min(curr + 1 + NUM_SPEC, len(core))))
        for col in sorted(live):
            worker = row[col] if col < len(row) else None
            sched = core[col] if col < len(core) else None
            assert worker == sched, f"{{rid}}: column {{col}} worker row {{row}} vs scheduler {{core}}"
        prev_state_col[rid] = curr

{body}
'''


def emit_regression(scenario: Scenario, signature: str, mutant: str | None = None) -> str:
    lines, d = _record(scenario, mutant)
    g = scenario.geometry
    prompts = {r.id: list(r.vreq.prompt_token_ids) for r in d.reqs.values()}
    func = "".join(ch if ch.isalnum() else "_" for ch in signature.lower()).strip("_")
    return TEMPLATE.format(
        signature=signature, version=d.trace.vllm_version, name=scenario.name or "(unnamed)",
        mutant_line=f" + mutant {mutant} (apply it first to see the failure)" if mutant else "",
        mamba_group=MAMBA_GROUP, block_size=g.mamba_block_size, num_spec=g.num_speculative_tokens,
        func=f"hybrid_harness_{func}", hash_block_size=g.hash_block_size, num_blocks=g.num_blocks,
        attn_block_size=g.attn_block_size,
        ckpt=", num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=1" if g.prefill_checkpoint else "",
        max_model_len=g.max_model_len, scheduler_block_size=g.scheduler_block_size, eagle=g.eagle_block_drop,
        prompts=pprint.pformat(prompts, width=110, compact=True).replace("\n", "\n    "),
        max_tokens={r.id: r.max_tokens for r in scenario.requests},
        body="\n".join("    " + ln if ln else "" for ln in lines),
    )


__all__ = ["emit_regression"]
