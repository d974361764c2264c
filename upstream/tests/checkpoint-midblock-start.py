# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""A prompt-final chunk starting mid-block stops at the block boundary (align mode).

With Mamba prefill checkpoint blocks, Scheduler._mamba_block_aligned_split drops
that stop when the chunk can use an internal prefill checkpoint: the chunk runs
past the boundary, and cache_blocks keys its start block under the boundary's
hash though no forward wrote the boundary's state. Hand-sized from
hybrid-harness's scenarios/checkpoint-midblock-start.json (request b).
"""

from types import SimpleNamespace

import pytest

from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request

pytestmark = pytest.mark.cpu_test

BLOCK, PREFIX_MATCH_UNIT = 16, 4


def _scheduler() -> SimpleNamespace:
    """What the split reads: 16-token blocks, 4-token prefix-match unit, one
    prefill checkpoint block (Mamba2's default), no EAGLE, no chunk limit."""
    return SimpleNamespace(
        block_size=BLOCK,
        hash_block_size=PREFIX_MATCH_UNIT,
        cache_config=SimpleNamespace(block_size=BLOCK),
        scheduler_config=SimpleNamespace(long_prefill_token_threshold=0),
        max_num_scheduled_tokens=2048,
        use_eagle=False,
        use_eagle_block_drop=False,
        num_hash_lookahead_tokens=0,
        mamba_partial_cache_hit=True,
        mamba_has_prefill_checkpoint_blocks=True,
        mamba_prefill_checkpoint_alignment=1,
        mamba_shared_prefix_checkpoint=False,
        mamba_fine_grained_prefix_cache=False,
    )


def test_prompt_final_chunk_from_mid_block_stops_at_the_block_boundary():
    request = Request(
        request_id="b",
        prompt_token_ids=list(range(1, 81)),
        sampling_params=SamplingParams(max_tokens=1),
        pooling_params=None,
    )
    # A 36-token prefix-cache hit (2 blocks and one prefix-match unit): the rest
    # of the prompt, 44 tokens, is one chunk starting 4 tokens into block 2.
    num_new = Scheduler._mamba_block_aligned_split(_scheduler(), request, 44, 36)
    assert num_new == 48 - 36  # up to block 2's end, where its state is cached
