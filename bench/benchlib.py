"""Shared benchmark helpers: real vLLM allocators through the harness adapter."""

from __future__ import annotations

from harness.scenario import Geometry
from harness.vllm_adapter import Allocator

SMALL = dict(hash_block_size=4, attn_block_size=4, mamba_block_size=16, num_blocks=4096, max_model_len=8192)
# Reconstructed from the seed report: external state at 24,960, partial tail at 25,472, prompt end at 25,525.
PRODUCTION = dict(hash_block_size=128, attn_block_size=128, mamba_block_size=1024, num_blocks=8192,
                  max_model_len=131072, token_budget=8192)


def make_allocator(**geometry) -> Allocator:
    return Allocator(Geometry(**geometry))
