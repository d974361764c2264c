"""A real drafter for speculative decoding: n-gram prompt lookup, as vLLM's NgramProposer does
(`vllm/v1/spec_decode/ngram_proposer.py`: longest suffix n-gram between min_n and max_n that occurred
earlier in the request's tokens; propose the tokens that followed it). Acceptance then comes from the
target model's verification, not from a script."""

from __future__ import annotations


def ngram_propose(tokens: list[int], k: int, min_n: int = 1, max_n: int = 3) -> list[int]:
    """Up to k draft tokens following the latest earlier occurrence of the longest matching suffix."""
    if k <= 0:
        return []
    for n in range(min(max_n, len(tokens) - 1), min_n - 1, -1):
        suffix = tokens[-n:]
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start:start + n] == suffix:
                return tokens[start + n:start + n + k]
    return []
