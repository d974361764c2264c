"""The worker side of the engine tier: what runs vLLM's real SchedulerOutput each step.

Every worker offers the same four things to `harness.engine.scheduler.EngineDriver`:
- `states`: the state pages the oracles read (`page(block)`, `version`), as `harness.states.SymbolicStates`;
- `execute(so, step, seq_fps, core_tables)`: take the step's SchedulerOutput (table updates, CoW copies,
  Mamba pre-copies) and run the forward, recording a `RowView` per request and group and a `Read` for each
  state consumed (`harness.trace`);
- `sample(so, step, sampled, accepted, seq_fps)`: hand the sampler's result (the harness's token rule) to
  the runner's bookkeeping (accepted counts, post-copies) and return `(req_ids, sampled_token_ids)` as the
  runner's `ModelRunnerOutput` reports them;
- `deliver(block, state)`: a connector load writes a boundary state into a block.

`mirror` is the harness's V1 worker shadow (harness/worker.py) fed a conversion of the SchedulerOutput.
"""

from __future__ import annotations

from harness.errors import BadInput, HarnessError
from harness.states import SymbolicStates
from harness.worker import CachedReq, NewReq, SchedulerOutput, WorkerShadow
from harness.engine.config import picks_v2, resumed_ids


def make_worker(driver, runner: str):
    """The worker for `runner` (harness.engine_options.RUNNERS); `auto` is the runner vLLM picked for the
    config (the Scheduler records it: `use_v2_model_runner`, v1/core/sched/scheduler.py:387): the V2 worker or
    the V1 worker (vLLM's own runner either way); a scenario that worker cannot follow is bad input naming
    why, not a silent fall-back to the mirror."""
    if runner == "auto":  # vLLM's own V1 or V2 model runner, whichever it picked (never the mirror)
        picked = "v2" if picks_v2(driver.sched) else "v1"
        try:
            return make_worker(driver, picked)
        except BadInput as exc:
            raise BadInput(f"--runner auto: vLLM {driver.trace.vllm_version} runs this config on its "
                           f"{picked.upper()} model runner, which the harness cannot follow here: {exc}") from None
    if runner == "v2":
        from harness.engine.runner_v2 import V2Worker
        from harness.engine.v2_setup import v2_unavailable

        why = v2_unavailable() or _v2_release_unsupported()
        if why is None and not picks_v2(driver.sched):
            why = f"vLLM {driver.trace.vllm_version} does not run this config on its V2 model runner"
        if why is not None:
            raise BadInput(f"--runner v2: {why}")
        try:
            return V2Worker(driver)
        except (BadInput, HarnessError):
            raise
        except Exception as exc:  # noqa: BLE001 - only vLLM's own refusals become bad input
            from harness.vllm_adapter import exception_site

            inside, site = exception_site(exc)
            if not inside:
                raise
            raise BadInput(f"--runner v2: vLLM {driver.trace.vllm_version}'s V2 model runner cannot be built on "
                           f"CPU for this config: {exc!r} at {site}") from None
    if runner == "mirror":
        return MirrorWorker(driver)
    if runner == "v1":  # vLLM's own V1 model runner, only the forward simulated (harness/engine/runner_v1.py)
        from harness.engine.runner_v1 import V1Worker
        from harness.release import vllm_release

        vllm_release().refuse_v1("--runner v1")

        return V1Worker(driver)
    raise BadInput(f"engine runner {runner!r} is not available yet on this build of the harness")


def _v2_release_unsupported() -> str | None:
    """The releases the V2 worker follows (measured: bench/engine_support.sh): 0.32 and later, with either
    kernel set (the torch replacements bind each release's kernel parameters by name, kernels_v2._by_name);
    before 0.32 the CPU V2 runner loads the model architecture itself instead of taking the harness's model."""
    from harness.release import vllm_release

    release = vllm_release()
    if release.parsed[:2] < (0, 32):
        return (f"the harness's V2 worker follows vLLM 0.32+'s V2 runner (vLLM {release.source.describe()}'s CPU V2 "
                "runner builds the model architecture from the model config); use --runner v1 (vLLM's V1 runner)")
    return None


class MirrorWorker:
    """The V1 worker shadow on the real scheduler's output."""

    runner_name = "mirror"

    def __init__(self, driver) -> None:
        eg, alloc = driver.eg, driver.alloc
        self.states = SymbolicStates(eg.num_speculative_tokens)
        ckpt = (alloc.checkpoint_position, alloc.checkpoint_valid) if driver.geometry.prefill_checkpoint else None
        # --forward model: the model tier's backend gets every page move and forward (harness.model_tier)
        self.shadow = WorkerShadow(block_size=eg.block_size, num_spec=eg.num_speculative_tokens,
                                   mamba_groups=driver.mamba_groups, states=self.states, trace=driver.trace, checkpoint=ckpt,
                                   kernels=getattr(driver, "backend", None))
        self._sso: SchedulerOutput | None = None

    def execute(self, so, step: int, seq_fps: dict[str, list[int]], core_tables) -> None:
        self._sso = sso = convert(so, step)
        kinds = self.shadow.update_states(sso)
        self.shadow.execute(sso, kinds, seq_fps, core_tables)

    def sample(self, so, step: int, sampled: dict[str, list[int]], accepted: dict[str, int], seq_fps):
        self.shadow.postprocess(self._sso, accepted, seq_fps)
        ids = list(so.num_scheduled_tokens)
        return ids, [sampled[rid] for rid in ids]

    def deliver(self, block: int, state) -> None:
        self.states.deliver(block, state)


def convert(so, step: int) -> SchedulerOutput:
    """vLLM's SchedulerOutput as the worker shadow's dataclass (the fields the V1 runner reads)."""
    sso = SchedulerOutput(step=step, finished=set(so.finished_req_ids), preempted=set(so.preempted_req_ids or ()))
    for nr in so.scheduled_new_reqs:
        sso.new_reqs.append(NewReq(nr.req_id, tuple(list(b) for b in nr.block_ids), nr.num_computed_tokens,
                                   len(nr.prompt_token_ids)))
    cr = so.scheduled_cached_reqs
    resumed = resumed_ids(cr)
    for i, rid in enumerate(cr.req_ids):
        nb = cr.new_block_ids[i]
        sso.cached_reqs.append(CachedReq(rid, None if nb is None else tuple(list(b) for b in nb),
                                         cr.num_computed_tokens[i], resumed=rid in resumed))
    sso.num_scheduled = dict(so.num_scheduled_tokens)
    sso.spec_tokens = {rid: list(t) for rid, t in so.scheduled_spec_decode_tokens.items() if t}
    sso.copies = [(c.src_block_id, c.dst_block_id) for c in (getattr(so, "kv_cache_block_copies", None) or ())]
    sso.zero_ids = list(so.new_block_ids_to_zero or ())
    return sso
