# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Full-sequence admission of a partial prefix hit counts one block too many.

With a partial local hit (the prefix-match unit below the block), the request
shares the hit's attention tail block and replaces it by a copy-on-write block.
get_num_blocks_to_allocate counts both (the shared tail, evictable once its
owner finished, and its copy): on a pool vLLM's start-up check accepts for
max_model_len, a request that fits is never admitted and the engine hangs.
Hand-sized from hybrid-harness's scenarios/admission-partial-hit-cow-counted-twice.json.
"""

import pytest
import torch

from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core import kv_cache_utils
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
)
from vllm.v1.request import Request, RequestStatus

pytestmark = pytest.mark.cpu_test

BLOCK, PREFIX_MATCH_UNIT, MAX_MODEL_LEN = 8, 2, 224


def _request(request_id: str, prompt: list[int], max_tokens: int) -> Request:
    return Request(
        request_id=request_id,
        prompt_token_ids=prompt,
        sampling_params=SamplingParams(max_tokens=max_tokens),
        pooling_params=None,
        block_hasher=kv_cache_utils.get_request_block_hasher(PREFIX_MATCH_UNIT, sha256),
    )


def test_partial_hit_is_admitted_on_a_pool_that_holds_it():
    kv_cache_utils.init_none_hash(sha256)
    attention = FullAttentionSpec(
        block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    mamba = MambaSpec(
        block_size=BLOCK,
        shapes=((1, 1),),
        dtypes=(torch.float32,),
        mamba_cache_mode="align",
        num_prefill_checkpoint_blocks=1,  # Mamba2's default
        prefill_checkpoint_alignment=1,
    )
    manager = KVCacheManager(
        KVCacheConfig(
            num_blocks=32,  # what vLLM's start-up check accepts for 224 tokens
            kv_cache_tensors=[],
            kv_cache_groups=[
                KVCacheGroupSpec(["attn"], attention),
                KVCacheGroupSpec(["mamba"], mamba),
            ],
            prefix_cache_retention_interval=0,
        ),
        max_model_len=MAX_MODEL_LEN,
        scheduler_block_size=BLOCK,
        hash_block_size=PREFIX_MATCH_UNIT,
        enable_caching=True,
    )
    shared = list(range(1, 13))

    # a: a 13-token prompt, prefilled and finished; its first 12 tokens stay cached.
    a = _request("a", shared + [100], max_tokens=1)
    hit, _, *_ = manager.get_computed_blocks(a)
    assert manager.allocate_slots(
        a, 13, new_computed_blocks=hit, full_sequence_must_fit=True
    )
    a.num_computed_tokens = 13
    a.status = RequestStatus.FINISHED_STOPPED
    manager.free(a)

    # b: 209 tokens sharing a's 12 (one block and half of the next), 8 to
    # generate: it runs in the pool's 31 usable blocks. Admission must count
    # the shared half block or the copy that replaces it, not both (32).
    manager.new_step_starts()
    b = _request("b", shared + list(range(200, 397)), max_tokens=8)
    hit, num_hit, *_ = manager.get_computed_blocks(b)
    assert num_hit == 12
    new_blocks = manager.allocate_slots(
        b,
        4,  # the prompt's next chunk, up to the block boundary
        num_new_computed_tokens=12,
        new_computed_blocks=hit,
        full_sequence_must_fit=True,
    )
    assert new_blocks is not None
