"""Known issues of stock vLLM releases: findings that are real but already reported.

A finding whose signature matches a known issue is still kept on disk and listed, marked KNOWN, but
does not turn a campaign or sweep red, so a nightly job fails only on something new.
"""

from __future__ import annotations

KNOWN_ISSUES = (
    {
        "id": "sync-external-admission-undercount",
        "signature_prefix": "vllm-exception:",
        "signature_suffix": " in get_new_blocks",
        "releases": "seen on 0.27.1 and 0.33.0",
        "repro": "scenarios/sync-external-admission-undercount.json",
        "summary": "MambaManager.get_num_blocks_to_allocate does not count the external block of a sync "
                   "connector hit whose continuation crosses a Mamba block; allocate_slots admits the "
                   "request and get_new_blocks raises ValueError instead of returning None",
    },
    {
        "id": "v1-readd-resets-num-accepted",
        "signature_prefix": "provenance:",
        "signature_suffix": "-after-accepted-reset",
        "releases": "seen on 0.33.0 (V1 GPUModelRunner, protocol doc §6.6)",
        "repro": "scenarios/spec-unscheduled-accepted-reset.json",
        "summary": "with spec decode, a running request left unscheduled for a step (token budget) is re-added "
                   "to the persistent batch with num_accepted_tokens reset to 1 (gpu_input_batch.py:479), but "
                   "its running SSM state sits at column curr + accepted - 1: the next step starts from the "
                   "state after the first token of the previous step",
    },
)


def known_issue(signature: str) -> dict | None:
    for issue in KNOWN_ISSUES:
        if signature.startswith(issue["signature_prefix"]) and signature.endswith(issue["signature_suffix"]):
            return issue
    return None
