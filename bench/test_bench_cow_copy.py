"""Applying CoW copies to real state tensors vs a plain torch copy of the same bytes (CPU; GPU if present).

The figure that matters is the ratio: the worker applies `blocks[dst] = blocks[src]` page by page
(vllm/v1/worker/utils.py:909-955); a plain `copy_` of the same bytes is the floor.
"""

from __future__ import annotations

import pytest

from harness.vllm_adapter import torch_module

PAGE_FLOATS = 128 * 1024  # a 512 KiB page (Mamba2 conv + SSM state of one layer group is of this order)


def _pool(num_blocks, device):
    torch = torch_module()
    return torch.randn(num_blocks, PAGE_FLOATS, dtype=torch.float32, device=device)


@pytest.mark.parametrize("copies", [1, 16, 64])
def test_cow_apply_pagewise(benchmark, info, copies):
    torch = torch_module()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    pool = _pool(2 * copies + 1, device)
    pairs = [(1 + i, 1 + copies + i) for i in range(copies)]
    info(copies=copies, bytes=copies * PAGE_FLOATS * 4, device=device)

    def apply():
        for src, dst in pairs:
            pool[dst] = pool[src]

    assert not any(torch.equal(pool[dst], pool[src]) for src, dst in pairs)  # random pages: each copy shows
    benchmark.pedantic(apply, rounds=20, iterations=1)
    assert all(torch.equal(pool[dst], pool[src]) for src, dst in pairs)  # each destination holds its source
    _bytes_per_s(benchmark, copies)


@pytest.mark.parametrize("copies", [1, 16, 64])
def test_plain_torch_copy_same_bytes(benchmark, info, copies):
    torch = torch_module()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    src = torch.randn(copies, PAGE_FLOATS, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    info(copies=copies, bytes=copies * PAGE_FLOATS * 4, device=device)
    benchmark.pedantic(lambda: dst.copy_(src), rounds=20, iterations=1)
    assert torch.equal(dst, src)  # the same bytes, copied
    _bytes_per_s(benchmark, copies)


def _bytes_per_s(benchmark, copies):
    stats = getattr(benchmark, "stats", None)  # None under --benchmark-disable
    if stats is not None:
        benchmark.extra_info["bytes_per_s"] = copies * PAGE_FLOATS * 4 / stats.stats.mean
