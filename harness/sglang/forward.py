"""The simulated forward: what SGLang's Mamba layers read and write, on the slot ids of `env.StateIO`.

Each request's kernel reads its working slot (`req.kv.mamba_pool_idx`) as the initial state when it has a prefix
(srt/layers/attention/mamba/mamba2_metadata.py:261: `has_initial_states = context_lens_tensor > 0`; no prefix
starts from the zero state), folds the tokens it feeds into it and writes the result back, so a wrong initial
state carries forward. With extra_buffer the tracking slots are written where the GDN backend's kernels write them
(hybrid_linear_attn_backend.py:537-556): prefill final rows and h-rows from `build_prefill_track_plan` (flat grid,
mamba2=False), decode rows where `mamba_track_mask_cpu` is set. Every read becomes a `Read` of the trace.
"""

from __future__ import annotations

import torch
from sglang.srt.layers.attention.mamba.prefill_track_metadata import build_prefill_track_plan

from harness.sglang.geometry import scenario_id
from harness.states import ZERO_STATE, State, chain
from harness.tokens import true_token
from harness.trace import Read, Trace


def fold(state: State | None, tokens) -> State | None:
    """The recurrent update: the state after feeding `tokens` to `state` (garbage stays garbage)."""
    if state is None:
        return None
    n, fp = state
    return n + len(tokens), chain([fp], tokens)[-1]


def prefix_fps(trace: Trace, req) -> list[int]:
    """The request's prefix fingerprints, extended over the outputs SGLang has recorded so far."""
    fps = trace.prefixes[scenario_id(req)]
    seq = list(req.origin_input_ids) + list(req.output_ids)
    if len(seq) + 1 > len(fps):
        chain(fps, seq[len(fps) - 1:])
    return fps


def read_initial(env, trace: Trace, step: int, req, fed: int) -> State | None:
    """The kernel's initial state for `req` having fed its first `fed` tokens (its working slot; the zero state
    without a prefix), recorded as the trace's Read."""
    slot = int(req.kv.mamba_pool_idx)
    got = env.io.read(slot) if fed > 0 else ZERO_STATE
    fps = prefix_fps(trace, req)
    trace.reads.append(Read(step, scenario_id(req), "initial", 1, 0, slot, got, got, (fed, fps[fed])))
    return got


def _extend(env, trace: Trace, step: int, batch) -> list[int]:
    io, out, finals, inits = env.io, [], {}, {}
    for i, req in enumerate(batch.reqs):
        seq = list(req.full_untruncated_fill_ids)
        pre, end = req.prefix_len, req.extend_end
        inits[i] = read_initial(env, trace, step, req, pre)
        finals[i] = fold(inits[i], seq[pre:end])
        io.write(int(req.kv.mamba_pool_idx), finals[i])
        out.append(true_token(prefix_fps(trace, req)[end]))  # discarded by SGLang after a non-final chunk
    if env.geom.extra and batch.mamba_track_indices is not None:
        plan = build_prefill_track_plan(batch.mamba_prefill_track_mask_cpu, batch.mamba_track_seqlens_cpu,
                                        list(batch.extend_lens), list(batch.prefix_lens), env.geom.cache_chunk,
                                        mamba2=False)
        dst = batch.mamba_track_indices.tolist()
        for row in plan.final_rows:
            io.write(dst[row], finals[row])
        for row in plan.h_rows:  # a chunk-boundary state inside this extend
            req = batch.reqs[row]
            depth = req.prefix_len + plan.chunk_indices[row] * env.geom.cache_chunk
            io.write(dst[row], fold(inits[row], list(req.full_untruncated_fill_ids)[req.prefix_len:depth]))
    return out


def _decode(env, trace: Trace, step: int, batch) -> list[int]:
    out, finals = [], {}
    for i, req in enumerate(batch.reqs):
        seq = list(req.origin_input_ids) + list(req.output_ids)  # the input is the last output token
        got = read_initial(env, trace, step, req, len(seq) - 1)
        finals[i] = fold(got, seq[-1:])
        env.io.write(int(req.kv.mamba_pool_idx), finals[i])
        out.append(true_token(prefix_fps(trace, req)[len(seq)]))
    if env.geom.extra and batch.mamba_track_indices is not None:
        dst = batch.mamba_track_indices.tolist()
        for i, tracked in enumerate(batch.mamba_track_mask_cpu):
            if tracked and dst[i] >= 0:
                env.io.write(dst[i], finals[i])
    return out


def simulated_forward(env, trace: Trace, step: int, batch):
    """Read, fold and write each request's state; the next tokens are the harness's token rule (a function of the
    true prefix), as SGLang's sampler would return them."""
    out = _extend(env, trace, step, batch) if batch.forward_mode.is_extend() else _decode(env, trace, step, batch)
    return torch.tensor(out, dtype=torch.int64)
