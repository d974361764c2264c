"""The harness's deterministic token rule, shared by every tier (imports neither a tier nor vLLM).

The symbolic "model": the next token is a function of the exact prefix (its fingerprint,
`harness.states.chain`). Drafts are planned right or wrong from the scenario's acceptance pattern.
"""

from __future__ import annotations

from harness.scenario import VOCAB_SIZE


def true_token(fp: int) -> int:
    """The deterministic 'model': the next token is a function of the exact prefix."""
    return (fp >> 7) % (VOCAB_SIZE - 1) + 1


def true_next(last: int, k: int) -> int:
    """The true token k positions after the prefix whose fingerprint is `last` (a scratch chain)."""
    for _ in range(k):
        last = hash((last, true_token(last)))
    return true_token(last)


def wrong_token(t: int) -> int:
    """A token that is not `t` (a draft planned to be rejected)."""
    return t % (VOCAB_SIZE - 1) + 1


def planned_drafts(last: int, nd: int, good: int) -> list[int]:
    """nd drafts after the prefix `last`: the first `good` right, the rest wrong."""
    out = []
    for k in range(nd):
        t = true_next(last, k)
        out.append(t if k < good else wrong_token(t))
    return out


__all__ = ["planned_drafts", "true_next", "true_token", "wrong_token"]
