"""Cost of vLLM's hybrid allocator calls (allocate_slots, get_computed_blocks, free, CoW bookkeeping).

Run for real:  pytest bench --benchmark-only --benchmark-json=bench/results/bench.json
Each benchmark times one allocator call (or one small sequence, said in its name) on a fresh manager
prepared outside the timed region (pedantic setup), so rounds do not pile state on each other. Each asserts what
the call it times did (the blocks it returned, the hit it found, the copies it queued), never how long it took;
under `--benchmark-disable` (make test) the call runs once and is checked the same way.
"""

from __future__ import annotations

import itertools

import pytest

from benchlib import PRODUCTION, SMALL, make_allocator

from harness.vllm_adapter import supports_prefill_checkpoints

_ids = itertools.count()


def _request(alloc, length, shared_seed=0):
    return alloc.make_request(f"r{next(_ids)}", [(shared_seed * 7919 + i * 31) % 31999 + 1 for i in range(length)], 16)


def _prefilled(alloc, length, seed=0):
    """A request whose whole prompt has been allocated and cached (a producer of prefix-cache entries)."""
    req = _request(alloc, length, seed)
    done = 0
    while done < length:
        n = alloc.split(req, length - done)
        assert alloc.allocate(req, n) is not None
        req.num_computed_tokens += n
        done += n
    return req


def _run(benchmark, setup, call, rounds=30):
    """The last round's return value (the only round under --benchmark-disable)."""
    return benchmark.pedantic(call, setup=setup, rounds=rounds, iterations=1)


def _covered(alloc, req, group=0) -> int:
    """Tokens the request's block table of this KV cache group has slots for."""
    return len(alloc.block_ids(req.request_id)[group]) * alloc.geometry.attn_block_size


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_allocate_prefill_chunk(benchmark, info, k):
    info(geometry="small", k=k)

    def setup():
        alloc = make_allocator(**SMALL, num_speculative_tokens=k)
        return (alloc, _request(alloc, 2048)), {}

    def call(alloc, req):
        n = alloc.split(req, 2048)
        return n, alloc.allocate(req, n), alloc, req

    n, ids, alloc, req = _run(benchmark, setup, call)
    assert n > 0 and ids is not None  # the chunk fit: one block-id list per KV cache group
    assert _covered(alloc, req) >= n and all(ids), [len(g) for g in ids]


@pytest.mark.parametrize("k", [0, 2])
def test_allocate_decode_step(benchmark, info, k):
    info(geometry="small", k=k)

    def setup():
        alloc = make_allocator(**SMALL, num_speculative_tokens=k)
        req = _prefilled(alloc, 1023)
        req.append_output_token_ids([5])
        return (alloc, req), {}

    ids, alloc, req = _run(benchmark, setup, lambda alloc, req: (alloc.allocate(req, 1 + k, lookahead=k), alloc, req))
    assert ids is not None and _covered(alloc, req) >= req.num_tokens + k  # the decode token and its drafts have slots


def test_allocate_async_external_load(benchmark, info):
    info(geometry="production", external=24960)

    def setup():
        alloc = make_allocator(**PRODUCTION)
        return (alloc, _request(alloc, 25525)), {}

    ids, alloc, req = _run(benchmark, setup, lambda alloc, req: (
        alloc.allocate(req, 0, num_external=24960, delay_cache=True), alloc, req), rounds=10)
    assert ids is not None and _covered(alloc, req) >= 24960  # slots for every externally loaded token


def test_production_continuation_partial_tail(benchmark, info):
    """The seed geometry: after a 24,960-token external state, the 512-token chunk to the partial tail at
    25,472 (cached under a hash finer than the Mamba block) - the allocate_slots the seed bug went through."""
    info(geometry="production", external=24960, tail=25472, prompt=25525)

    def setup():
        alloc = make_allocator(**PRODUCTION)
        req = _request(alloc, 25525)
        alloc.allocate(req, 0, num_external=24960, delay_cache=True)
        req.num_computed_tokens = 24960
        alloc.cache_blocks(req, 24960)
        alloc.new_step()
        return (alloc, req), {}

    def call(alloc, req):
        n = alloc.split(req, 25525 - 24960)
        assert n == 512
        return alloc.allocate(req, n), alloc, req

    ids, alloc, req = _run(benchmark, setup, call, rounds=10)
    assert ids is not None and _covered(alloc, req) >= 25472  # up to the partial tail


@pytest.mark.parametrize("kind", ["full", "partial"])
def test_get_computed_blocks(benchmark, info, kind):
    info(geometry="small", hit=kind)

    def setup():
        alloc = make_allocator(**SMALL)
        _prefilled(alloc, 4096, seed=1)
        alloc.new_step()
        length = 4096 + 100 if kind == "full" else 4096 - 6  # partial: ends inside a Mamba block
        return (alloc, _request(alloc, length, 1)), {}

    _, num_local = _run(benchmark, setup, lambda alloc, req: alloc.lookup(req))
    # full: the producer's whole 4,096-token prompt; partial: a Mamba block boundary below the consumer's end, the
    # last whole block where the release keeps a state there (prefill checkpoints, 0.33+; before, align mode keeps
    # the states at the producer's chunk ends only, and a hit needs one)
    if kind == "full":
        assert num_local == 4096, num_local
    elif supports_prefill_checkpoints():
        assert num_local == (4096 - 6) // 16 * 16, num_local
    else:
        assert num_local % 16 == 0 and num_local <= (4096 - 6) // 16 * 16, num_local


def test_free(benchmark, info):
    info(geometry="small", prompt=4096)

    def setup():
        alloc = make_allocator(**SMALL)
        return (alloc, _prefilled(alloc, 4096)), {}

    def call(alloc, req):
        before = alloc.block_pool.get_num_free_blocks()
        alloc.free(req)
        return before, alloc.block_pool.get_num_free_blocks(), alloc.geometry.attn_block_size

    before, after, block = _run(benchmark, setup, call)
    assert after - before >= 4096 // block, (before, after)  # at least every attention block of the prompt is back


def test_cow_bookkeeping(benchmark, info):
    """A consumer's sub-block partial hit queues a copy-on-write; time allocate + take_kv_cache_block_copies."""
    info(geometry="small", hit="partial")

    def setup():
        alloc = make_allocator(**SMALL)
        _prefilled(alloc, 4096 - 6, seed=2)  # the producer ends inside a Mamba block: a partial-tail key
        alloc.new_step()
        req = _request(alloc, 4096, 2)  # (a consumer shorter than a block-aligned producer hits on 0.28+ only)
        blocks, local = alloc.lookup(req)
        return (alloc, req, blocks, local), {}

    def call(alloc, req, blocks, local):
        alloc.allocate(req, alloc.split(req, req.num_tokens - local, local), num_local=local, blocks=blocks)
        copies, _ = alloc.take_copies()
        return copies

    copies = _run(benchmark, setup, call)
    assert copies and all(src != dst for src, dst in copies), copies  # the partial hit queued real copies
