"""Versioned JSON scenario format: what happens in one replay.

A scenario names a geometry (block sizes, pool size, speculation, checkpoints), the requests (prompt,
arrival, external hit, per-step prefill caps, decode length, acceptance pattern) and events (preempt,
abort). Validation is pydantic's; any error becomes ``BadInput`` naming the field, so the CLI exits 2.
A scenario file may instead point at a workload file (``workload``, see harness/workloads.py): loading it
expands the file into explicit ``requests``, so the expanded scenario (a finding artifact) replays alone.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.errors import BadInput
from harness.trace import blocks_at_least

SCENARIO_VERSION = 1
VOCAB_SIZE = 32000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Geometry(_Strict):
    hash_block_size: int = Field(ge=1, le=4096)
    attn_block_size: int = Field(ge=1, le=4096)
    mamba_block_size: int = Field(ge=1, le=65536)
    num_blocks: int = Field(ge=4, le=1_000_000)
    max_model_len: int = Field(default=4096, ge=2, le=1_048_576)
    num_speculative_tokens: int = Field(default=0, ge=0, le=8)
    prefill_checkpoint: bool = False
    eagle_block_drop: bool = False
    token_budget: int = Field(default=2048, ge=1, le=1_048_576)
    # KVTransferConfig.kv_load_failure_policy for loads that fail (`external.load_fails`): vLLM's default
    # "fail" ends the request with an error; "recompute" recomputes from the longest valid prefix
    kv_load_failure_policy: Literal["fail", "recompute"] = "fail"
    # CacheConfig.mamba_cache_mode: "align" (prefix caching on: Mamba states cached at block boundaries) or "none"
    # (prefix caching off, vLLM's default without --enable-prefix-caching: one Mamba block per request holds its
    # state, max_model_len tokens long, plus a block per speculative token; engine tier only)
    # ("all", 0.26-0.32's third mode, is read so that the engine tier can name what it lacks: exit 2)
    mamba_cache_mode: Literal["align", "none", "all"] = "align"
    # a real hybrid model whose KV cache groups and block-size rule vLLM builds (engine tier): a shipped config's
    # name (harness/model_configs) or a config.json inline; None = one attention and one Mamba group
    model: str | dict | None = None
    # CacheConfig.prefix_cache_retention_interval (0.33.0: sparse Mamba/SWA prefix-cache retention, vLLM's default
    # 0 = only the replay boundary and shared-prefix junction states are cached; N = also one per N tokens, a
    # multiple of the scheduler block). None = dense (every state a chunk ends on), the releases without the knob
    # and every scenario written before it; left out of the document when None so those documents stay as they were
    prefix_cache_retention_interval: int | None = Field(default=None, ge=0)
    # SchedulerConfig knobs 0.34 added (config/scheduler.py:78, 223-237 in 0.34.0; engine tier, vLLM's own scheduler):
    # max_num_inflight_kv_loads lets requests the connector loads asynchronously start their loads while the running
    # batch is full (parked in `async_kv_waiting`) and caps the loads holding blocks; the cache-aware admission window
    # admits, among the first N waiting requests, those with a cached prefix first, once the cache is at least
    # `threshold` used. None = vLLM's default (no cap, arrival order); left out of the document when None
    max_num_inflight_kv_loads: int | None = Field(default=None, ge=1, le=512)
    cache_aware_admission_window: int | None = Field(default=None, ge=0, le=512)
    cache_aware_admission_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    # speculative method "extract_hidden_states" (num_speculative_tokens 1): the aux hidden-state layers its
    # cache-only layer stores. vLLM gives that layer's group a block below the Mamba block and the engine core sets
    # cache_config.block_size, the grid the Scheduler's Mamba split aligns to, to it (bench/results/block_sizes.md).
    # Engine tier, geometry.model a model with aux hidden-state outputs. 0 = off, left out of the document
    hidden_state_layers: int = Field(default=0, ge=0, le=8)
    # the EAGLE-family drafter (eagle_block_drop) as MTP with this many modules in its draft checkpoint
    # (hf_config.n_predict in 0.34.0, num_nextn_predict_layers before): 0 = EAGLE. With 2+ modules and
    # num_speculative_tokens 2+, vLLM (0.28+) runs multi-module MTP: the Scheduler never ends a prefill chunk within
    # num_speculative_tokens of the prompt's end (Scheduler._reserve_prefill_lookahead) and the KV cache manager
    # caches only the finalized prefix (num_reprefillable_tokens). Engine tier; 0 is left out of the document
    mtp_modules: int = Field(default=0, ge=0, le=8)
    # the KV connector hashes blocks with the tokens after them ("core lookahead hashing", which NIXL, offloading
    # and Mooncake support): with an EAGLE-family drafter and prefix caching, vLLM 0.34.0 then keys each block by
    # its tokens plus the drafter's lookahead (VllmConfig._resolve_num_hash_lookahead_tokens, config/vllm.py:633-654;
    # without a connector it is vLLM's default). Engine tier, 0.34+; False is left out of the document
    lookahead_hashes: bool = False

    @field_validator("model")
    @classmethod
    def _known_model(cls, ref):
        if ref is not None:
            from harness.model_configs import load

            try:
                load(ref)
            except BadInput as exc:
                raise ValueError(str(exc)) from None
        return ref

    @model_validator(mode="before")
    @classmethod
    def _align_mode_block(cls, data):
        """vLLM's align mode has one block size: `cache_config.mamba_block_size = cache_config.block_size`
        (platforms/interface.py `_align_hybrid_block_size`, 0.33.0), so the attention group's allocator block
        is the Mamba block on every tier. A finer `attn_block_size` that divides the Mamba block is raised to it
        (a scenario vLLM could never build is not a finding); one that does not divide it is refused."""
        if isinstance(data, dict):
            attn, mamba = data.get("attn_block_size"), data.get("mamba_block_size")
            if isinstance(attn, int) and isinstance(mamba, int) and attn >= 1 and mamba >= 1:
                if mamba % attn:
                    raise ValueError(f"attn_block_size {attn} must divide mamba_block_size {mamba} (align mode)")
                data = {**data, "attn_block_size": mamba}
        return data

    @model_validator(mode="after")
    def _divisible(self) -> Geometry:
        for name in ("attn_block_size", "mamba_block_size"):
            if getattr(self, name) % self.hash_block_size:
                raise ValueError(f"hash_block_size {self.hash_block_size} must divide {name}")
        if self.mamba_cache_mode == "none" and (self.prefill_checkpoint or self.eagle_block_drop):
            raise ValueError("prefill_checkpoint and eagle_block_drop are prefix-caching features: "
                             "mamba_cache_mode 'none' has no prefix caching")
        if self.mamba_cache_mode == "all" and self.prefill_checkpoint:
            raise ValueError("prefill_checkpoint is align mode's (mamba_cache_mode 'all' caches every block)")
        if (self.mtp_modules or self.lookahead_hashes) and not self.eagle_block_drop:
            raise ValueError("mtp_modules and lookahead_hashes are an EAGLE-family drafter's: they need "
                             "eagle_block_drop (and num_speculative_tokens > 0)")
        if self.hidden_state_layers and (self.model is None or self.num_speculative_tokens != 1
                                         or self.eagle_block_drop or self.mamba_cache_mode != "align"):
            raise ValueError("hidden_state_layers (extract_hidden_states) needs geometry.model, "
                             "num_speculative_tokens 1, no eagle_block_drop and mamba_cache_mode 'align'")
        return self

    @property
    def multi_module_mtp(self) -> bool:
        """vLLM's multi-module MTP (use_multi_module_mtp: method mtp, min(modules, K) > 1)."""
        return min(self.mtp_modules, self.num_speculative_tokens) > 1

    @property
    def scheduler_block_size(self) -> int:
        return math.lcm(self.attn_block_size, self.mamba_block_size)


class Share(_Strict):
    request: str
    tokens: int = Field(ge=1)


class Prompt(_Strict):
    tokens: list[int] | None = None
    length: int | None = Field(default=None, ge=1)
    seed: int = 0
    share: Share | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.tokens) if self.tokens is not None else self.length

    @model_validator(mode="after")
    def _one_source(self) -> Prompt:
        if (self.tokens is None) == (self.length is None):
            raise ValueError("give exactly one of 'tokens' or 'length'")
        if self.tokens is not None:
            if not self.tokens:
                raise ValueError("'tokens' must not be empty")
            if any(not 0 <= t < VOCAB_SIZE for t in self.tokens):
                raise ValueError(f"token ids must lie in [0, {VOCAB_SIZE})")
            if self.share is not None:
                raise ValueError("'share' only applies to generated prompts ('length')")
        if self.share is not None and self.length is not None and self.share.tokens > self.length:
            raise ValueError("'share.tokens' exceeds 'length'")
        return self


class ExternalHit(_Strict):
    tokens: int = Field(ge=1)
    async_load: bool = Field(default=True, alias="async")
    load_steps: int = Field(default=1, ge=1, le=64)
    # the async load fails: the connector writes nothing and reports the request in failed_recving (engine
    # tier only: the failure path is vLLM's own scheduler code, which the mirror does not model)
    load_fails: bool = False

    @model_validator(mode="after")
    def _fails_async(self) -> ExternalHit:
        if self.load_fails and not self.async_load:
            raise ValueError("'load_fails' needs an async load (a hybrid model's sync load failure is reported "
                             "by block id, which vLLM refuses for several KV cache groups)")
        return self


class RequestSpec(_Strict):
    id: str = Field(min_length=1, max_length=64)
    prompt: Prompt
    arrival_step: int = Field(default=0, ge=0)
    external: ExternalHit | None = None
    chunks: list[int] | None = None
    max_tokens: int = Field(default=1, ge=1, le=100_000)
    acceptance: list[int] = Field(default_factory=list)
    # the temperature vLLM's own sampler runs with (engine tier, vLLM's V2 runner: 0 takes its greedy sampling
    # and rejection paths, otherwise seeded Gumbel sampling and the random rejection path; vLLM's default is
    # 1.0). The tokens are the harness's either way: the forward's logits are one-hot.
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    # how many leading tokens the request may read from the prefix cache (Request.prefix_cache_hit_limit, 0.34+; engine
    # tier): what prompt logprobs from token N ask of vLLM (SamplingParams(prompt_logprobs=1, prompt_logprob_start=N,
    # skip_reading_prefix_cache=False)); 0: skip_reading_prefix_cache=True. Such a request reads no external (connector)
    # KV (request.py:358-362). None = unbounded, vLLM's default; left out of the document when None
    prefix_cache_hit_limit: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _positive_chunks(self) -> RequestSpec:
        if self.chunks is not None and any(c < 1 for c in self.chunks):
            raise ValueError("'chunks' entries must be >= 1")
        if any(a < 0 for a in self.acceptance):
            raise ValueError("'acceptance' entries must be >= 0")
        return self


class Event(_Strict):
    step: int = Field(ge=0)
    kind: Literal["preempt", "abort"]
    request: str


class Workload(_Strict):
    path: str = Field(min_length=1)  # relative to the scenario file's folder
    limit: int | None = Field(default=None, ge=1)  # first N sessions (rows)
    max_tokens: int = Field(default=2, ge=1, le=100_000)
    arrival_gap: int = Field(default=4, ge=0, le=100_000)  # turn k arrives at step k * arrival_gap


class Scenario(_Strict):
    version: Literal[1]
    name: str = ""
    geometry: Geometry
    requests: list[RequestSpec] = Field(min_length=1, max_length=512)
    events: list[Event] = Field(default_factory=list)
    max_steps: int = Field(default=2000, ge=1, le=1_000_000)
    workload: Workload | None = None  # where the requests came from (kept as a record once expanded)

    @model_validator(mode="after")
    def _references(self) -> Scenario:
        seen: set[str] = set()
        for i, req in enumerate(self.requests):
            if req.id in seen:
                raise ValueError(f"requests[{i}].id {req.id!r} is not unique")
            share = req.prompt.share
            if share is not None and share.request not in seen:
                raise ValueError(f"requests[{i}].prompt.share.request {share.request!r} must name an earlier request")
            seen.add(req.id)
        for i, ev in enumerate(self.events):
            if ev.request not in seen:
                raise ValueError(f"events[{i}].request {ev.request!r} names no request")
        max_len = self.geometry.max_model_len
        for i, req in enumerate(self.requests):
            if req.external is not None and self.geometry.mamba_cache_mode == "none":
                raise ValueError(f"requests[{i}].external: the harness's connector loads align-mode Mamba states; "
                                 "with mamba_cache_mode 'none' it is not modelled")
            n = req.prompt.num_tokens
            if n + req.max_tokens > max_len:
                raise ValueError(f"requests[{i}]: prompt + max_tokens = {n + req.max_tokens} exceeds max_model_len {max_len}")
            g = self.geometry
            need = blocks_at_least(n + req.max_tokens, (g.attn_block_size, g.mamba_block_size))
            if need > g.num_blocks - 1:  # vLLM could never admit it: it would wait forever, by design
                raise ValueError(f"requests[{i}]: {n + req.max_tokens} tokens need at least {need} blocks, more than the "
                                 f"pool's {g.num_blocks - 1} usable ones (num_blocks {g.num_blocks} less the null block)")
        return self

    def prompt_tokens(self) -> dict[str, list[int]]:
        """Resolve every prompt to explicit tokens (shared prefixes copied from the named request)."""
        out: dict[str, list[int]] = {}
        for req in self.requests:
            p = req.prompt
            if p.tokens is not None:
                out[req.id] = list(p.tokens)
                continue
            rng = random.Random(f"{p.seed}:{req.id}")
            shared = out[p.share.request][: p.share.tokens] if p.share else []
            out[req.id] = shared + [rng.randrange(1, VOCAB_SIZE) for _ in range(p.length - len(shared))]
        return out


def _field_path(loc: tuple) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(root)"


def _validate(model: type[BaseModel], data: object, prefix: tuple = ()) -> BaseModel:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise BadInput(f"scenario field {_field_path(prefix + tuple(err['loc']))}: {err['msg']}") from None


def _expand_workload(data: dict, base_dir: Path) -> dict:
    from harness.workloads import workload_requests  # imports HF datasets: only when a scenario needs it

    spec = _validate(Workload, data["workload"], ("workload",))
    path = base_dir / spec.path
    requests = workload_requests(path, limit=spec.limit, max_tokens=spec.max_tokens, arrival_gap=spec.arrival_gap)
    return {**data, "requests": requests}


def parse_scenario(data: object, *, base_dir: str | Path | None = None) -> Scenario:
    """Validate a decoded JSON object; raise BadInput naming the first offending field.

    With `base_dir` (load_scenario passes the file's folder), a scenario with a `workload` and no
    `requests` gets its requests from the workload file. Without it nothing is read: an expanded
    scenario must stand alone (and a minimizer emptying `requests` must not refill them).
    """
    if isinstance(data, dict) and "scenario" in data and "version" not in data:
        data = data["scenario"]  # a finding artifact carries its scenario
    expand = isinstance(data, dict) and data.get("workload") is not None and not data.get("requests")
    if base_dir is not None and expand:
        data = _expand_workload(data, Path(base_dir))
        try:
            return _validate(Scenario, data)
        except BadInput as exc:
            raise BadInput(f"{exc} (requests from workload {Path(base_dir) / data['workload']['path']})") from None
    return _validate(Scenario, data)


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise BadInput(f"cannot read scenario {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: not a scenario (not UTF-8 text: byte {exc.start} is {exc.object[exc.start]:#04x})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path}: not a scenario (a JSON {type(data).__name__}, expected an object)")
    return parse_scenario(data, base_dir=path.parent)


# fields a document leaves out while they hold vLLM's default (None), so documents written before them stay as they were
SCHEDULER_KNOBS = ("max_num_inflight_kv_loads", "cache_aware_admission_window", "cache_aware_admission_threshold")
OPTIONAL_GEOMETRY = ("prefix_cache_retention_interval", *SCHEDULER_KNOBS)
OPTIONAL_REQUEST = ("prefix_cache_hit_limit",)


def scenario_to_json(scenario: Scenario) -> dict:
    # no "workload": null on plain scenarios
    exclude: dict = {"workload": True} if scenario.workload is None else {}
    g = scenario.geometry  # nor the extract_hidden_states layers when off
    unset = {name for name in OPTIONAL_GEOMETRY if getattr(g, name) is None}
    unset |= {name for name in ("hidden_state_layers", "mtp_modules", "lookahead_hashes") if not getattr(g, name)}
    if unset:
        exclude["geometry"] = unset
    requests = {i: set(names) for i, req in enumerate(scenario.requests)
                if (names := [n for n in OPTIONAL_REQUEST if getattr(req, n) is None])}
    if requests:
        exclude["requests"] = requests
    return scenario.model_dump(mode="json", by_alias=True, exclude_defaults=False, exclude=exclude or None)
