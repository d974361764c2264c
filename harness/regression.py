"""Write a (minimized) finding as a standalone pytest file in vLLM's own test style.

The emitted file imports only vLLM and torch: it builds the same KVCacheManager, makes the same requests,
and makes the allocator calls the harness's driver made, in order, setting request fields as vLLM's
scheduler does (status, computed tokens, preemptions, and the shared-prefix junction its lookup returns, which
cache_blocks reads under sparse retention). It keeps the worker's block-table row the way the V1 model runner does (new and resumed
requests replace it with the full table, running requests append what `allocate_slots` returned) and
asserts what every oracle asserts, through vLLM's own objects:
- live columns: every column the worker reads or writes names the scheduler's block;
- state identity: a page model (the harness's SymbolicStates, embedded) follows every state the worker
  writes, the connector delivers and CoW copies (from `take_kv_cache_block_copies`), addressed by the
  worker row's columns; every state the worker reads must be the state of the prefix it should summarize
  (provenance), and after every step every block cached under a Mamba prefix hash must hold that prefix's
  state (cache integrity);
- pool accounting: after all frees, every block but the null block is free and no ref count is left;
- exceptions: a vLLM exception fails the test by raising.
Paste it under `tests/v1/core/prefix_cache/` in vLLM.
"""

from __future__ import annotations

import inspect
import pprint
from dataclasses import dataclass, field

from harness import driver as driver_mod
from harness.scenario import Scenario
from harness.states import SymbolicStates
from harness.vllm_adapter import MAMBA_GROUP


@dataclass
class _Recorder:
    lines: list[str] = field(default_factory=list)
    blocks_var: dict[str, str] = field(default_factory=dict)
    seen: dict[str, tuple] = field(default_factory=dict)
    retention_step: int | None = None  # the step whose retention checks are still to be written

    def flush_retention(self, trace) -> list[str]:
        """The retention checks of the last step run, once the step loop has recorded that step's shared-prefix
        junctions (trace._record_junctions runs after the step, and the positions kept depend on them): written
        before the next step starts, or before the replay's end aborts what is left. The test's keys seen are
        every key cached after any step so far, so a check written after its step asserts the same."""
        if self.retention_step is None:
            return []
        step, self.retention_step = self.retention_step, None
        return [f"check_retained({rid!r}, {n})" for rid, n in _retained_this_step(trace, step)]


def _record(scenario: Scenario, mutant: str | None,
            split_points: dict[int, int] | None = None) -> tuple[list[str], driver_mod.Driver]:
    """Replay once with the adapter wrapped, turning each vLLM call into a line of test code. Long: one small
    renderer per adapter call, each closing over the recorder and the driver of this replay.
    `split_points`: {index of a call of the chunk rule: the chunk the release with the bug clipped there}; at those
    calls the test asserts vLLM's `Scheduler._mamba_block_aligned_split` (a `mamba_split` helper the caller adds),
    where the bug changes the chunk, and nowhere else (elsewhere the chunk is this release's schedule, no part of
    the bug)."""
    rec = _Recorder()
    d = driver_mod.Driver(scenario, mutant)
    block = scenario.geometry.mamba_block_size
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
        rid = request.request_id
        return [f"{var}, _n, *_rest = manager.get_computed_blocks(reqs[{rid!r}])",
                f"assert _n == {out[1]}, f'{rid}: prefix-cache hit of {{_n}} tokens, expected {out[1]}'",
                # where the lookup returns a shared-prefix junction (sparse retention, 0.30+), the Scheduler keeps it
                # on the request for cache_blocks (scheduler.py:1122-1127 in 0.33.0), as the driver's lookup does
                f"if _rest and hasattr(reqs[{rid!r}], 'shared_prefix_boundary'):  # the Scheduler keeps the junction",
                f"    reqs[{rid!r}].shared_prefix_boundary = _rest[0]"]

    def truncate(out, blocks, n):
        rid = next(k for k, v in rec.blocks_var.items())
        return [f"{rec.blocks_var[rid]} = manager.truncate_computed_blocks({rec.blocks_var[rid]}, {n})"]

    def allocate(out, request, n, *, num_local=0, blocks=None, lookahead=0, num_external=0, delay_cache=False,
                 has_scheduled_reqs=True, admission=None):
        rid = request.request_id
        hit = rec.blocks_var.pop(rid, "None") if blocks is not None else "None"
        gates = "".join(f", {k}={v}" for k, v in (admission or {}).items() if k in alloc._allocate_params)
        return [f"new = manager.allocate_slots(reqs[{rid!r}], {n}, num_new_computed_tokens={num_local}, "
                f"new_computed_blocks={hit}, num_lookahead_tokens={lookahead}, "
                f"num_external_computed_tokens={num_external}, delay_cache_blocks={delay_cache}, "
                f"has_scheduled_reqs={has_scheduled_reqs}{gates})",
                f"assert new is not None, '{rid}: allocate_slots refused'" if out is not None else
                f"assert new is None, '{rid}: allocate_slots admitted what the pool cannot hold'",
                f"returned[{rid!r}] = new.get_block_ids() if new is not None else None"]

    split_calls = [0]

    def mamba_split(out, request, n, num_local=0, num_external=0):
        index, split_calls[0] = split_calls[0], split_calls[0] + 1
        if index not in (split_points or {}):
            return []
        rid, call = request.request_id, f"mamba_split(manager, reqs[{request.request_id!r}], {n}, {num_local}, {num_external})"
        start = request.num_computed_tokens + num_local + num_external
        boundary = (start // block + 1) * block
        if start % block and start + out == boundary < start + split_points[index]:
            # the bug's consequence in the split's own terms: a chunk starting mid-block runs past the boundary
            return [f"assert {start} + {call} <= {boundary}, '{rid}: the chunk from token {start} (mid-block) runs "
                    f"past the Mamba block boundary at {boundary}'"]
        return [f"assert {call} == {out}, '{rid}: the Mamba block-aligned split of a {n}-token chunk from token "
                f"{start} (the release with the bug clips it to {split_points[index]})'"]

    wrap("split", mamba_split)
    wrap("lookup", lookup)
    wrap("truncate", truncate)
    wrap("allocate", allocate)
    wrap("cache_blocks", lambda out, request, n: [f"manager.cache_blocks(reqs[{request.request_id!r}], {n})"])
    wrap("remove_skipped", lambda out, request: [f"manager.remove_skipped_blocks(**{out!r})"])
    wrap("free", lambda out, request: [f"manager.free(reqs[{request.request_id!r}])"])
    wrap("new_step", lambda out: [*rec.flush_retention(d.trace), "", "manager.new_step_starts()"])
    wrap("take_copies", lambda out: ["_copies, retained = manager.take_kv_cache_block_copies()",
                                     "for _c in _copies:  # CoW: the worker copies whole pages before the forward",
                                     "    pages.copy_page(_c.src_block_id, _c.dst_block_id)"])
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
    shutdown = d._shutdown

    def aborting() -> None:  # the replay's end: what still holds blocks is aborted (vLLM's finish_requests)
        rec.lines.extend(rec.flush_retention(d.trace))
        at = len(rec.lines)
        shutdown()
        if len(rec.lines) > at:
            rec.lines[at:at] = ["", "# the end of the schedule: abort every request still holding blocks"]
    d._shutdown = aborting
    _record_states(d, rec)
    d.run()
    rec.lines += [*rec.flush_retention(d.trace), "", "check_pool()"]
    return rec.lines, d


def _record_states(d: driver_mod.Driver, rec: _Recorder) -> None:
    """Turn every page operation of the worker shadow and the connector into a line on the test's page
    model, with each block named by the worker row column (or the scheduler table column) it came from:
    block ids differ between the buggy and the fixed allocator, columns do not."""
    states = d.states

    def where(block: int) -> str:
        if block == 0:
            return "0"
        for rid, s in d.worker.requests.items():
            row = s.block_ids[MAMBA_GROUP]
            if block in row:
                return f"col({rid!r}, {row.index(block)})"
        for rid in d.reqs:
            if d.alloc.holds_blocks(rid):
                row = d.alloc.block_ids(rid)[MAMBA_GROUP]
                if block in row:
                    return f"core({rid!r}, {row.index(block)})"
        raise ValueError(f"block {block} is in no row")  # the recorder cannot name it: a harness bug

    def wrap(name, render):
        original = getattr(states, name)

        def call(*args):
            rec.lines.append(render(*args))
            return original(*args)
        setattr(states, name, call)

    pending: list[tuple] = []  # the page reads since the last recorded Read (one or two per Read)
    read = states.read

    def record_read(conv_block, conv_offset, ssm_block):
        pending.append((where(conv_block), conv_offset, where(ssm_block)))
        return read(conv_block, conv_offset, ssm_block)
    states.read = record_read

    class Reads(list):
        def append(self, rd) -> None:
            conv, ssm = pending[0], pending[-1]
            pending.clear()
            rec.lines.append(f"expect_read(pages.read({conv[0]}, {conv[1]}, {ssm[2]}), {rd.fed!r}, "
                             f"{f'{rd.what} of {rd.request} at step {rd.step}'!r})  # {d.trace.name(rd.fed)}")
            super().append(rd)
    d.trace.reads = Reads(d.trace.reads)
    wrap("write_final", lambda b, st: f"pages.write_final({where(b)}, {st!r})")
    wrap("write_tokens", lambda b, blocks, sts: f"pages.write_tokens({where(b)}, [{', '.join(map(where, blocks))}], "
                                                f"{list(sts)!r})")
    wrap("shift_copy", lambda dst, conv, ssm, shift: f"pages.shift_copy({where(dst)}, {where(conv)}, {where(ssm)}, "
                                                      f"{shift})")
    wrap("deliver", lambda b, st: f"pages.deliver({where(b)}, {st!r})  # the connector loads {d.trace.name(st)}")
    check_cache = d._check_cache

    def checked(step: int) -> None:
        rec.lines.append("check_cache()")
        check_cache(step)
        rec.retention_step = step
    d._check_cache = checked


def _retained_this_step(trace, step: int) -> list[tuple[str, int]]:
    """The states the retention oracle requires cached after `step` (sparse retention only)."""
    from harness.oracles import retention_checks

    return [(rv.request, end) for rv, end in retention_checks(trace) if rv.step == step]


TEMPLATE = '''# SPDX-License-Identifier: Apache-2.0
"""Regression test emitted by hybrid-harness from a minimized finding.

Finding signature: {signature}
vLLM release it was found on: {version}{mutant_line}
Scenario: {name}

The allocator calls below are the ones vLLM's Scheduler makes for this schedule, with the values the allocator
without the bug returns. The worker row is kept
as the V1 GPUModelRunner keeps it (new/resumed requests: replace with the full table; running requests:
append the blocks allocate_slots returned). Every column the worker reads (the previous running column)
or writes (the running column and its speculative columns) must name the scheduler's block. A page model
follows the state every block holds (a state is (number of tokens, fingerprint of that token prefix)); the
worker's reads and the prefix cache's Mamba blocks must hold the states they stand for, and after all frees
the pool must be whole.
"""

from __future__ import annotations

import torch

from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core import kv_cache_utils
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
from vllm.v1.request import Request, RequestStatus

MAMBA = {mamba_group}
BLOCK_SIZE = {block_size}
HASH_BLOCK_SIZE = {hash_block_size}
NUM_SPEC = {num_spec}
# PREFIX_STATES[request][n]: the state of the request's first n tokens, (n, fingerprint), per hash block
PREFIX_STATES = {prefix_states}

# <<pages>>


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
        ],{retention}
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

    pages = SymbolicStates(NUM_SPEC)
    seen_keys = set()  # every Mamba prefix-cache key seen after a step

    def col(rid, column):  # the block at a column of the worker's row (padding reads as the null block)
        return rows[rid][column] if 0 <= column < len(rows[rid]) else 0

    def core(rid, column):  # the block at a column of the scheduler's table
        return manager.get_block_ids(rid)[MAMBA][column]

    def expect_read(read, want, what):
        conv, ssm = read
        assert conv == want and ssm == want, f"{{what}}: expected the state {{want}}, read conv {{conv}}, ssm {{ssm}}"

    def check_cache():
        owners = {{}}
        for rid, request in reqs.items():
            for k, block_hash in enumerate(request.block_hashes):
                owners.setdefault(bytes(block_hash), PREFIX_STATES[rid][(k + 1) * HASH_BLOCK_SIZE])
        pool = manager.block_pool
        cached = pool.cached_block_hash_to_block
        dup_ids = getattr(cached, "_dup_ids", {{}})  # vLLM 0.34+: keys map to block ids, a key's several in _dup_ids
        for key, value in cached._cache.items():
            if isinstance(value, int):
                block_ids = list(dup_ids.get(key, (value,)))
            else:  # earlier releases: a block, or a dict of the blocks cached under one key
                block_ids = [b.block_id for b in (value.values() if isinstance(value, dict) else [value])]
            for block_id in block_ids:  # a key is its block's primary hash or an alias beside one
                primary = pool.blocks[block_id].block_hash
                assert primary is not None and (key == primary or key in pool.cached_block_hashes_by_block.get(
                    block_id, ())), f"a prefix-cache key maps to block {{block_id}}, which does not hold it"
            if kv_cache_utils.get_group_id(key) != MAMBA:
                continue
            seen_keys.add(bytes(key))
            want = owners[bytes(kv_cache_utils.get_block_hash(key))]
            for block_id in block_ids:
                conv, ssm = pages.page(block_id)
                assert conv[0] == want and ssm == want, (
                    f"cached block {{block_id}} holds conv {{conv[0]}}, ssm {{ssm}}; its key names {{want}}")

    def check_retained(rid, num_tokens):  # sparse retention keeps a prompt's replay-boundary state cached
        key = kv_cache_utils.make_block_hash_with_group_id(
            reqs[rid].block_hashes[num_tokens // HASH_BLOCK_SIZE - 1], MAMBA)
        assert bytes(key) in seen_keys, f"{{rid}}: no prefix-cache key for its first {{num_tokens}} tokens"

    def check_pool():
        pool = manager.block_pool
        free, expected = pool.get_num_free_blocks(), pool.num_gpu_blocks - 1
        assert free == expected, f"{{free}} free blocks after all frees, expected {{expected}}"
        refs = {{b.block_id: b.ref_cnt for b in pool.blocks if b.ref_cnt and not b.is_null}}
        assert not refs, f"ref counts left after all frees: {{refs}}"

{body}
'''


def emit_regression(scenario: Scenario, signature: str, mutant: str | None = None, fixes=(),
                    split: bool = False, until_step: int | None = None) -> str:
    """The regression test of a finding. The calls and the values they must return are recorded on the
    allocator without the bug: stock vLLM for a mutant's finding (the caller must NOT have the mutant
    applied), stock plus the known issues' fixes (`fixes`) for findings of known issues. A new finding of
    stock vLLM itself is recorded on stock: its test fails there until vLLM is fixed.

    `split`: also assert vLLM's chunk rule (`Scheduler._mamba_block_aligned_split`) where the bug changes the
    chunk it clips: the calls whose chunk differs between stock and stock with `fixes` (split_points), none where
    no fix changes it. `until_step`: the replay stops after that step (the last one at which the finding showed)
    and every request still holding blocks is aborted, as the driver does at its step limit: the test drives vLLM
    as far as the bug needs and no further, so later steps' release-specific schedule is no part of it."""
    from harness.patching import patched
    from harness.run_config import RunConfig

    if until_step is not None:
        scenario = scenario.model_copy(update={"max_steps": min(scenario.max_steps, until_step + 1)})
    points = split_points(scenario, fixes) if split and fixes else {}
    with patched(RunConfig(fixes=tuple(k.id for k in fixes))):  # and no mutant: the allocator without the bug
        lines, d = _record(scenario, None, points)
    g = scenario.geometry
    prompts = {r.id: list(r.vreq.prompt_token_ids) for r in d.reqs.values()}
    func = "".join(ch if ch.isalnum() else "_" for ch in signature.lower()).strip("_")
    hb = g.hash_block_size
    prefix_states = {r.id: {n: (n, r.fps[n]) for n in range(hb, len(r.fps), hb)} for r in d.reqs.values()}
    text = TEMPLATE.format(
        signature=signature, version=d.trace.vllm_version, name=scenario.name or "(unnamed)",
        mutant_line=(f" + mutant {mutant} (apply it first to see the failure)" if mutant else "") +
                    (f"\nRecorded with the fixes of the known issues {[k.id for k in fixes]} applied" if fixes else ""),
        mamba_group=MAMBA_GROUP, block_size=g.mamba_block_size, num_spec=g.num_speculative_tokens,
        func=f"hybrid_harness_{func}", hash_block_size=g.hash_block_size, num_blocks=g.num_blocks,
        attn_block_size=g.attn_block_size,
        ckpt=", num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=1" if g.prefill_checkpoint else "",
        retention=("" if g.prefix_cache_retention_interval is None else
                   f"\n        prefix_cache_retention_interval={g.prefix_cache_retention_interval},"),
        max_model_len=g.max_model_len, scheduler_block_size=g.scheduler_block_size, eagle=g.eagle_block_drop,
        prompts=pprint.pformat(prompts, width=110, compact=True).replace("\n", "\n    "),
        max_tokens={r.id: r.max_tokens for r in scenario.requests},
        body="\n".join("    " + ln if ln else "" for ln in lines),
        prefix_states=pprint.pformat(prefix_states, width=110, compact=True),
    )
    return text.replace("# <<pages>>\n", _page_model() + (_split_helper(g) if points else ""))


def _split_outcomes(scenario: Scenario, fixes) -> list[tuple[tuple, int]]:
    """Every call of vLLM's chunk rule in a replay with `fixes` applied (and no mutant): ((request, tokens computed,
    chunk asked, local hit, external hit), the chunk it clipped), in order. A replay that vLLM ends by raising
    keeps the calls made before."""
    from harness.errors import BadInput
    from harness.patching import patched
    from harness.run_config import RunConfig

    calls: list[tuple[tuple, int]] = []
    with patched(RunConfig(fixes=tuple(k.id for k in fixes))):
        d = driver_mod.Driver(scenario, None)
        split = d.alloc.split

        def recording(request, n, num_local=0, num_external=0):
            out = split(request, n, num_local, num_external)
            calls.append(((request.request_id, request.num_computed_tokens, n, num_local, num_external), out))
            return out
        d.alloc.split = recording
        try:
            d.run()
        except BadInput:  # stock's schedule may not take the scenario's explicit chunks where the fixed one does
            pass
    return calls


def split_points(scenario: Scenario, fixes) -> dict[int, int]:
    """{index of a chunk-rule call in the replay with `fixes`: the chunk stock clipped there} where the two replays
    make the same call and stock clips another chunk: the calls the bug changes. Only the first such call: after
    it the two schedules part."""
    fixed, stock = _split_outcomes(scenario, fixes), _split_outcomes(scenario, ())
    for i, ((args, want), (stock_args, got)) in enumerate(zip(fixed, stock)):
        if args != stock_args:
            break
        if want != got:
            return {i: got}
    return {}


def _split_helper(geometry) -> str:
    """`mamba_split`: vLLM's own `Scheduler._mamba_block_aligned_split` on a stub self holding the Scheduler
    attributes its split reads (in any release from 0.26.0: the harness's split shim, vllm_adapter.py), as vLLM's
    tests/v1/core/test_mamba_align_chunk_split.py `_split` does. What the Scheduler derives from the manager (partial
    hash hits, the shared-prefix checkpoint switch) is read off the test's manager, as the Scheduler reads it."""
    g = geometry
    return f'''

def mamba_split(manager, request, num_new_tokens, num_local, num_external):
    from vllm.v1.core.sched.scheduler import Scheduler

    partial = {g.hash_block_size} < {g.scheduler_block_size} and bool(
        getattr(manager.coordinator, "enable_partial_hash_hits", False))
    # the shared-prefix checkpoint switch (mamba_fine_grained_prefix_cache up to 0.30)
    checkpoint = {{name: partial and bool(getattr(manager, name, False))
                  for name in ("mamba_shared_prefix_checkpoint", "mamba_fine_grained_prefix_cache")}}
    scheduler = SimpleNamespace(
        block_size={g.scheduler_block_size},
        hash_block_size={g.hash_block_size},
        cache_config=SimpleNamespace(
            block_size={g.scheduler_block_size}, mamba_block_size={g.mamba_block_size}),
        scheduler_config=SimpleNamespace(long_prefill_token_threshold=0),
        max_num_scheduled_tokens={g.token_budget},
        use_eagle={g.eagle_block_drop},
        use_eagle_block_drop={g.eagle_block_drop},
        num_hash_lookahead_tokens=0,
        mamba_partial_cache_hit=partial,
        mamba_has_prefill_checkpoint_blocks={bool(g.prefill_checkpoint)},
        mamba_prefill_checkpoint_alignment={1 if g.prefill_checkpoint else None},
        **checkpoint,
    )
    return Scheduler._mamba_block_aligned_split(scheduler, request, num_new_tokens, num_local, num_external)
'''


def _page_model() -> str:
    """The page model the emitted test carries: the harness's own symbolic state pool, verbatim."""
    return (f"State = tuple  # (number of tokens, fingerprint of that prefix)\nZERO_STATE = {(0, 0)!r}\n"
            f"NULL_BLOCK = 0\n\n\n{inspect.getsource(SymbolicStates)}")


__all__ = ["emit_regression"]
