"""The engine tier's KV connector: a real `KVConnectorBase_V1` + `SupportsHMA` subclass that vLLM's own
`KVConnectorFactory` loads from `KVTransferConfig(kv_connector="HarnessConnector",
kv_connector_module_path="harness.engine.connector")`.

Scheduler side only (the harness plays the worker side). It reports each request's scenario external hit
(`get_num_new_matched_tokens`: the hit past the block-aligned local hit vLLM shows it, sync or async), and,
once vLLM has allocated blocks for the external tokens (`update_state_after_alloc` with
`num_external_tokens > 0`), asks the engine to deliver the exact boundary state into the block the Mamba
group allocated for it. An async load is then "in flight" for the scenario's `load_steps` steps; the engine
reports it finished through `KVConnectorOutput(finished_recving=...)`, which moves the request out of
vLLM's `WAITING_FOR_REMOTE_KVS`. A hit is consumed once allocated: later lookups (a preempted request
coming back) see no external tokens, as in the mirrored tier.

This module imports vLLM (the engine tier's second door into vLLM, see harness/engine/__init__.py).
"""

from __future__ import annotations

from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    SupportsHMA,
)


class HarnessConnector(KVConnectorBase_V1, SupportsHMA):
    """Scenario-driven external hits. `plan` maps a request id to (tokens, async, load_steps); `engine` is
    the object that delivers states and tracks loads (set by the engine after the Scheduler built us)."""

    def __init__(self, vllm_config, role, kv_cache_config=None, **kwargs) -> None:
        try:
            super().__init__(vllm_config, role, kv_cache_config, **kwargs)
        except TypeError:  # releases whose base takes (vllm_config, role) only
            super().__init__(vllm_config, role)
        self.plan: dict[str, tuple[int, bool, int]] = {}
        self.engine = None
        self.used: set[str] = set()
        self.offered: dict[str, tuple[int, int, bool]] = {}  # request -> (local shown, ext offered, async)

    @classmethod
    def supports_lookahead_block_hashes(cls, kv_transfer_config) -> bool:
        """Core lookahead hashing (0.34.0, base.py:199-203: off by default), as NIXL, offloading and Mooncake
        support it: asked for by the scenario (geometry.lookahead_hashes, through kv_connector_extra_config)."""
        return bool((kv_transfer_config.kv_connector_extra_config or {}).get("lookahead_block_hashes"))

    # -- scheduler side ------------------------------------------------------------------------
    def get_num_new_matched_tokens(self, request, num_computed_tokens: int) -> tuple[int | None, bool]:
        rid = request.request_id
        spec = self.plan.get(rid)
        if spec is None or rid in self.used:
            return 0, False
        tokens, is_async, _ = spec
        hit = min(tokens, request.num_tokens - 1)
        ext = max(0, hit - num_computed_tokens)
        self.offered[rid] = (num_computed_tokens, ext, is_async and ext > 0)
        return ext, is_async and ext > 0

    def may_load_async(self, request) -> bool:
        """Whether this request's hit may load asynchronously (base.py:639-649 in 0.34.0: with
        --max-num-inflight-kv-loads such a request is parked in `async_kv_waiting` and may start its load while the
        running batch is full): the scenario gives it an async hit not yet consumed."""
        spec = self.plan.get(request.request_id)
        return spec is not None and spec[1] and request.request_id not in self.used

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        rid = request.request_id
        if num_external_tokens <= 0 or rid in self.used:
            return
        self.used.add(rid)
        local, _, is_async = self.offered.get(rid, (0, num_external_tokens, False))
        if self.engine is not None:
            self.engine.connector_allocated(rid, local + num_external_tokens, is_async, self.plan[rid][2])

    def build_connector_meta(self, scheduler_output) -> KVConnectorMetadata:
        return KVConnectorMetadata()

    def request_finished(self, request, block_ids) -> tuple[bool, dict[str, Any] | None]:
        return False, None

    def request_finished_all_groups(self, request, block_ids) -> tuple[bool, dict[str, Any] | None]:
        return False, None

    # -- worker side (never used: the harness plays the worker) ----------------------------------
    def start_load_kv(self, forward_context, **kwargs: Any) -> None:
        return None

    def wait_for_layer_load(self, layer_name: str) -> None:
        return None

    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs: Any) -> None:
        return None

    def wait_for_save(self) -> None:
        return None


__all__ = ["HarnessConnector", "KVConnectorRole"]
