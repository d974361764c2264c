"""`regression --style vllm` for V1's accepted-token bookkeeping: the steps of a finding, replayed on vLLM's V1 runner.

Known issues v1-readd-resets-num-accepted and v1-async-accepted-copy-race live in the V1 `GPUModelRunner` (0.27-0.33):
the accepted counts a step's rows read (`input_batch.num_accepted_tokens_cpu` once `_prepare_inputs` synced it;
preprocess_mamba and the Mamba kernels read it, gpu_model_runner.py:4057-4076 in 0.33.0) after `_update_states`
moved the persistent batch's rows. The emitted test
drives vLLM's own `_update_states` and `_prepare_inputs` on a runner stub (`GPUModelRunner.__new__`, as
tests/v1/worker/test_gpu_model_runner.py does) holding a real `InputBatch` on CPU (as test_gpu_input_batch.py
builds it), step by step with the scheduler outputs of the finding's run. Between steps it puts back what the
forward left: each row's accepted count (the device-to-host copy, landed) and, under async scheduling, the row
map `_bookkeeping_sync` keeps. At the first step whose rows read a count other than the fixed runner's, it asserts
the fixed runner's counts. Both runs (stock, and with the issue's run-time fix) are recorded here on vLLM's own V1
runner (engine tier, `--runner v1`). Imports only vLLM, torch and pytest.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.errors import BadInput
from harness.known_issues import KnownIssue
from harness.vllm_style_runner_templates import host_state

if TYPE_CHECKING:
    from harness.artifacts import FindingArtifact

FOLDER = "tests/v1/worker"

# the emitted test (str.format: doubled braces are the test's own)
TEMPLATE = '''# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
{docstring}

from types import SimpleNamespace

import pytest
import torch

import vllm.v1.worker.gpu_model_runner as gpu_model_runner_module
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import (
    CachedRequestData,
    NewRequestData,
    SchedulerOutput,
)
from vllm.v1.pool.late_interaction_runner import LateInteractionRunner
from vllm.v1.worker.gpu_input_batch import InputBatch
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

pytestmark = pytest.mark.cpu_test

BLOCK_SIZES = {block_sizes}  # one per KV cache group (attention, Mamba)
MAX_MODEL_LEN = {max_model_len}
MAX_NUM_TOKENS = {max_num_tokens}
MAX_NUM_REQS = {max_num_reqs}
NUM_SPEC_TOKENS = {num_spec_tokens}
ASYNC_SCHEDULING = {async_scheduling}
MAMBA_CACHE_MODE = {mamba_cache_mode!r}

# The repro's steps as the scheduler handed them to the runner, each with what
# the previous step's forward left in the persistent batch: every row's accepted
# count (the device-to-host copy of _update_states_after_model_execute, landed)
# and, under async scheduling, the previous row map (_bookkeeping_sync).
STEPS = {steps}

CHECKED_STEP = {checked_step}
# The accepted counts the rows of that step read once its rows have moved.
{wrong}
EXPECTED = {expected}


def _runner_stub() -> GPUModelRunner:
    """The state _update_states and _prepare_inputs touch; no model, no device."""
    runner = GPUModelRunner.__new__(GPUModelRunner)
    runner.device = torch.device("cpu")
    runner.max_num_reqs = MAX_NUM_REQS
    runner.max_num_tokens = MAX_NUM_TOKENS
    # vLLM before 0.32 also takes the kernels' block sizes (here the same)
    kernel = (
        {{"kernel_block_sizes": BLOCK_SIZES}}
        if "kernel_block_sizes" in InputBatch.__init__.__code__.co_varnames
        else {{}}
    )
    runner.input_batch = InputBatch(
        max_num_reqs=MAX_NUM_REQS,
        max_model_len=MAX_MODEL_LEN,
        max_num_batched_tokens=MAX_NUM_TOKENS,
        device=runner.device,
        vocab_size=32000,
        block_sizes=BLOCK_SIZES,
        max_num_blocks_per_req=[-(-MAX_MODEL_LEN // b) for b in BLOCK_SIZES],
        num_spec_tokens=NUM_SPEC_TOKENS,
        **kernel,
    )
    # Slot mapping is a Triton kernel (no CPU path); the accepted counts ignore it.
    runner.input_batch.block_table.compute_slot_mapping = lambda *args: None
    runner.requests = {{}}
    runner.num_prompt_logprobs = {{}}
    runner.encoder_cache = {{}}
    runner.late_interaction_runner = LateInteractionRunner()
    runner.kv_cache_config = SimpleNamespace(kv_cache_groups=BLOCK_SIZES)
    runner.reorder_batch_threshold = {reorder_batch_threshold}  # the Mamba backend's: decodes first
    runner.speculative_config = SimpleNamespace(use_ngram_gpu=lambda: False)
    runner.cache_config = SimpleNamespace(mamba_cache_mode=MAMBA_CACHE_MODE)
    runner.use_async_scheduling = ASYNC_SCHEDULING
    # The copies have landed (see STEPS): waiting on them returns at once.
    runner.num_accepted_tokens_event = SimpleNamespace(synchronize=lambda: None)
    # The accepted counts are read on the host; without async spec decode the
    # computed counts are copied from the host (the accepted counts ignore them).
    runner.use_async_spec_decode = False
''' + host_state("MAX_NUM_TOKENS", "MAX_NUM_REQS") + '''

def _scheduler_output(step: dict) -> SchedulerOutput:
    new_reqs = [
        NewRequestData(
            req_id=r["req_id"],
            prompt_token_ids=r["prompt_token_ids"],
            mm_features=[],
            sampling_params=SamplingParams(),
            pooling_params=None,
            block_ids=tuple(r["block_ids"]),
            num_computed_tokens=r["num_computed_tokens"],
            lora_request=None,
        )
        for r in step["new"]
    ]
    cached = step["cached"]
    cached_reqs = CachedRequestData(
        req_ids=[r["req_id"] for r in cached],
        resumed_req_ids={{r["req_id"] for r in cached if r["resumed"]}},
        new_token_ids=[r["new_token_ids"] for r in cached],
        all_token_ids={{r["req_id"]: r["all_token_ids"] for r in cached}},
        new_block_ids=[
            None if r["new_block_ids"] is None else tuple(r["new_block_ids"])
            for r in cached
        ],
        num_computed_tokens=[r["num_computed_tokens"] for r in cached],
        num_output_tokens=[r["num_output_tokens"] for r in cached],
    )
    return SchedulerOutput(
        scheduled_new_reqs=new_reqs,
        scheduled_cached_reqs=cached_reqs,
        num_scheduled_tokens=step["num_scheduled_tokens"],
        total_num_scheduled_tokens=sum(step["num_scheduled_tokens"].values()),
        scheduled_spec_decode_tokens=step["spec_tokens"],
        scheduled_encoder_inputs={{}},
        num_common_prefix_blocks=[],  # no cascade attention (required before 0.32)
        finished_req_ids=set(step["finished"]),
        free_encoder_mm_hashes=[],
        preempted_req_ids=set(step["preempted"]),
    )


def test_{name}(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(
        gpu_model_runner_module,
        "get_pp_group",
        lambda: SimpleNamespace(world_size=1, is_last_rank=True),
    )
    runner = _runner_stub()
    batch = runner.input_batch
    for step in STEPS[: CHECKED_STEP + 1]:
        for req_id, num_accepted in step["left"].items():
            batch.num_accepted_tokens_cpu[batch.req_id_to_index[req_id]] = num_accepted
        prev = step["prev_rows"]
        batch.prev_req_id_to_index = prev and {{r: i for i, r in enumerate(prev)}}

        scheduler_output = _scheduler_output(step)
        runner._update_states(scheduler_output)
        num_scheduled = [step["num_scheduled_tokens"][r] for r in batch.req_ids]
        runner._prepare_inputs(
            scheduler_output, torch.tensor(num_scheduled, dtype=torch.int32).numpy()
        )

    # preprocess_mamba and, re-synced from them, the Mamba kernels read these.
    read = {{
        req_id: int(batch.num_accepted_tokens_cpu[batch.req_id_to_index[req_id]])
        for req_id in EXPECTED
    }}
    assert read == EXPECTED, (
        f"step {{CHECKED_STEP}}, rows {{batch.req_ids}}: accepted counts {{read}}, "
        f"expected {{EXPECTED}}: a Mamba state would start tokens off"
    )
'''


@dataclass(frozen=True)
class Step:
    """One `_update_states` + `_prepare_inputs` of vLLM's V1 runner: the scheduler output (plain data), what the
    previous forward left (accepted count per row, the previous row map), and the counts the rows read."""

    output: dict
    left: dict[str, int]
    prev_rows: list[str] | None
    read: dict[str, int]


def _plain(so) -> dict:
    """The scheduler output's fields `_update_states` and `_prepare_inputs` read, as literals."""
    cached = so.scheduled_cached_reqs
    return {
        "new": [{"req_id": n.req_id, "prompt_token_ids": list(n.prompt_token_ids),
                 "block_ids": [list(b) for b in n.block_ids], "num_computed_tokens": n.num_computed_tokens}
                for n in so.scheduled_new_reqs],
        "cached": [{"req_id": r, "resumed": r in cached.resumed_req_ids,
                    "new_token_ids": list(cached.new_token_ids[i]) if cached.new_token_ids else [],
                    "all_token_ids": list(cached.all_token_ids.get(r, ())),
                    "new_block_ids": None if cached.new_block_ids[i] is None
                    else [list(b) for b in cached.new_block_ids[i]],
                    "num_computed_tokens": cached.num_computed_tokens[i],
                    "num_output_tokens": cached.num_output_tokens[i]} for i, r in enumerate(cached.req_ids)],
        "num_scheduled_tokens": dict(so.num_scheduled_tokens),
        "spec_tokens": {r: list(t) for r, t in (so.scheduled_spec_decode_tokens or {}).items()},
        "finished": sorted(so.finished_req_ids),
        "preempted": sorted(getattr(so, "preempted_req_ids", None) or ()),
    }


def record_steps(scenario, options) -> tuple[list[Step], dict]:
    """Replay the scenario on vLLM's own V1 runner (engine tier) and keep every step; also the runner settings
    the stub needs."""
    from harness.engine.scheduler import EngineDriver

    from harness.vllm_style_runner import wrapped_on_instance

    driver = EngineDriver(scenario, None, options)
    runner = driver.worker.runner
    steps: list[Step] = []
    pending: dict = {}

    def recording_update(update):
        def _update_states(so):
            ib = runner.input_batch
            pending.update(output=_plain(so), prev_rows=None if not ib.prev_req_id_to_index else
                           sorted(ib.prev_req_id_to_index, key=ib.prev_req_id_to_index.get),
                           left={r: int(ib.num_accepted_tokens_cpu[i]) for i, r in enumerate(ib.req_ids)})
            return update(so)
        return _update_states

    def recording_prepare(prepare):
        def _prepare_inputs(so, num_scheduled, *args, **kwargs):
            out = prepare(so, num_scheduled, *args, **kwargs)
            ib = runner.input_batch
            # the host counts after the gather: preprocess_mamba reads them and re-syncs the kernels' copy from
            # them (gpu_model_runner.py:4057-4076 in 0.33.0)
            steps.append(Step(read={r: int(ib.num_accepted_tokens_cpu[i]) for i, r in enumerate(ib.req_ids)},
                              **pending))
            return out
        return _prepare_inputs

    with wrapped_on_instance(runner, _update_states=recording_update, _prepare_inputs=recording_prepare):
        driver.run()
    groups = runner.kv_cache_config.kv_cache_groups
    settings = {"block_sizes": [g.kv_cache_spec.block_size for g in groups],
                "async_scheduling": bool(runner.use_async_scheduling),
                "mamba_cache_mode": runner.cache_config.mamba_cache_mode,
                "num_spec_tokens": runner.num_spec_tokens,
                "reorder_batch_threshold": runner.reorder_batch_threshold,
                "max_model_len": runner.max_model_len, "max_num_tokens": runner.max_num_tokens,
                "max_num_reqs": runner.max_num_reqs}
    return steps, settings


def _options(artifact: FindingArtifact):
    """The engine options of the finding's run, on vLLM's V1 runner (a symbolic-tier finding: the defaults)."""
    from harness.engine_options import EngineOptions

    engine = artifact.engine
    if engine.get("copy_timing", "early") != "early":
        raise BadInput("--style vllm: the emitted test puts each step's accepted-count copy in place before the "
                       "step (copy timing early); replay this finding with --copy-timing early")
    engine.update(runner="v1", copy_timing="early")
    return EngineOptions(**{k: v for k, v in engine.items() if k in EngineOptions.__dataclass_fields__})


def _literal(value) -> str:
    """`value` as a Python literal within vLLM's 88 columns."""
    import pprint

    return pprint.pformat(value, width=88, sort_dicts=False, compact=True)


def emit_accepted_test(artifact: FindingArtifact, issue: KnownIssue, docstring: str) -> tuple[str, str]:
    """(test text, its place in vLLM's tree) for a finding of `issue`: the steps up to the first whose rows read
    accepted counts other than with the issue's fix applied."""
    from harness.patching import patched
    from harness.release import vllm_release
    from harness.run_config import RunConfig
    from harness.scenario import parse_scenario

    vllm_release().refuse_v1(f"--style vllm for {issue.id}")
    scenario, options = parse_scenario(artifact.scenario), _options(artifact)
    stock, settings = record_steps(scenario, options)
    with patched(RunConfig(fixes=(issue.id,))):
        fixed, _ = record_steps(scenario, options)
    if [s.output for s in stock] != [s.output for s in fixed]:
        raise BadInput(f"--style vllm: the scheduler outputs differ with {issue.fix_name} applied; no step to replay")
    bad = next((i for i, (s, f) in enumerate(zip(stock, fixed)) if s.read != f.read), None)
    if bad is None:
        raise BadInput(f"--style vllm: no step of this finding reads an accepted count other than with "
                       f"{issue.fix_name} ({issue.id}) on vLLM's V1 runner")
    steps = [{**s.output, "left": s.left, "prev_rows": s.prev_rows} for s in stock[:bad + 1]]
    name = issue.id.replace("-", "_")
    wrong = "; ".join(f"{r} reads {n}, not {fixed[bad].read[r]}" for r, n in stock[bad].read.items()
                      if n != fixed[bad].read[r])
    wrong = textwrap.fill(f"On vLLM {artifact.get('vllm_version', '?')} as released: {wrong}.", 80,
                          initial_indent="# ", subsequent_indent="# ")
    text = TEMPLATE.format(docstring=docstring, name=name, steps=_literal(steps), checked_step=bad, wrong=wrong,
                           expected=_literal(fixed[bad].read), **settings)
    return text, f"{FOLDER}/test_hh_{name}.py"


__all__ = ["FOLDER", "Step", "emit_accepted_test", "record_steps"]
