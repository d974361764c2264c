"""`replay(scenario, run)`: one scenario on SGLang's own code (harness/sglang/__init__.py says what is SGLang's),
recorded as the project's `Trace` for `harness.oracles.judge`.

Recorded: a `Read` per request per extend/decode (the kernel's initial state); after every step a `CacheCheck`
per radix-tree node holding a Mamba value that is new or changed (the node's path is the first tokens of some
request's sequence, its `prefix_owner`); what each request's first admission was served from cache
(`Trace.served`); the run end (liveness) and, once every request finished or was aborted, SGLang's pools
(pool accounting). `Trace.prefixes[rid]` are the fingerprints of the request's prompt then its generated tokens.
Not recorded (named in `Trace.unjudged`): block-table rows (live-column).

With speculation (harness/sglang/spec.py) a verify commits its whole accepted run, so `output_ids` may run past
max_new_tokens (13 of 12); SGLang keeps them there and caps what it emits and caches with `finished_len`
(Req.update_finish_state, schedule_batch.py:2038-2042) and `owned_kv_len` (:1553-1562; no_buffer does not cache a
finished request whose owned length falls short of what it committed: _mamba_can_cache_finished_req). The
fingerprints follow SGLang's own `output_ids`, overshoot included (the token rule's tokens, like the rest), so every
read and cached key is judged against the sequence SGLang itself holds.
"""

from __future__ import annotations

import importlib.metadata

from harness.errors import BadInput, HarnessError
from harness.scenario import Scenario
from harness.sglang import runtime
from harness.sglang.geometry import SglangRun, scenario_id, sglang_geometry
from harness.states import chain
from harness.trace import CacheCheck, RunEnd, Trace

UNJUDGED = {"live-column": "the SGLang wing records no block-table rows"}


def replay(scenario: Scenario, run: SglangRun | None = None) -> Trace:
    """Replay `scenario` with the wing's patches (and planted bug) on, always undone. BadInput for what the wing
    cannot express or an unknown mutant, before SGLang is imported."""
    run = run or SglangRun()
    geom = sglang_geometry(scenario, run)
    undo = runtime.patched(geom.page, run.mutant, spec=bool(geom.draft_tokens))
    try:
        from harness.sglang.env import build
        from harness.sglang.scheduler import RealScheduler

        env = build(geom)
        if env.cache._tree_core_backend != geom.tree_core:  # SGLang falls back to Python where Rust cannot run
            raise BadInput(f"SGLang built its {env.cache._tree_core_backend} tree core where {geom.tree_core} was "
                           "asked (srt/mem_cache/unified_cache/tree_core_registry.py _rust_fallback_reason)")
        trace = Trace(vllm_version=f"sglang {importlib.metadata.version('sglang')} ({geom.tree_core} tree core, "
                                   f"{geom.strategy})", mutant=run.mutant, vllm_kind="sglang", unjudged=dict(UNJUDGED))
        _run(scenario, env, RealScheduler(env, _spec_worker(scenario, env)), trace)
        return trace
    finally:
        undo()


def _spec_worker(scenario: Scenario, env):
    """The NGRAM worker stand-in (harness/sglang/spec.py) when the scenario speculates, else None."""
    if not env.geom.draft_tokens:
        return None
    from harness.sglang.spec import NgramWorkerStandIn

    return NgramWorkerStandIn(env, {r.id: list(r.acceptance) for r in scenario.requests})


def _run(scenario: Scenario, env, sched, trace: Trace) -> None:
    from harness.sglang.scheduler import make_req

    prompts = scenario.prompt_tokens()
    pending = sorted(scenario.requests, key=lambda r: r.arrival_step)
    reqs, seen, idle, reason, aborted = {}, {}, 0, "step-limit", set()
    for step in range(scenario.max_steps):
        for spec in [s for s in pending if s.arrival_step <= step]:
            reqs[spec.id] = make_req(spec.id, prompts[spec.id], spec.max_tokens)
            trace.prefixes[spec.id] = chain([0], prompts[spec.id])
            trace.prompt_tokens[spec.id] = len(prompts[spec.id])
            if spec.external is not None:  # the store holds its hit from its arrival on (harness/sglang/linker.py)
                env.cache.linker.cache_linker.seed(reqs[spec.id].rid, prompts[spec.id], spec.external.tokens,
                                                   env.geom.cache_chunk, spec.external.load_fails)
            sched.waiting_queue.append(reqs[spec.id])
            pending.remove(spec)
        for event in [e for e in scenario.events if e.step == step and e.request not in aborted]:
            aborted.add(event.request)  # a request aborted before it arrives never does, as on vLLM's tiers
            if event.request in reqs:
                sched.abort(event.request)
            pending = [s for s in pending if s.id != event.request]
        batch = sched.get_next_batch_to_run()
        trace.steps_run = step + 1
        if batch is None:
            idle += 1
            if not pending and sched.running_batch.is_empty():  # nothing runs, nothing arrives: nothing changes
                reason = "stuck" if sched.waiting_queue or sched.chunked_req is not None else "done"
                break
            continue
        idle = 0
        for req in batch.reqs if batch.forward_mode.is_extend() else ():
            trace.served.setdefault(scenario_id(req), req.prefix_len)  # the first admission's radix-cache hit
        sched.process_batch_result(batch, sched.run_batch(batch, trace, step))
        sched.last_batch = batch
        _record_cache(env, trace, step, reqs, seen)
    _judge_end(scenario, env, trace, {rid: r for rid, r in reqs.items() if rid not in aborted}, pending, reason,
               idle)


def _pages_to_admit(tokens: int, page: int) -> int:
    """The fewest KV pages with which SGLang admits a request of `tokens` (prompt + max_new_tokens) alone: its
    PrefillAdder adds a page per request for allocation rounding (srt/managers/schedule_policy.py:733-737) and asks
    for strictly less than what remains (add_one_req :1412 and _check_prefill_budget)."""
    return -(-(tokens + page + 1) // page)


def _judge_end(scenario: Scenario, env, trace: Trace, reqs: dict, pending: list, reason: str, idle: int) -> None:
    """The run end for the liveness oracle, KV pages as its blocks (the Mamba slots are sized for every request:
    geometry.py), and, once every request finished, the pools for pool accounting."""
    from harness.sglang.env import pool_snapshot

    g, page = env.geom, env.geom.page
    unfinished = {rid: ("running" if r.kv.req_pool_idx is not None else "waiting")
                  for rid, r in reqs.items() if not r.finished()}
    tokens = {r.id: r.prompt.num_tokens + r.max_tokens for r in scenario.requests}
    trace.end = RunEnd(reason if unfinished or pending else "done", trace.steps_run, idle, unfinished, tokens, 0,
                       g.kv_size // page + 1, (page, g.cache_chunk), 0,
                       mamba_cache_mode=scenario.geometry.mamba_cache_mode,
                       pages={rid: _pages_to_admit(n, page) for rid, n in tokens.items()},
                       finished=tuple(rid for rid, r in reqs.items() if r.finished()))
    if unfinished or pending:
        trace.unjudged["pool-accounting"] = f"requests unfinished at step {trace.steps_run}: the pools are not judged"
    else:
        trace.pool_end = pool_snapshot(env)


def _record_cache(env, trace: Trace, step: int, reqs: dict, seen: dict) -> None:
    """A CacheCheck for each tree node whose Mamba slot or content is new since last recorded (a wrong value
    persists until one of the two changes, so the first step it shows is kept)."""
    seqs = {rid: list(r.origin_input_ids) + list(r.output_ids) for rid, r in reqs.items()}
    from harness.sglang.env import tree_values

    for nid, path, slot in tree_values(env, seqs.values()):
        state = env.io.read(slot)
        if seen.get(nid) == (slot, state):
            continue
        seen[nid] = (slot, state)
        owner = next((rid for rid, seq in seqs.items() if seq[:len(path)] == path), None)
        if owner is None:
            raise HarnessError(f"step {step}: a radix-tree node holds a path no request's tokens start with")
        fps = trace.prefixes[owner]
        if len(fps) <= len(path):
            chain(fps, seqs[owner][len(fps) - 1:])
        trace.cache.append(CacheCheck(step, slot, len(path), owner, state, state))
