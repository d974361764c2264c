# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""A sync KV-connector hit continued in the same allocate_slots call (align mode).

The hit's last block is loaded into a Mamba block of its own and the continuation
needs the next one, but MambaManager.get_num_blocks_to_allocate counts one: on a
pool without that block allocate_slots admits the request and get_new_blocks
raises ValueError in the scheduler. It must return None (the request waits).
Hand-sized from hybrid-harness's scenarios/sync-external-admission-undercount.json.
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
from vllm.v1.request import Request

pytestmark = pytest.mark.cpu_test

BLOCK, PREFIX_MATCH_UNIT = 16, 4


def test_sync_external_hit_continued_in_one_call_counts_its_block():
    kv_cache_utils.init_none_hash(sha256)
    attention = FullAttentionSpec(
        block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    mamba = MambaSpec(
        block_size=BLOCK,
        shapes=((1, 1),),
        dtypes=(torch.float32,),
        mamba_cache_mode="align",
    )
    config = KVCacheConfig(
        num_blocks=7,  # the null block and 6 usable
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(["attn"], attention),
            KVCacheGroupSpec(["mamba"], mamba),
        ],
    )
    manager = KVCacheManager(
        config,
        max_model_len=128,
        scheduler_block_size=BLOCK,
        hash_block_size=PREFIX_MATCH_UNIT,
        enable_caching=True,
    )
    request = Request(
        request_id="a",
        prompt_token_ids=list(range(1, 66)),  # 4 blocks + 1 token
        sampling_params=SamplingParams(max_tokens=1),
        pooling_params=None,
        block_hasher=kv_cache_utils.get_request_block_hasher(PREFIX_MATCH_UNIT, sha256),
    )
    blocks, num_local, *_ = manager.get_computed_blocks(request)
    assert num_local == 0

    # The connector loads the first 64 tokens synchronously; the 65th is computed
    # in the same step. Attention needs 5 blocks and Mamba 2 (the loaded state's
    # block and the running one): 7 > 6 free, so the request must wait.
    new_blocks = manager.allocate_slots(
        request,
        1,
        num_new_computed_tokens=0,
        new_computed_blocks=blocks,
        num_external_computed_tokens=64,
        full_sequence_must_fit=True,
    )
    assert new_blocks is None
