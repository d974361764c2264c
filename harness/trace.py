"""The recorded history of one replay: what the driver called, what the worker shadow read and wrote.

Oracles are pure functions of a `Trace`. Records are plain slotted dataclasses so that recording costs
little next to the allocator calls it records.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

from harness.states import State


@dataclass(slots=True)
class Call:
    """One KVCacheManager call the driver made, as the Scheduler makes it."""

    step: int
    request: str
    name: str
    args: dict
    returned: object
    core_after: tuple | None


@dataclass(slots=True)
class Read:
    """A state the worker consumed: a pre-copy source or a kernel's initial state. Observations only: what the
    worker read (its column, block and the states there) and `fed`, the prefix it ran that state on: the first
    n tokens of the sequence it fed this request (n: the computed count the kernel was given, or the accepted
    end a post-copy moves), fingerprinted. What the read should have held is the provenance oracle's call."""

    step: int
    request: str
    what: str  # "precopy" | "initial" | "postcopy"
    group: int
    column: int
    block: int
    conv: State | None
    ssm: State | None
    fed: State


@dataclass(slots=True)
class RowView:
    """The worker row and the core table of one request and group at one step, with the live columns."""

    step: int
    request: str
    group: int
    kind: str  # NEW | RUNNING | RESUMED
    num_computed: int
    num_scheduled: int
    prev: int
    curr: int
    live_columns: list[int]
    worker_row: list[int]
    core_row: list[int]


@dataclass(slots=True)
class CacheCheck:
    """After a step: one prefix-cache key of the Mamba group, the prefix it names (its first `prefix_tokens`
    tokens of request `prefix_owner`'s) and what its block holds; the state it should hold is the oracles' call
    (`oracles.key_state`)."""

    step: int
    block: int
    prefix_tokens: int
    prefix_owner: str
    conv: State | None
    ssm: State | None


@dataclass(slots=True)
class VllmException:
    step: int
    request: str
    call: str
    error: str
    site: str


@dataclass(slots=True)
class RunEnd:
    """How the step loop ended, for the liveness oracle: `done` (every request finished), `stuck` (nothing was
    scheduled and nothing can change: no load in flight, no arrival or event to come; vLLM would spin there
    forever) or `step-limit` (the scenario's max_steps ran out). The pool and each unfinished request's
    size are recorded so the oracle computes whether the pool could hold it."""

    reason: str
    step: int
    idle_steps: int  # the trailing steps that scheduled nothing
    unfinished: dict[str, str]  # request -> phase (waiting, loading, running, ...) of every arrived, unfinished one
    tokens: dict[str, int]  # request -> prompt + max_tokens (the most it ever holds)
    longest_load: int  # the scenario's longest external load (steps)
    num_blocks: int
    block_sizes: tuple[int, int]  # (attention, Mamba)
    lookahead: int  # speculative tokens (K)
    groups: tuple[int, int] = (1, 1)  # KV cache groups: (attention, Mamba); a real model's are several
    mamba_cache_mode: str = "align"
    # the trailing steps in which no request computed past its own earlier high-water mark: steps that schedule
    # only recomputation (preempted requests catching up) count, so a preemption thrash that never finishes shows
    stalled_steps: int = 0
    # groups holding every block of a request's tokens at their own block (extract_hidden_states's, engine tier)
    other_blocks: tuple[int, ...] = ()
    # the requests that arrived and finished (or were aborted by the scenario): what a liveness witness finished
    finished: tuple[str, ...] = ()
    # an engine whose pool is counted in its own units (the SGLang wing: the KV pages a request holds at its
    # largest, num_blocks - 1 pages usable); None = vLLM's blocks_to_hold
    pages: dict[str, int] | None = None

    def as_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> RunEnd:
        """The inverse of as_json: JSON's lists back to the tuples the fields hold."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in doc.items()})

    def blocks_to_hold(self, request: str) -> int:
        if self.pages is not None:
            return self.pages[request]
        tokens = self.tokens[request] + self.lookahead
        return blocks_to_hold(self.tokens[request], self.block_sizes, self.lookahead, self.groups,
                              self.mamba_cache_mode) + sum(-(-tokens // b) for b in self.other_blocks)


@dataclass(frozen=True, slots=True)
class Retention:
    """A geometry under sparse prefix-cache retention (CacheConfig.prefix_cache_retention_interval set, align
    mode), as the retention oracle needs it."""

    interval: int
    mamba_block: int
    eagle_block_drop: bool

    @staticmethod
    def of(geometry, eagle_block_drop: bool | None = None) -> Retention | None:
        """`eagle_block_drop`: what the scheduler resolved, where it decides (vLLM 0.34.0 turns EAGLE's block drop
        off under lookahead block hashes, scheduler.py:342-345); else the geometry's."""
        if geometry.prefix_cache_retention_interval is None or geometry.mamba_cache_mode != "align":
            return None
        drop = geometry.eagle_block_drop if eagle_block_drop is None else eagle_block_drop
        return Retention(geometry.prefix_cache_retention_interval, geometry.mamba_block_size, drop)


@dataclass
class Trace:
    vllm_version: str
    mutant: str | None
    # where that vLLM came from (harness/release.py VllmSource): its directory, kind and a git checkout's commit
    vllm_source: str | None = None
    vllm_kind: str | None = None
    vllm_commit: str | None = None
    fixes: tuple[str, ...] = ()  # the known issues whose fixes the replay ran with (set where a reader needs them)
    calls: list[Call] = field(default_factory=list)
    rows: list[RowView] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    cache: list[CacheCheck] = field(default_factory=list)
    copies: list[tuple[int, int, int]] = field(default_factory=list)  # (step, src, dst)
    exception: VllmException | None = None
    pool_end: dict | None = None
    # tokens each request's first admission started from: what the prefix cache (and a connector) served it
    served: dict[str, int] = field(default_factory=dict)
    unjudged: dict = field(default_factory=dict)  # oracle -> why it could not judge this trace
    steps_run: int = 0
    prefixes: dict[str, list[int]] = field(default_factory=dict)  # request -> prefix fingerprints (fps[n])
    prompt_tokens: dict[str, int] = field(default_factory=dict)  # request -> its prompt's length
    # request -> (step, shared-prefix junction) as vLLM's prefix lookup set it (Request.shared_prefix_boundary, 0.30+)
    junctions: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    outputs: list | None = None  # model tier: one harness.model_tier.OutputRecord per generating request
    end: RunEnd | None = None  # how the step loop ended (None: vLLM raised)
    # the retention oracle's facts of the geometry: sparse prefix-cache retention (None: dense), the Mamba block,
    # EAGLE's block drop (its replay boundaries lie a block lower)
    retention: Retention | None = None
    # (step, block, what is wrong, the prefix the key names or None) for every prefix-cache key that broke the pool's
    # key rule after a step (vllm_adapter.Allocator.cache_key_breaks), the first step each showed
    key_breaks: list[tuple[int, int, str, str | None]] = field(default_factory=list)
    # (step, request, its prefix-cache hit limit, the computed tokens it was admitted with) each time a request with a
    # hit limit (Request.prefix_cache_hit_limit, 0.34+) is scheduled as new (engine tier)
    hit_limited: list[tuple[int, str, int, int]] = field(default_factory=list)
    # (step, requests not yet running, blocks the scheduler reserves for parked loads, loads holding blocks, the
    # in-flight load cap)
    # after each schedule() of a scheduler that parks async loads (0.34+, engine tier: `reservations` oracle)
    reservations: list[tuple[int, int, int, int, int | None]] = field(default_factory=list)
    # (step, block, the prefix its new key names, the step whose forward wrote its state): a Mamba key the scheduler
    # published while taking a step's output (update_from_output, 0.33+: the finalized states after sampled steps)
    # whose state a forward still in flight wrote (engine tier, async scheduling: `publication` oracle)
    published_in_flight: list[tuple[int, int, str, int]] = field(default_factory=list)
    # tier e2e: the scale onto the CPU engine's grid, its block, and each connector load (request, tokens)
    e2e: dict | None = None

    def name(self, state: State | None) -> str:
        """'a[:14]' for the state of request a's first 14 tokens; drafts and unknown prefixes say so."""
        if state is None:
            return "garbage (never written)"
        n, fp = state
        if n == 0:
            return "zero state"
        for rid, fps in self.prefixes.items():
            if n < len(fps) and fps[n] == fp:
                return f"{rid}[:{n}]"
        return f"a {n}-token prefix no request has (tokens run on a wrong start state, or unverified drafts)"

    def excerpt(self, step: int, request: str | None = None, radius: int = 1) -> list[dict]:
        """The calls and rows around a step (for a finding), as JSON-ready dicts."""
        lo, hi = step - radius, step + radius
        out = []
        for c in self.calls:
            if lo <= c.step <= hi and (request is None or c.request == request):
                out.append({"call": asdict(c)})
        for r in self.rows:
            if lo <= r.step <= hi and (request is None or r.request == request):
                out.append({"row": asdict(r)})
        for s, src, dst in self.copies:
            if lo <= s <= hi:
                out.append({"copy": {"step": s, "src": src, "dst": dst}})
        return out


class CacheRecorder:
    """Records the cache-integrity inputs after each step: every (Mamba cache key, block) pair that is new
    or whose page was written since last recorded (a mismatch persists until one of the two changes, so
    the first step it shows is kept). Keys are named by the request and prefix length that first hashed
    them. Tier-neutral: give it the requests' block hashes, prefix fingerprints and the cached entries."""

    def __init__(self, trace: Trace, states, hash_block_size: int) -> None:
        self.trace, self.states, self.hb = trace, states, hash_block_size
        self.hash_owner: dict[bytes, tuple[str, int]] = {}
        self.hashes_named: dict[str, int] = {}
        self.checked: dict[tuple[bytes, int], int] = {}
        self.breaks_seen: set[tuple[bytes, int, str]] = set()

    def record(self, step: int, requests: dict[str, tuple[list, list[int]]], entries) -> None:
        """requests: id -> (vLLM block_hashes, prefix fingerprints); entries: (hash bytes, block) pairs."""
        from harness.errors import HarnessError

        for rid, (hashes, _) in requests.items():
            named = self.hashes_named.get(rid, 0)
            for k in range(named, len(hashes)):
                self.hash_owner.setdefault(bytes(hashes[k]), (rid, (k + 1) * self.hb))
            self.hashes_named[rid] = max(named, len(hashes))
        version, checked = self.states.version, self.checked
        for key in entries:
            h, block = key
            ver = version.get(block, 0)
            if checked.get(key) == ver:
                continue
            checked[key] = ver
            owner = self.hash_owner.get(h)
            if owner is None:
                raise HarnessError(f"step {step}: a Mamba cache key names no prefix the replay hashed")
            rid, n = owner
            conv, ssm = self.states.page(block)
            self.trace.cache.append(CacheCheck(step, block, n, rid, conv[0], ssm))

    def record_key_breaks(self, step: int, breaks) -> None:
        """breaks: (key bytes, block, what) of the keys that break the pool's key rule now; each kept once."""
        for key, block, what in breaks:
            if (key, block, what) in self.breaks_seen:
                continue
            self.breaks_seen.add((key, block, what))
            owner = next(((rid, n) for h, (rid, n) in self.hash_owner.items() if key.startswith(h)), None)
            self.trace.key_breaks.append((step, block, what, f"{owner[0]}[:{owner[1]}]" if owner else None))


def blocks_to_hold(tokens: int, block_sizes: tuple[int, int], lookahead: int, groups: tuple[int, int] = (1, 1),
                   mamba_cache_mode: str = "align") -> int:
    """The most blocks one request of `tokens` tokens (prompt + max_tokens) holds at once in align mode, all
    groups together, by the allocator's specification rather than its code (so an allocator that over-reserves
    is judged against it): the attention group holds every block of its tokens plus the lookahead
    (`cdiv(num_tokens, block_size)`, single_type_kv_cache_manager.py:176-215 in 0.33.0); the Mamba group holds at
    most its align-mode cap (single_type_kv_cache_manager.py:1779-1784): the running state's block, one for a
    partial hit's copy, one for a prefill checkpoint, and a block per speculative token; in mode "all" every
    block of its tokens, as attention, and one more. `groups`: how many attention and Mamba groups (each holds
    its own blocks)."""
    attn, mamba = block_sizes
    per_mamba = -(-(tokens + lookahead) // mamba) + 1 if mamba_cache_mode == "all" else 3 + lookahead
    return groups[0] * -(-(tokens + lookahead) // attn) + groups[1] * per_mamba


def blocks_at_least(tokens: int, block_sizes: tuple[int, int], groups: tuple[int, int] = (1, 1)) -> int:
    """The fewest blocks one request of `tokens` tokens needs to finish, by the same specification: every
    attention block of its tokens and the Mamba group's running-state block. A request needing more than the
    pool is one vLLM can never admit (harness.scenario refuses it); between this and `blocks_to_hold` the
    liveness oracle does not judge."""
    return groups[0] * -(-tokens // block_sizes[0]) + groups[1]


def largest_admissible(num_blocks: int, attn_block: int) -> int:
    """The most tokens one request may have for vLLM ever to admit it (`blocks_at_least` within the pool): past
    `largest_request`, only the liveness witness judges it (harness/witness.py)."""
    return (num_blocks - 2) * attn_block


def largest_request(num_blocks: int, block_size: int, lookahead: int) -> int:
    """The most tokens (prompt + max_tokens) one request may have for the pool to hold it (`blocks_to_hold`)."""
    return (num_blocks - 1 - 3 - lookahead) * block_size - lookahead


def run_end(sc, reason: str, step: int, idle: int, unfinished: dict[str, str],
            groups: tuple[int, int] = (1, 1), stalled: int = 0, other_blocks: tuple[int, ...] = ()) -> RunEnd:
    g = sc.geometry
    tokens = {r.id: r.prompt.num_tokens + r.max_tokens for r in sc.requests}
    loads = [r.external.load_steps for r in sc.requests if r.external is not None]
    finished = tuple(r.id for r in sc.requests if r.id not in unfinished and (reason == "done" or r.arrival_step < step))
    return RunEnd(reason, step, idle, unfinished, tokens, max(loads, default=0), g.num_blocks,
                  (g.attn_block_size, g.mamba_block_size), g.num_speculative_tokens, groups, g.mamba_cache_mode,
                  stalled, other_blocks, finished)


class VllmRaised(Exception):
    """vLLM raised during a replay (any tier): the replay ends and the exception becomes a finding."""

    def __init__(self, record: VllmException):
        self.record = record


@runtime_checkable
class Tier(Protocol):
    """The contract the shared step loop (`run_steps`) drives: the mirrored driver (harness/driver.py) and the
    engine driver (harness/engine/scheduler.py) both implement it. A tier owns its scheduler loop and its
    worker; the loop owns when to stop and how the run ended (`Trace.end`), and the oracles judge the trace."""

    sc: object  # the scenario
    step_idx: int
    trace: Trace
    alloc: object  # harness.vllm_adapter.Allocator: block tables, pool snapshot
    last_scheduled: int  # requests the last step scheduled
    attn_groups: tuple[int, ...]  # the KV cache groups by kind (each holds its own blocks: the liveness bounds)
    mamba_groups: tuple[int, ...]
    reqs: dict  # request id -> its record, whose `vreq` is vLLM's Request

    def _all_done(self) -> bool: ...
    def _stuck(self, step: int) -> bool: ...  # nothing in flight, no arrival or event to come
    def _step(self, step: int) -> None: ...
    def _progress(self) -> tuple: ...  # changes whenever a request's state or the pool does
    def _unfinished(self) -> dict[str, str]: ...
    def _shutdown(self) -> None: ...


def _record_junctions(trace: Trace, step: int, reqs: dict) -> None:
    """The shared-prefix junctions vLLM's prefix lookup found this step (the retention oracle's input)."""
    for rid, r in reqs.items():
        junction = getattr(r.vreq, "shared_prefix_boundary", 0)
        seen = trace.junctions.get(rid)
        # a later lookup that finds no junction resets it to 0 (scheduler.py:1120-1125 assigns every lookup's
        # value), and cache_blocks then keeps none: record the reset too, not only non-zero junctions
        if (seen[-1][1] if seen else 0) != junction:
            trace.junctions.setdefault(rid, []).append((step, junction))


def _computed_past(high: dict[str, int], reqs: dict) -> bool:
    """Whether some request computed past its own high-water mark this step (updating the marks): forward
    progress, as opposed to a preempted request recomputing what it had already computed."""
    advanced = False
    for rid, r in reqs.items():
        computed = getattr(r.vreq, "num_computed_tokens", 0)
        if computed > high.get(rid, 0):
            high[rid], advanced = computed, True
    return advanced


def run_steps(tier: Tier) -> Trace:
    """The step loop every tier (`Tier`) shares. How the loop ended is recorded (`Trace.end`, the liveness
    oracle's input). After the last step, or after vLLM raised, every request still holding blocks is freed and
    the pool is snapshotted for pool accounting; if freeing after an exception raises too, the trace says the
    pool could not be judged."""
    trace = tier.trace
    try:
        idle, reason, changed, before = 0, "step-limit", True, tier._progress()
        high, stalled = {}, 0
        for step in range(tier.sc.max_steps):
            tier.step_idx = step
            # stuck: the last step scheduled nothing and changed nothing (a step that only preempted, or only
            # deferred a request, scheduled nothing but changed what the next one can schedule)
            if tier._all_done() or (not changed and tier._stuck(step)):
                reason = "done" if tier._all_done() else "stuck"
                break
            tier._step(step)
            trace.steps_run = step + 1
            if trace.retention is not None:  # only the retention oracle reads them
                _record_junctions(trace, step, tier.reqs)
            idle = 0 if tier.last_scheduled else idle + 1
            stalled = 0 if _computed_past(high, tier.reqs) else stalled + 1
            after = tier._progress()
            changed, before = after != before, after
        groups = (len(tier.attn_groups), len(tier.mamba_groups))
        trace.end = run_end(tier.sc, reason, trace.steps_run, idle, tier._unfinished(), groups, stalled,
                            tuple(getattr(tier, "hidden_blocks", {}).values()))
        tier._shutdown()
    except VllmRaised as raised:
        trace.exception = raised.record
        try:
            tier._shutdown()
        except VllmRaised as again:
            trace.unjudged["pool-accounting"] = (f"freeing after the exception raised too: {again.record.error} "
                                                 f"at {again.record.site}")
            return trace
    trace.pool_end = tier.alloc.pool_snapshot()
    return trace
