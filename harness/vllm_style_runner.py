"""`regression --style vllm` for a model-runner issue: the batch vLLM's V2 runner orders wrong, as vLLM keeps it.

vLLM tests the V2 runner's batch order on a runner stub, no model and no device: `GPUModelRunner.__new__` with the
request state `gather_batch_req_state` reads (tests/v1/worker/test_gpu_batch_ordering.py in 0.34.0's sdist). The
emitted test does the same with the batch of the repro's step where vLLM's order puts a decode behind a prompt
chunk without drafts (recorded from vLLM's own V2 runner on the engine tier), then splits the gathered batch as
the Mamba metadata builder does (`split_decodes_and_prefills` with `treat_short_extends_as_decodes=False`,
mamba_attn.py:449-453 in 0.34.0) and asserts every decode row lands among the decodes. It imports only vLLM,
torch and pytest (the runner's numpy arrays come from `torch.Tensor.numpy()`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from harness.errors import BadInput
from harness.known_issues import KnownIssue

TARGET = "GPUModelRunner.gather_batch_req_state"  # the fix target this test shape serves
FOLDER = "tests/v1/worker"

# the emitted test (str.format: doubled braces are the test's own)
TEMPLATE = '''# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
{docstring}

from types import SimpleNamespace

import pytest
import torch

from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.attention.backends.utils import split_decodes_and_prefills
from vllm.v1.worker.gpu.model_runner import GPUModelRunner

pytestmark = pytest.mark.cpu_test

# Step {step} of the repro as the scheduler hands it to the runner, in its order:
# request -> (scheduled tokens, draft tokens, prompt tokens computed, prompt length).
BATCH = {{{rows}}}
DECODE_QUERY_LEN = {decode_query_len}  # 1 + num_speculative_tokens


def _runner_stub() -> GPUModelRunner:
    """The request state gather_batch_req_state reads; no model, no device."""
    runner = GPUModelRunner.__new__(GPUModelRunner)
    runner.decode_query_len = DECODE_QUERY_LEN
    runner.adaptive_verification = None
    runner.pcp_manager = None
    runner.use_pp = False
    computed = torch.tensor([row[2] for row in BATCH.values()], dtype=torch.int32)
    prompt = torch.tensor([row[3] for row in BATCH.values()], dtype=torch.int32)
    runner.req_states = SimpleNamespace(
        req_id_to_index={{req_id: i for i, req_id in enumerate(BATCH)}},
        num_computed_prefill_tokens=computed.numpy(),
        prefill_len=SimpleNamespace(np=prompt.numpy()),
    )
    return runner


def test_{name}():
    scheduler_output = SimpleNamespace(
        num_scheduled_tokens={{r: row[0] for r, row in BATCH.items()}},
        total_num_scheduled_tokens=sum(row[0] for row in BATCH.values()),
        scheduled_spec_decode_tokens={{
            r: [0] * row[1] for r, row in BATCH.items() if row[1]
        }},
    )
    state, _ = _runner_stub().gather_batch_req_state(scheduler_output, False)

    # The Mamba metadata builder's split of the gathered batch (mamba_attn.py).
    query_lens = torch.tensor(state.num_scheduled_tokens, dtype=torch.int32)
    query_start_loc = torch.zeros(len(query_lens) + 1, dtype=torch.int32)
    torch.cumsum(query_lens, 0, out=query_start_loc[1:])
    computed = torch.tensor(state.num_computed_prefill_tokens_np, dtype=torch.int32)
    seq_lens = computed + query_lens
    metadata = CommonAttentionMetadata(
        query_start_loc=query_start_loc,
        query_start_loc_cpu=query_start_loc,
        seq_lens=seq_lens,
        seq_lens_cpu_upper_bound=seq_lens,
        max_seq_len=int(seq_lens.max()),
        num_reqs=len(query_lens),
        num_actual_tokens=int(query_lens.sum()),
        max_query_len=int(query_lens.max()),
        block_table_tensor=torch.zeros(len(query_lens), 1, dtype=torch.int32),
        slot_mapping=torch.zeros(int(query_lens.sum()), dtype=torch.int64),
        is_prefilling=torch.from_numpy(state.is_prefilling_np),
    )
    num_decodes, *_ = split_decodes_and_prefills(
        metadata,
        decode_threshold=DECODE_QUERY_LEN,
        treat_short_extends_as_decodes=False,
    )

    decodes = [r for r, p in zip(state.req_ids, state.is_prefilling_np) if not p]
    assert set(decodes) <= set(state.req_ids[:num_decodes]), (
        f"batch order {{state.req_ids}}: decode(s) {{decodes}} go to the Mamba prefill "
        "kernels, which ignore their accepted draft tokens"
    )
'''


@dataclass(frozen=True)
class Batch:
    """One `gather_batch_req_state` call: request -> (scheduled, drafts, prompt tokens computed, prompt length)
    in the scheduler's order, the runner's order, and its decode query length (1 + K)."""

    step: int
    rows: dict[str, tuple[int, int, int, int]]
    order: tuple[str, ...]
    decode_query_len: int

    def decode_behind_prompt_chunk(self) -> bool:
        """A decode row (prompt done) after a prompt chunk without drafts: the Mamba builder's split sends it
        to the prefill kernels."""
        chunk_seen = False
        for r in self.order:
            scheduled, drafts, computed, prompt = self.rows[r]
            if computed < prompt and not drafts:
                chunk_seen = True
            elif computed >= prompt and chunk_seen:
                return True
        return False


def record_batches(scenario) -> list[Batch]:
    """Replay the scenario on vLLM's own V2 runner (engine tier, stock) and keep every batch it gathered."""
    from harness.engine.scheduler import EngineDriver
    from harness.engine_options import EngineOptions

    driver = EngineDriver(scenario, None, EngineOptions(runner="v2"))
    runner = driver.worker.runner
    gather = getattr(runner, "gather_batch_req_state", None)
    if gather is None:
        raise BadInput("--style vllm: this vLLM's V2 runner has no gather_batch_req_state (0.32.0 on)")
    batches: list[Batch] = []

    def recording(scheduler_output, dummy_run):
        state, uniform = gather(scheduler_output, dummy_run)
        if state is not None:
            rs, drafts = runner.req_states, scheduler_output.scheduled_spec_decode_tokens or {}
            rows = {r: (n, len(drafts.get(r) or ()), int(rs.num_computed_prefill_tokens[rs.req_id_to_index[r]]),
                        int(rs.prefill_len.np[rs.req_id_to_index[r]]))
                    for r, n in scheduler_output.num_scheduled_tokens.items()}
            batches.append(Batch(driver.worker.step, rows, tuple(state.req_ids), runner.decode_query_len))
        return state, uniform

    runner.gather_batch_req_state = recording
    driver.run()
    return batches


def emit_runner_test(artifact: dict, issue: KnownIssue, docstring: str) -> tuple[str, str]:
    """(test text, its place in vLLM's tree) for a finding of `issue` (whose fix patches TARGET)."""
    from harness.scenario import parse_scenario

    wrong = [b for b in record_batches(parse_scenario(artifact["scenario"])) if b.decode_behind_prompt_chunk()]
    if not wrong:
        raise BadInput(f"--style vllm: no batch of this finding puts a decode behind a prompt chunk ({issue.id})")
    batch = wrong[0]
    name = issue.id.replace("-", "_")
    rows = ", ".join(f'{json.dumps(r)}: {v}' for r, v in batch.rows.items())
    text = TEMPLATE.format(docstring=docstring, step=batch.step, rows=rows, decode_query_len=batch.decode_query_len,
                           name=name)
    return text, f"{FOLDER}/test_hh_{name}.py"


__all__ = ["Batch", "FOLDER", "TARGET", "emit_runner_test", "record_batches"]
