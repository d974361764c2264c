"""Exact oracles: pure functions of a recorded Trace that return Findings.

1. live-column   every block-table column the worker reads (pre-copy source) or writes this step names
                 the same physical block in core and worker (stale columns below the window are legal);
2. provenance    every state the worker reads holds exactly the prefix it is meant to summarize;
3. cache         after every step, every Mamba-group prefix-cache key resolves to a block holding the
                 state of the prefix that key names;
4. pool          at the end every block is back in the free queue once, no ref count is left; after every
                 step every prefix-cache key maps to a block holding it as its primary hash or as an alias
                 beside one (the pool's own rule for removing a block's keys);
5. exception     vLLM raised at some step;
6. retention     (sparse prefix-cache retention) a prefill chunk that ends where vLLM keeps a state (a
                 replay boundary, a shared-prefix junction, a multiple of the interval) leaves that state in the
                 prefix cache: a silent hit-rate loss otherwise;
7. liveness      the run stops with arrived requests unfinished (nothing scheduled and nothing left to change
                 it, or the step limit reached after more idle steps than the longest load could explain)
                 while the pool could hold each of them on its own: vLLM would hang there; or, by witness
                 (`witness_liveness`, harness/witness.py), while stock vLLM (or the unpatched tree) finishes them
                 in the same scenario and pool;
8. hit-limit     (engine tier, 0.34+) a request with a prefix-cache hit limit L (prompt logprobs from token L)
                 is admitted with at most L tokens read from the prefix cache or a connector;
9. output        (model tier) every generated token's logits match the uncached reference within
                 LOGIT_TOLERANCES[dtype] and every token is the reference's greedy choice; a divergence is
                 classified by symptom: repeat (the cached run copies an earlier span verbatim where the
                 reference does not), garbage (non-finite logits, or an error wider than the reference
                 logits' whole range), drift (anything else).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

from harness.trace import Trace

MAX_PER_ORACLE = 5


@dataclass
class Finding:
    oracle: str
    step: int
    request: str | None
    group: int | None
    columns: list[int]
    expected: str
    actual: str
    detail: str
    signature: str
    excerpt: list = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    def headline(self) -> str:
        where = f"step {self.step}" + (f", request {self.request}" if self.request else "")
        where += f", group {self.group}" if self.group is not None else ""
        cols = f", columns {self.columns}" if self.columns else ""
        return f"[{self.oracle}] {where}{cols}: expected {self.expected}; actual {self.actual}"


def live_columns(trace: Trace) -> list[Finding]:
    out = []
    for rv in trace.rows:
        bad = [c for c in rv.live_columns
               if _at(rv.worker_row, c) != _at(rv.core_row, c)]
        if bad:
            out.append(Finding(
                "live-column", rv.step, rv.request, rv.group, bad,
                expected=f"core row {rv.core_row}", actual=f"worker row {rv.worker_row}",
                detail=(f"{rv.kind} request, num_computed={rv.num_computed}, scheduled={rv.num_scheduled}, "
                        f"prev column {rv.prev}, running column {rv.curr}: worker uses block(s) "
                        f"{[_at(rv.worker_row, c) for c in bad]} where the core has {[_at(rv.core_row, c) for c in bad]}"),
                signature=f"live-column:{rv.kind}",
                excerpt=trace.excerpt(rv.step, rv.request)))
    return out


def provenance(trace: Trace) -> list[Finding]:
    """A state the worker read (a pre-copy source, a kernel's initial state, a post-copy source) must be the
    state of the prefix it runs on: the first n tokens it fed that request (`Read.fed`)."""
    out = []
    for rd in trace.reads:
        if rd.conv == rd.fed and rd.ssm == rd.fed:
            continue
        out.append(Finding(
            "provenance", rd.step, rd.request, rd.group, [rd.column],
            expected=f"state of {trace.name(rd.fed)}",
            actual=f"conv {trace.name(rd.conv)}, ssm {trace.name(rd.ssm)} (block {rd.block})",
            detail=f"{rd.what} read at column {rd.column}",
            signature=f"provenance:{rd.what}",
            excerpt=trace.excerpt(rd.step, rd.request)))
    return out


def key_state(trace: Trace, cc) -> tuple[int, int]:
    """The state a prefix-cache key promises: that of the prefix it names (its owner's first tokens)."""
    return cc.prefix_tokens, trace.prefixes[cc.prefix_owner][cc.prefix_tokens]


def cache_integrity(trace: Trace) -> list[Finding]:
    out, seen = [], set()
    for cc in trace.cache:
        want = key_state(trace, cc)
        if cc.conv == want and cc.ssm == want:
            continue
        key = (cc.block, cc.prefix_tokens, cc.prefix_owner)
        if key in seen:
            continue
        seen.add(key)
        out.append(Finding(
            "cache-integrity", cc.step, None, 1, [],
            expected=f"block {cc.block} holds the state of {cc.prefix_owner}[:{cc.prefix_tokens}]",
            actual=f"it holds conv {trace.name(cc.conv)}, ssm {trace.name(cc.ssm)}",
            detail=f"prefix-cache key for {cc.prefix_tokens} tokens resolves to block {cc.block}",
            signature="cache-integrity",
            excerpt=trace.excerpt(cc.step)))
    return out


def pool_accounting(trace: Trace) -> list[Finding]:
    keys = _key_rule(trace)
    pool = trace.pool_end
    if pool is None:  # trace.unjudged says why
        return keys
    problems = _slot_pool_problems(pool["slot_pools"]) if "slot_pools" in pool else _block_pool_problems(pool)
    return keys + [
        Finding("pool-accounting", trace.steps_run, None, None, [], expected="every block free once, no refs",
                actual=p, detail=p, signature="pool-accounting") for p in problems]


def _block_pool_problems(pool: dict) -> list[str]:
    """vLLM's block pool at the end (harness.vllm_adapter.Allocator.pool_snapshot)."""
    problems = []
    if pool["live_requests"]:
        problems.append(f"requests still hold blocks: {pool['live_requests']}")
    if pool["num_free"] != pool["num_blocks"] - 1:
        problems.append(f"{pool['num_free']} free blocks, expected {pool['num_blocks'] - 1} (all but the null block)")
    if pool["free_cycle"]:
        problems.append(f"free queue visits block(s) {pool['free_cycle']} twice (double free)")
    elif len(pool["free_walk"]) != pool["num_free"]:
        problems.append(f"free queue walk finds {len(pool['free_walk'])} blocks, counter says {pool['num_free']}")
    if pool["ref_cnt"]:
        problems.append(f"non-zero ref counts left: {pool['ref_cnt']}")
    return problems


def _slot_pool_problems(pools: dict) -> list[str]:
    """Free-list pools at the end, each {size, free, cached, locked} (the SGLang wing's KV pages, Mamba slots and
    request rows: harness/sglang/env.py pool_snapshot): ids 1..size, each free once or held by the prefix cache,
    none both, none lost, no lock left."""
    problems = []
    for name, pool in pools.items():
        free, cached = pool["free"], set(pool["cached"])
        twice = sorted(i for i, n in Counter(free).items() if n > 1)
        if twice:
            problems.append(f"{name}: free list holds {twice[:8]} twice (double free)")
        both = sorted(cached & set(free))
        if both:
            problems.append(f"{name}: {both[:8]} both free and held by the prefix cache")
        lost = sorted(set(range(1, pool["size"] + 1)) - cached - set(free))
        if lost:
            problems.append(f"{name}: {len(lost)} of {pool['size']} neither free nor cached at the end (leaked): "
                            f"{lost[:8]}")
        if pool["locked"]:
            problems.append(f"{name}: {pool['locked']} still locked by the prefix cache at the end")
    return problems


def _key_rule(trace: Trace) -> list[Finding]:
    """After every step each prefix-cache key maps to a block that holds it as its primary hash or as an alias,
    and aliases sit only beside a primary: the pool removes a block's keys through its primary (vLLM 0.34.0
    block_pool.py:605-623), so a key outside the rule outlives the block's contents."""
    return [Finding("pool-accounting", step, None, None, [], expected="every prefix-cache key held by its block "
                    "as its primary hash or an alias beside one", actual=what,
                    detail=f"a key for {owner or 'a prefix no request hashed'} maps to block {block}: {what}",
                    signature="pool-accounting:cache-key", excerpt=trace.excerpt(step))
            for step, block, what, owner in trace.key_breaks]


def hit_limit(trace: Trace) -> list[Finding]:
    """A request with a prefix-cache hit limit L (prompt logprobs from token L) starts every admission from at most
    L computed tokens: vLLM bounds its local lookup by L and reads no external KV for it (v1/request.py:352-362,
    kv_cache_manager.py:324, scheduler.py:1182-1183 in 0.34.0). Past L the user's prompt logprobs lose rows."""
    return [Finding("hit-limit", step, rid, None, [], expected=f"at most {limit} tokens read from the caches",
                    actual=f"admitted with {computed} computed tokens",
                    detail=f"request {rid} asks for prompt logprobs from token {limit} (prefix_cache_hit_limit "
                           f"{limit}) and starts from {computed} cached or loaded tokens",
                    signature="hit-limit", excerpt=trace.excerpt(step, rid))
            for step, rid, limit, computed in trace.hit_limited if computed > limit]


def reservations(trace: Trace) -> list[Finding]:
    """vLLM 0.34.0's parked async loads (scheduler.py:3566-3585, 2842-2850): the blocks reserved for parked loads
    return to zero once no request waits (a parked load keeps its reservation until it is scheduled), and loads
    holding blocks (loading, or aborted with the transfer in flight) never exceed --max-num-inflight-kv-loads. The
    first step each rule breaks."""
    out = []
    leak = next(((step, reserved) for step, waiting, reserved, _, _ in trace.reservations
                 if waiting == 0 and reserved != 0), None)
    if leak:
        out.append(Finding("reservations", leak[0], None, None, [], expected="no blocks reserved with no request waiting",
                           actual=f"{leak[1]} block(s) reserved", detail="the scheduler's reservation for parked async "
                           "loads outlives them: admission of later async loads sees the pool fuller than it is",
                           signature="reservations:leak", excerpt=trace.excerpt(leak[0], None)))
    over = next(((step, holding, cap) for step, _, _, holding, cap in trace.reservations
                 if cap is not None and holding > cap), None)
    if over:
        out.append(Finding("reservations", over[0], None, None, [], expected=f"at most {over[2]} loads holding blocks",
                           actual=f"{over[1]} loads holding blocks", detail="more async KV loads hold blocks than "
                           "--max-num-inflight-kv-loads allows", signature="reservations:inflight-cap",
                           excerpt=trace.excerpt(over[0], None)))
    return out


def publication(trace: Trace) -> list[Finding]:
    """A Mamba state vLLM publishes while taking a step's output is final: `update_from_output` caches a request's
    blocks up to the tokens whose forwards have returned, `num_computed_tokens - num_in_flight_tokens`
    (scheduler.py:2449-2470 in 0.34.0), so no key names a state a forward still in flight is writing. A key
    published there whose page the in-flight forward wrote breaks that rule, even where the state is right by the
    time a hit reads it (the simulated forward writes at once; on a GPU it is still running)."""
    return [Finding("publication", step, None, None, [], expected="keys published after a step name states of "
                    "forwards that have returned", actual=f"block {block} keyed as {prefix} holds the state of step "
                    f"{writer}'s forward, still in flight", detail=f"update_from_output of step {step} published "
                    f"{prefix} on block {block}, whose state the forward of step {writer} writes",
                    signature="publication:in-flight", excerpt=trace.excerpt(step))
            for step, block, prefix, writer in trace.published_in_flight]


def vllm_exception(trace: Trace) -> list[Finding]:
    e = trace.exception
    if e is None:
        return []
    return [Finding("vllm-exception", e.step, e.request, None, [], expected="no exception",
                    actual=e.error, detail=f"{e.call} raised at {e.site}", signature=f"vllm-exception:{e.site}",
                    excerpt=trace.excerpt(e.step, e.request))]


def replay_boundaries(prompt_tokens: int, block: int, eagle_block_drop: bool) -> tuple[int, ...]:
    """Where a later request replaying a prompt can resume, block-aligned: a resend is capped at prompt - 1 (its
    last token is recomputed for logits); with EAGLE's block drop both the resend's and a longer sibling's hit land
    a block lower. Written from vLLM 0.33.0's contract (kv_cache_coordinator.py:65-89 `replay_boundaries`, aligned
    as `reachable_block_mask` does at single_type_kv_cache_manager.py:1596-1602), not from its code."""
    resend = (prompt_tokens - 1) // block * block
    if not eagle_block_drop:
        return (resend,) if resend else ()
    return tuple(sorted({b - block for b in (resend, prompt_tokens // block * block) if b > block}))


def retained_positions(trace: Trace, request: str, step: int) -> set[int]:
    """Where sparse retention keeps a request's prompt states (vLLM 0.33.0's contract, `reachable_block_mask`,
    single_type_kv_cache_manager.py:1549-1604, and `cache_blocks`' reachable boundaries, :511-520): its replay
    boundaries; the shared-prefix junction its latest lookup by `step` found, floored to the block (a block lower
    too with EAGLE's block drop); with an interval N wider than the block, every multiple of N in the prompt."""
    ret = trace.retention
    block, prompt = ret.mamba_block, trace.prompt_tokens.get(request, 0)
    out = set(replay_boundaries(prompt, block, ret.eagle_block_drop))
    # the junction the request holds at `step`: a later lookup (a request deferred, then admitted; a resumed one)
    # replaces the one before, and `cache_blocks` reads the request's current value
    current = [junction for seen, junction in trace.junctions.get(request, ()) if seen <= step]
    if current:
        floored = current[-1] // block * block
        out |= {floored, floored - block} if ret.eagle_block_drop else {floored}
    if ret.interval > block:
        out |= set(range(ret.interval, prompt, ret.interval))
    # inside the prompt: the state at its end is the running state, which a prompt's chunk does not publish (a
    # junction can lie at the prompt's end, where the whole prompt is shared)
    return {p for p in out if 0 < p < prompt}


def retention_checks(trace: Trace):
    """(row, chunk end) for every prefill chunk that ends on a position sparse retention keeps, the first time per
    request and position: what the retention oracle judges (and an emitted regression asserts, harness.regression)."""
    if trace.retention is None:
        return
    seen = set()
    for rv in trace.rows:
        end = rv.num_computed + rv.num_scheduled
        if (rv.request in trace.prefixes and (rv.request, end) not in seen
                and end in retained_positions(trace, rv.request, rv.step)):
            seen.add((rv.request, end))
            yield rv, end


def retention(trace: Trace) -> list[Finding]:
    """Under sparse retention vLLM caches a Mamba state only at semantic checkpoints (`retained_positions`).
    Judged where the state certainly exists: a prefill chunk of that request ended exactly on the position (align
    mode writes a state at every chunk end), so a key for that prefix must have been cached by the end of that
    step, by this request or an earlier one with the same prefix. The request holds the block through the step,
    so eviction cannot explain a missing key."""
    ret = trace.retention
    if ret is None:
        return []
    cached = {}  # state -> first step a key named it
    for cc in trace.cache:
        cached.setdefault(key_state(trace, cc), cc.step)
    out = []
    for rv, end in retention_checks(trace):
        if cached.get((end, trace.prefixes[rv.request][end]), rv.step + 1) <= rv.step:
            continue
        kind = "replay-boundary" if end in replay_boundaries(trace.prompt_tokens[rv.request], ret.mamba_block,
                                                              ret.eagle_block_drop) else "checkpoint"
        out.append(Finding(
            "retention", rv.step, rv.request, rv.group, [],
            expected=f"the state of {rv.request}[:{end}] cached: a {kind.replace('-', ' ')} of its "
                     f"{trace.prompt_tokens[rv.request]}-token prompt, kept under sparse retention (interval "
                     f"{ret.interval})",
            actual=f"no prefix-cache key names {rv.request}[:{end}] by the end of step {rv.step}",
            detail=f"prefill chunk {rv.num_computed}..{end} ended on it; a request resuming there misses the Mamba "
                   "cache",
            signature=f"retention:{kind}", excerpt=trace.excerpt(rv.step, rv.request)))
    return out


IDLE_SLACK = 2  # idle steps a run may end with, beyond its longest load, and still be making progress


def livelock_bound(end) -> int:
    """The most trailing steps a run may spend without any request computing past its high-water mark and still
    be making progress: every request recomputing all it could ever hold, one token a step (a chunk computes at
    least one), after the longest load and IDLE_SLACK. Generous on purpose: a preemption thrash that never ends
    outlasts any bound at the step limit, a slow recovery must never be judged one."""
    return sum(end.tokens.values()) + end.longest_load + IDLE_SLACK


def how_it_ended(end) -> tuple[str, str] | None:
    """(kind, how) when a run that ended with requests unfinished is a liveness finding, None when it is not:
    stuck, idle at the step limit, or a livelock (steps kept scheduling, only recomputation, past
    `livelock_bound`)."""
    if end.reason == "stuck":
        return "stuck", "nothing was scheduled and nothing left can change that"
    if end.idle_steps > end.longest_load + IDLE_SLACK:
        return "step-limit", f"the step limit was reached after {end.idle_steps} steps that scheduled nothing"
    if end.stalled_steps > livelock_bound(end):
        return "livelock", (f"the step limit was reached after {end.stalled_steps} steps in which no request computed past "
                f"what it had computed before (preempted and recomputed over and over; at most "
                f"{livelock_bound(end)} such steps recover)")
    return None


def liveness(trace: Trace) -> list[Finding]:
    """A request vLLM never finishes although the pool could hold it. `stuck`: the step loop saw nothing
    scheduled, no load in flight and no arrival or event to come, so vLLM would spin there forever. At the step
    limit, idle steps count only beyond the longest external load (a load in flight keeps a request waiting)
    plus IDLE_SLACK (the step the connector reports the load and the one async scheduling lags by); a run that
    kept scheduling but only recomputed (a preemption thrash) counts beyond `livelock_bound`. A request larger
    than the pool is one vLLM can never admit: the scenario is refused (harness.scenario), never judged."""
    end = trace.end
    if end is None or end.reason == "done" or not end.unfinished:
        return []
    ended = how_it_ended(end)
    if ended is None:
        return []
    kind, how = ended
    usable = end.num_blocks - 1  # all but the null block
    needs = {rid: end.blocks_to_hold(rid) for rid in end.unfinished}
    if max(needs.values()) > usable:
        return []
    first = min(end.unfinished)
    return [Finding("liveness", end.step, first, None, [],
                    expected=f"request(s) {', '.join(sorted(end.unfinished))} admitted and finished: each needs at most "
                             f"{max(needs.values())} of the pool's {usable} usable blocks",
                    actual=f"the run stops at step {end.step} with them unfinished "
                           f"({', '.join(f'{r}: {p}' for r, p in sorted(end.unfinished.items()))})",
                    detail=how, signature=f"liveness:{kind}", excerpt=trace.excerpt(end.step - 1, first))]


def witness_liveness(trace: Trace, witness: Trace | None) -> list[Finding]:
    """(differential) A request the witness run finishes (stock vLLM, or the unpatched tree, on the same scenario
    and pool: harness/witness.py) that this run leaves waiting forever (stuck, idle past its loads, or a livelock:
    `how_it_ended`). `liveness` judges a stall only where the pool could hold every stalled request at its largest;
    between the fewest blocks a request needs and the most it may hold it cannot tell a hang from a pool too small,
    and the witness can: it served the request in that pool."""
    end = trace.end
    wend = witness.end if witness is not None and witness.exception is None else None
    if end is None or wend is None or end.reason == "done" or not end.unfinished or liveness(trace):
        return []
    ended = how_it_ended(end)
    stalled = sorted(r for r in end.unfinished if r in wend.finished)
    if ended is None or not stalled:
        return []
    kind, how = ended
    who = f"vLLM {witness.vllm_version}" + (f" ({witness.vllm_source})" if witness.vllm_kind not in (None, "installed")
                                            else "")
    return [Finding("liveness", end.step, stalled[0], None, [],
                    expected=f"request(s) {', '.join(stalled)} finished, as the witness ({who}"
                             f"{', fixes ' + '+'.join(witness.fixes) if witness.fixes else ', no fixes'}) finishes "
                             f"them in the same scenario and pool by step {wend.step}",
                    actual=f"the run stops at step {end.step} with them unfinished "
                           f"({', '.join(f'{r}: {end.unfinished[r]}' for r in stalled)})",
                    detail=f"{how} ({kind}); the pool could not hold each at its largest, so only the witness tells "
                           "a hang from a pool too small",
                    signature="liveness:witness", excerpt=trace.excerpt(end.step - 1, stalled[0]))]


# float64 CPU: chunked/recurrent cached runs differ from the one-chunk reference by at most 1.02e-14
# (measured: `hybrid-harness sweep --tier model --count 300`, docs/model-tier.md); seven orders of magnitude of headroom.
# float32 (the GPU path): 2.4e-6 measured with the torch kernels on CPU; Triton's TF32 dots are coarser.
LOGIT_TOLERANCES = {"float64": 1e-7, "float32": 1e-3}
LOGIT_TOLERANCE = LOGIT_TOLERANCES["float64"]
REPEAT_MIN_SPAN = 2


def outputs(trace: Trace) -> list[Finding]:
    out = []
    for rec in trace.outputs or ():
        tol = rec.tolerance
        first_logit, first_token = first_divergence(rec)
        if first_logit is None and first_token is None:
            continue
        i = min(x for x in (first_logit, first_token) if x is not None)
        symptom = symptom_at(rec, first_token)
        j = rec.prompt_len + i
        got = rec.tokens[j:]
        if first_token is None:
            expected = f"logits within {tol:g} of the reference"
            actual = f"logits off by {rec.max_diff[i]:.3g}, tokens {got} still the reference's ({symptom})"
        else:
            expected = f"reference tokens {reference_output(rec)[i:]}"
            actual = f"cached tokens {got} ({symptom})"
        out.append(Finding(
            "output", rec.steps[i], rec.request, None, [], expected=expected, actual=actual,
            detail=(f"first divergence at token {j} (output {i}): max |logit diff| {rec.max_diff[i]:.3g} "
                    f"(tolerance {tol:g}); first divergent token: "
                    f"{'none' if first_token is None else rec.prompt_len + first_token}; "
                    f"max |logit diff| over the output {max(rec.max_diff):.3g}"),
            signature=f"output:{symptom}", excerpt=trace.excerpt(rec.steps[i], rec.request)))
    return out


def first_token_divergence(rec) -> int | None:
    """First output whose token is not the reference's greedy choice by more than the tolerance."""
    for i, (top, margin) in enumerate(zip(rec.ref_top, rec.margin)):
        if top != rec.tokens[rec.prompt_len + i] and not margin <= rec.tolerance:
            return i
    return None


def first_divergence(rec) -> tuple[int | None, int | None]:
    """(first output whose logits leave the tolerance, first output whose token is not the reference's)."""
    first_logit = next((i for i, d in enumerate(rec.max_diff) if not d <= rec.tolerance), None)
    return first_logit, first_token_divergence(rec)


def reference_output(rec) -> list[int]:
    """What the uncached reference generates in the place of the cached run's output."""
    first_token = first_token_divergence(rec)
    if first_token is None:
        return rec.tokens[rec.prompt_len:]
    return rec.tokens[rec.prompt_len:rec.prompt_len + first_token] + rec.ref_continuation


def output_symptom(rec) -> str | None:
    """None when the output matches the reference, else repeat | garbage | drift."""
    first_logit, first_token = first_divergence(rec)
    return None if first_logit is None and first_token is None else symptom_at(rec, first_token)


def symptom_at(rec, first_token: int | None) -> str:
    if not rec.finite:
        return "garbage"
    if first_token is None:
        return "drift"  # logits moved, tokens not (yet)
    j0 = rec.prompt_len + first_token
    got, ref = rec.tokens[j0:], rec.ref_continuation
    before = rec.tokens[:j0]
    # repeat: the cached continuation copies earlier text verbatim for longer than the reference's own
    # continuation does (text always shares short spans with its context; only the excess is a symptom)
    copied = max((_copied_span(before + got[:i], got[i:]) for i in range(len(got))), default=0)
    ref_copied = max((_copied_span(before + ref[:i], ref[i:]) for i in range(len(ref))), default=0)
    if copied >= REPEAT_MIN_SPAN and copied > ref_copied:
        return "repeat"
    if rec.max_diff[first_token] > rec.ref_range[first_token]:
        return "garbage"
    return "drift"


def _copied_span(before: list[int], after: list[int]) -> int:
    """Length of the longest prefix of `after` that occurs verbatim in `before`."""
    best = 0
    for start in range(len(before)):
        m = 0
        while m < len(after) and start + m < len(before) and before[start + m] == after[m]:
            m += 1
        best = max(best, m)
    return best


def output_summary(trace: Trace) -> dict:
    """Generations, diverged ones, repeats, and the largest logit difference (model tier)."""
    recs = trace.outputs or []
    symptoms = [output_symptom(r) for r in recs]
    return {"generations": len(recs), "diverged": sum(s is not None for s in symptoms),
            "repeat": symptoms.count("repeat"), "garbage": symptoms.count("garbage"),
            "drift": symptoms.count("drift"),
            "max_logit_diff": max((d for r in recs for d in r.max_diff), default=0.0)}


def merge_output_summaries(total: dict | None, summary: dict) -> dict:
    """Add one summary to a running total (counts add up, the largest logit difference is kept)."""
    out = dict(total or {})
    for key, value in summary.items():
        out[key] = max(out.get(key, value), value) if key == "max_logit_diff" else out.get(key, 0) + value
    return out


def describe_outputs(summary: dict) -> str:
    """'N generations, D diverged from the uncached reference, repeat rate R/N (…)', as reports print it."""
    n = summary["generations"]
    text = (f"{n} generations, {summary['diverged']} diverged from the uncached reference, repeat rate "
            f"{summary['repeat']}/{n} (garbage {summary['garbage']}, drift {summary['drift']})")
    if "max_logit_diff" in summary:
        text += f"; max |logit diff| {summary['max_logit_diff']:.3g}"
    return text


ORACLES = {
    "live-column": live_columns,
    "provenance": provenance,
    "cache-integrity": cache_integrity,
    "pool-accounting": pool_accounting,
    "vllm-exception": vllm_exception,
    "retention": retention,
    "liveness": liveness,
    "hit-limit": hit_limit,
    "reservations": reservations,
    "publication": publication,
    "output": outputs,
}


def judge(trace: Trace) -> list[Finding]:
    findings = []
    for oracle in ORACLES.values():
        findings.extend(oracle(trace)[:MAX_PER_ORACLE])
    return findings


def _at(row: list[int], column: int) -> int | None:
    return row[column] if 0 <= column < len(row) else None
