"""The tests `regression --style vllm` emits for the model runners' batch order (harness/vllm_style_runner.py).

Each is a `str.format` template (doubled braces are the test's own) for tests/v1/worker in vLLM's conventions: the
SPDX header, the `cpu_test` mark, a runner stub made with `GPUModelRunner.__new__` (as tests/v1/worker/
test_gpu_batch_ordering.py builds one), no model and no device. They import only vLLM, torch and pytest.
"""


def host_state(num_tokens: str, num_reqs: str) -> str:
    """The V1 runner's host flags and buffers that _prepare_inputs reads, for a stub with no model and no device
    (both V1 stubs emit it), sized by the emitted test's expressions num_tokens and num_reqs. Braces-free: the
    templates it joins are format()ted afterwards."""
    return f'''    runner.is_pooling_model = False
    runner.uses_mrope = False
    # what the V1 runners of 0.28-0.31 also read: no XD-RoPE, no previous-index buffer
    runner.uses_xdrope_dim = 0
    runner.mamba_prev_last_scheduled_idx = None
    runner.enable_prompt_embeds = False
    runner.lora_config = None
    runner._pp_recv_work = None
    i32, i64 = torch.int32, torch.int64
    runner.arange_np = torch.arange({num_tokens}, dtype=i64).numpy()
    runner._arange_scratch = torch.empty({num_tokens}, dtype=i64).numpy()
    runner.input_ids = runner._make_buffer({num_tokens}, dtype=i32)
    runner.query_pos = runner._make_buffer({num_tokens}, dtype=i64)
    runner.req_indices = runner._make_buffer({num_tokens}, dtype=i64)
    runner.positions = torch.zeros({num_tokens}, dtype=i64)
    runner.query_start_loc = runner._make_buffer({num_reqs} + 1, dtype=i32)
    runner.optimistic_seq_lens_cpu = torch.zeros({num_reqs}, dtype=i32)
    runner.seq_lens = torch.zeros({num_reqs}, dtype=i32)
    runner.num_computed_tokens = torch.zeros({num_reqs}, dtype=i32)
    runner.prev_positions = runner._make_buffer({num_reqs}, dtype=i64)
    runner.prev_num_draft_tokens = runner._make_buffer({num_reqs}, dtype=i32)
    runner.discard_request_mask = runner._make_buffer({num_reqs}, dtype=torch.bool)
    runner.num_accepted_tokens = runner._make_buffer({num_reqs}, dtype=i64)
    runner.num_decode_draft_tokens = runner._make_buffer({num_reqs}, dtype=i32)
    runner.num_scheduled_tokens = runner._make_buffer({num_reqs}, dtype=i32)
    return runner
'''


# the batch's common attention metadata, as both tests build it (placed by str.format: no doubled braces)
METADATA_HELPER = '''def _metadata(
    query_lens: torch.Tensor, computed: torch.Tensor, is_prefilling: torch.Tensor
) -> CommonAttentionMetadata:
    \"\"\"The runner's common attention metadata for the batch, on the CPU.\"\"\"
    query_start_loc = torch.zeros(len(query_lens) + 1, dtype=torch.int32)
    torch.cumsum(query_lens, 0, out=query_start_loc[1:])
    seq_lens = computed + query_lens
    return CommonAttentionMetadata(
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
        is_prefilling=is_prefilling,
    )
'''

# V2: the batch gather_batch_req_state orders, split as the Mamba builder does
V2_TEMPLATE = '''# SPDX-License-Identifier: Apache-2.0
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


{metadata_helper}

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
    computed = torch.tensor(state.num_computed_prefill_tokens_np, dtype=torch.int32)
    metadata = _metadata(
        query_lens, computed, torch.from_numpy(state.is_prefilling_np)
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



# V1: the persistent batch _may_reorder_batch orders, split by vLLM's own Mamba metadata builder
V1_TEMPLATE = '''# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
{docstring}

from types import SimpleNamespace

import pytest
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.sampling_params import SamplingParams
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.attention.backends.mamba_attn import (
    BaseMambaAttentionMetadata,
    BaseMambaAttentionMetadataBuilder,
)
from vllm.v1.kv_cache_interface import MambaSpec
from vllm.v1.pool.late_interaction_runner import LateInteractionRunner
from vllm.v1.worker.gpu_input_batch import CachedRequestState, InputBatch
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

pytestmark = pytest.mark.cpu_test

# Step {step} of the repro as the scheduler hands it to the runner, in the persistent
# batch's order: request -> (scheduled tokens, draft tokens, tokens computed,
# prompt length).
BATCH = {{{rows}}}
NUM_SPECULATIVE_TOKENS = {num_spec}
BLOCK_SIZE = {block_size}
MAX_MODEL_LEN = {max_model_len}


class _MambaBuilder(BaseMambaAttentionMetadataBuilder[BaseMambaAttentionMetadata]):
    metadata_cls = BaseMambaAttentionMetadata


{metadata_helper}

def _runner_stub() -> GPUModelRunner:
    """What _may_reorder_batch and _prepare_inputs read: the persistent batch and
    the host buffers; no model, no device."""
    # vLLM before 0.32 also takes the kernels' block sizes (here the same)
    kernel = (
        {{"kernel_block_sizes": [BLOCK_SIZE]}}
        if "kernel_block_sizes" in InputBatch.__init__.__code__.co_varnames
        else {{}}
    )
    input_batch = InputBatch(
        max_num_reqs=len(BATCH),
        max_model_len=MAX_MODEL_LEN,
        max_num_batched_tokens=MAX_MODEL_LEN,
        device=torch.device("cpu"),
        vocab_size=1024,
        block_sizes=[BLOCK_SIZE],
        max_num_blocks_per_req=[MAX_MODEL_LEN // BLOCK_SIZE + 1],
        num_spec_tokens=NUM_SPECULATIVE_TOKENS,
        **kernel,
    )
    # Slot mapping is a Triton kernel (no CPU path); the split ignores it.
    input_batch.block_table.compute_slot_mapping = lambda *args: None
    runner = GPUModelRunner.__new__(GPUModelRunner)
    runner.requests = {{}}
    for req_id, (scheduled, drafts, computed, prompt) in BATCH.items():
        # a request resumed after its prompt recomputes tokens it generated
        generated = max(0, computed + scheduled - drafts - prompt)
        runner.requests[req_id] = CachedRequestState(
            req_id=req_id,
            prompt_token_ids=[0] * prompt,
            mm_features=[],
            sampling_params=SamplingParams(),
            generator=None,
            block_ids=([],),
            num_computed_tokens=computed,
            output_token_ids=[0] * generated,
        )
        input_batch.add_request(runner.requests[req_id])
    runner.input_batch = input_batch
    runner.kv_cache_config = SimpleNamespace(kv_cache_groups=[SimpleNamespace()])
    runner.speculative_config = SimpleNamespace(
        num_speculative_tokens=NUM_SPECULATIVE_TOKENS, use_ngram_gpu=lambda: False
    )
    # the Mamba builder's threshold with speculative decoding: 1 + K
    runner.reorder_batch_threshold = 1 + NUM_SPECULATIVE_TOKENS
    # What _prepare_inputs reads besides, on the host: the draft and accepted
    # counts it leaves are what the runner hands the Mamba builder.
    runner.device = torch.device("cpu")
    runner.cache_config = SimpleNamespace(mamba_cache_mode="align")
    runner.use_async_scheduling = False
    runner.use_async_spec_decode = False
    runner.num_accepted_tokens_event = SimpleNamespace(synchronize=lambda: None)
    runner.late_interaction_runner = LateInteractionRunner()
''' + host_state("MAX_MODEL_LEN", "len(BATCH)") + '''

def _num_decodes(order: list[str], drafts: torch.Tensor | None) -> int:
    """The Mamba metadata builder's decode rows of the batch in this order, from
    the metadata the runner gives it: is_prefilling and, on a step _prepare_inputs
    made speculative, the draft counts it left and the accepted counts."""
    rows = [BATCH[req_id] for req_id in order]
    query_lens = torch.tensor([row[0] for row in rows], dtype=torch.int32)
    computed = torch.tensor([row[2] for row in rows], dtype=torch.int32)
    prompt = torch.tensor([row[3] for row in rows], dtype=torch.int32)
    metadata = _metadata(query_lens, computed, computed < prompt)
    # The fields the builder reads; its split (mamba_attn.py:450-456 in 0.33.0)
    # precedes all that the cache mode changes.
    config = SimpleNamespace(
        cache_config=SimpleNamespace(
            block_size=BLOCK_SIZE,
            mamba_cache_mode="none",
            use_replayssm=False,
            replayssm_buffer_len=16,
        ),
        compilation_config=SimpleNamespace(
            cudagraph_mode=CUDAGraphMode.NONE, max_cudagraph_capture_size=None
        ),
        speculative_config=SimpleNamespace(
            num_speculative_tokens=NUM_SPECULATIVE_TOKENS, parallel_drafting=False
        ),
        num_speculative_tokens=NUM_SPECULATIVE_TOKENS,
        parallel_config=SimpleNamespace(decode_context_parallel_size=1),
        scheduler_config=SimpleNamespace(max_num_seqs=len(rows)),
        model_config=SimpleNamespace(max_model_len=MAX_MODEL_LEN),
    )
    spec = MambaSpec(
        block_size=BLOCK_SIZE, shapes=((1,), (1,)), dtypes=(torch.float32,)
    )
    builder = _MambaBuilder(spec, ["mamba"], config, torch.device("cpu"))
    spec = {{}}
    if drafts is not None:  # the runner passes these only on a speculative step
        spec = dict(
            num_accepted_tokens=torch.ones(len(rows), dtype=torch.int32),
            num_decode_draft_tokens_cpu=drafts,
        )
    return builder.build(0, metadata, **spec).num_decodes


def test_{name}():
    runner = _runner_stub()
    scheduler_output = SimpleNamespace(
        num_scheduled_tokens={{r: row[0] for r, row in BATCH.items()}},
        total_num_scheduled_tokens=sum(row[0] for row in BATCH.values()),
        scheduled_spec_decode_tokens={{
            r: [0] * row[1] for r, row in BATCH.items() if row[1]
        }},
    )
    runner._may_reorder_batch(scheduler_output)
    order = list(runner.input_batch.req_ids)
    # The runner's own inputs for the builder: a speculative step leaves each row's
    # draft count (-1: none) in num_decode_draft_tokens.
    num_scheduled = torch.tensor([BATCH[r][0] for r in order], dtype=torch.int32)
    _, spec_decode_metadata, _ = runner._prepare_inputs(
        scheduler_output, num_scheduled.numpy()
    )
    drafts = None
    if spec_decode_metadata is not None:
        drafts = runner.num_decode_draft_tokens.cpu[: len(order)].clone()
    num_decodes = _num_decodes(order, drafts)

    for i, req_id in enumerate(order):
        scheduled, drafts, computed, prompt = BATCH[req_id]
        # a decode, or a prompt's last token padded with drafts
        if computed and scheduled == drafts + 1 and (drafts or computed >= prompt):
            assert i < num_decodes, (
                f"batch order {{order}}: {{req_id}} (one token, {{drafts}} draft(s)) goes to "
                "the Mamba prefill kernels, which ignore its accepted count and keep no "
                "state per draft"
            )
        if not drafts and scheduled > 1:
            assert i >= num_decodes, (
                f"batch order {{order}}: {{req_id}} computes {{scheduled}} tokens without "
                "drafts but goes to the Mamba decode kernels, which keep one state per "
                "token: its next step starts from the state after the first"
            )
'''

__all__ = ["METADATA_HELPER", "V1_TEMPLATE", "V2_TEMPLATE"]
