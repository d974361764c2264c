"""How allocator cost grows: prompt length, concurrent requests, speculative tokens, pool pressure."""

from __future__ import annotations

import pytest

from benchlib import SMALL, make_allocator
from test_bench_allocator import _covered, _prefilled, _request, _run  # noqa: I001


@pytest.mark.parametrize("prompt", [1024, 4096, 16384, 65536, 131072])
def test_scaling_prompt_length(benchmark, info, prompt):
    """One decode step's allocate_slots for a request whose prompt (all cached) has this length."""
    info(geometry="small-long", prompt=prompt)
    geo = dict(SMALL, num_blocks=prompt // 4 + 64, max_model_len=prompt + 64)

    def setup():
        alloc = make_allocator(**geo)
        req = _prefilled(alloc, prompt - 1)
        req.append_output_token_ids([5])
        return (alloc, req), {}

    ids, alloc, req = _run(benchmark, setup, lambda alloc, req: (alloc.allocate(req, 1), alloc, req), rounds=5)
    assert ids is not None and _covered(alloc, req) >= prompt  # the decode token has a slot after the whole prompt


@pytest.mark.parametrize("concurrent", [1, 16, 64, 256])
def test_scaling_concurrent_requests(benchmark, info, concurrent):
    """One scheduler step: a decode allocate_slots for each of N running requests (512-token prompts)."""
    info(geometry="small", concurrent=concurrent)
    geo = dict(SMALL, num_blocks=concurrent * 200 + 64)

    def setup():
        alloc = make_allocator(**geo)
        reqs = []
        for i in range(concurrent):
            req = _prefilled(alloc, 511, seed=i + 10)
            req.append_output_token_ids([5])
            reqs.append(req)
        alloc.new_step()
        return (alloc, reqs), {}

    def call(alloc, reqs):
        return [alloc.allocate(req, 1) for req in reqs]

    ids = _run(benchmark, setup, call, rounds=5)
    assert len(ids) == concurrent and all(i is not None for i in ids)  # every running request got its slot


@pytest.mark.parametrize("pool", [1280, 640, 320])
def test_scaling_pool_pressure(benchmark, info, pool):
    """Prefill of a fresh 1,024-token request when the pool is full of evictable cached blocks."""
    info(geometry="small", pool_blocks=pool)
    geo = dict(SMALL, num_blocks=pool)

    def setup():
        alloc = make_allocator(**geo)
        for i in range(pool // 280):  # fill the pool with cached, evictable 1,000-token prefixes
            alloc.free(_prefilled(alloc, 1000, seed=100 + i))
        alloc.new_step()
        return (alloc, _request(alloc, 1024, 999)), {}

    def call(alloc, req):
        n = alloc.split(req, 1024)
        return n, alloc.allocate(req, n), alloc, req

    n, ids, alloc, req = _run(benchmark, setup, call, rounds=10)
    assert ids is not None and _covered(alloc, req) >= n > 0  # it fit, taking evictable cached blocks where needed
