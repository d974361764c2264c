"""The uncached reference: the same model over the whole token sequence from a zero state, in one chunk,
no prefix cache, no paging. What a correct serving engine must reproduce."""

from __future__ import annotations

import torch

from models.hybrid import HybridLM, MambaState, contiguous_kv


def full_forward(model: HybridLM, tokens: list[int], state_at: list[int] | None = None):
    """Logits for every position (row j predicts token j+1) and, per Mamba layer, the states after
    tokens `state_at`; also the keys/values of every attention layer."""
    kv, store = contiguous_kv()
    logits, outs = model.forward(tokens, 0, model.zero_states(), kv, state_at or [len(tokens) - 1], logits_from=0)
    return logits, outs, store


def teacher_forced_logits(model: HybridLM, tokens: list[int]) -> torch.Tensor:
    """Reference logits along a given sequence: row j predicts token j+1."""
    return full_forward(model, tokens)[0]


def prefix_state(model: HybridLM, tokens: list[int]) -> tuple[list[MambaState], dict]:
    """What a connector loads for a prefix: each Mamba layer's state after its last token, and every
    attention layer's keys/values for its positions."""
    _, outs, store = full_forward(model, tokens)
    return [o.last() for o in outs], store


def greedy(model: HybridLM, prefix: list[int], count: int) -> list[int]:
    """Greedy continuation, each token from a fresh uncached run over the whole sequence."""
    seq = list(prefix)
    for _ in range(count):
        seq.append(int(torch.argmax(teacher_forced_logits(model, seq)[-1])))
    return seq[len(prefix):]
