"""`replay(scenario, mutant)`: one scenario on SGLang's own scheduler-side code (harness/sglang/__init__.py says
what is SGLang's and what is mirrored), recorded as the project's `Trace` for `harness.oracles.judge`.

Recorded: a `Read` per request per extend/decode (the kernel's initial state), and after every step a `CacheCheck`
per radix-tree node holding a Mamba value that is new or changed (the node's path is the first tokens of some
request's sequence, its `prefix_owner`). `Trace.prefixes[rid]` are the fingerprints of the request's prompt then
its generated tokens. Not recorded (named in `Trace.unjudged`): allocator calls and rows (live-column), the pool
at the end (pool-accounting) and the run end (liveness).
"""

from __future__ import annotations

import importlib.metadata

from harness.errors import HarnessError
from harness.scenario import Scenario
from harness.sglang import runtime
from harness.sglang.geometry import sglang_geometry
from harness.states import chain
from harness.trace import CacheCheck, Trace

UNJUDGED = {
    "live-column": "the SGLang wing records no block-table rows",
    "pool-accounting": "the SGLang wing does not snapshot SGLang's pools at the end",
    "liveness": "the SGLang wing's pools are fixed and generous; SGLang's run end is not judged",
}


def replay(scenario: Scenario, mutant: str | None = None) -> Trace:
    """Replay `scenario` with the wing's patches (and planted bug) on, always undone. BadInput for what the wing
    cannot express or an unknown mutant, before SGLang is imported."""
    geom = sglang_geometry(scenario)
    undo = runtime.patched(geom.page, mutant)
    try:
        from harness.sglang.env import build
        from harness.sglang.scheduler import MiniScheduler

        trace = Trace(vllm_version=f"sglang {importlib.metadata.version('sglang')}", mutant=mutant,
                      vllm_kind="sglang", unjudged=dict(UNJUDGED))
        env = build(geom)
        _run(scenario, env, MiniScheduler(env), trace)
        return trace
    finally:
        undo()


def _run(scenario: Scenario, env, sched, trace: Trace) -> None:
    from harness.sglang.scheduler import make_req

    prompts = scenario.prompt_tokens()
    pending = sorted(scenario.requests, key=lambda r: r.arrival_step)
    reqs, seen = {}, {}
    for step in range(scenario.max_steps):
        for spec in [s for s in pending if s.arrival_step <= step]:
            reqs[spec.id] = make_req(spec.id, prompts[spec.id], spec.max_tokens)
            trace.prefixes[spec.id] = chain([0], prompts[spec.id])
            trace.prompt_tokens[spec.id] = len(prompts[spec.id])
            sched.waiting_queue.append(reqs[spec.id])
            pending.remove(spec)
        batch = sched.get_next_batch_to_run()
        if batch is None:
            if not pending and not sched.waiting_queue and sched.chunked_req is None:
                break
            continue
        sched.process_batch_result(batch, sched.run_batch(batch, trace, step))
        sched.last_batch = batch
        trace.steps_run = step + 1
        _record_cache(env, trace, step, reqs, seen)
    unfinished = sorted(rid for rid, r in reqs.items() if not r.finished()) + [s.id for s in pending]
    if unfinished:
        trace.unjudged["liveness"] += f" (unfinished at step {trace.steps_run}: {', '.join(unfinished)})"


def _record_cache(env, trace: Trace, step: int, reqs: dict, seen: dict) -> None:
    """A CacheCheck for each tree node whose Mamba slot or content is new since last recorded (a wrong value
    persists until one of the two changes, so the first step it shows is kept)."""
    seqs = {rid: list(r.origin_input_ids) + list(r.output_ids) for rid, r in reqs.items()}
    from harness.sglang.env import tree_values

    for nid, path, slot in tree_values(env):
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
