"""The recorded history of one replay: what the driver called, what the worker shadow read and wrote.

Oracles are pure functions of a `Trace`. Records are plain slotted dataclasses so that recording costs
little next to the allocator calls it records.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

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
    """A state the worker consumed: a pre-copy source or a kernel's initial state."""

    step: int
    request: str
    what: str  # "precopy" | "initial" | "postcopy"
    group: int
    column: int
    block: int
    conv: State | None
    ssm: State | None
    want: State


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
    """After a step: one prefix-cache key of the Mamba group, the prefix it names and what its block holds."""

    step: int
    block: int
    prefix_tokens: int
    prefix_owner: str
    want: State
    conv: State | None
    ssm: State | None


@dataclass(slots=True)
class VllmException:
    step: int
    request: str
    call: str
    error: str
    site: str


@dataclass
class Trace:
    vllm_version: str
    mutant: str | None
    calls: list[Call] = field(default_factory=list)
    rows: list[RowView] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    cache: list[CacheCheck] = field(default_factory=list)
    copies: list[tuple[int, int, int]] = field(default_factory=list)  # (step, src, dst)
    exception: VllmException | None = None
    pool_end: dict | None = None
    unjudged: dict = field(default_factory=dict)  # oracle -> why it could not judge this trace
    steps_run: int = 0
    prefixes: dict[str, list[int]] = field(default_factory=dict)  # request -> prefix fingerprints (fps[n])
    outputs: list | None = None  # model tier: one harness.model_tier.OutputRecord per generating request

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
        return f"a {n}-token prefix no request has (unverified draft tokens)"

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
            self.trace.cache.append(CacheCheck(step, block, n, rid, (n, requests[rid][1][n]), conv[0], ssm))


class VllmRaised(Exception):
    """vLLM raised during a replay (any tier): the replay ends and the exception becomes a finding."""

    def __init__(self, record: VllmException):
        self.record = record


def run_steps(tier) -> Trace:
    """The step loop every tier shares. `tier` has sc, step_idx, trace, alloc and _all_done(), _stuck(step),
    _step(step), _shutdown(). After the last step, or after vLLM raised, every request still holding blocks
    is freed and the pool is snapshotted for pool accounting; if freeing after an exception raises too, the
    trace says the pool could not be judged."""
    trace = tier.trace
    try:
        for step in range(tier.sc.max_steps):
            tier.step_idx = step
            if tier._all_done() or tier._stuck(step):
                break
            tier._step(step)
            trace.steps_run = step + 1
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
