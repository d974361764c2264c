"""Tier e2e's KV connector: a real `KVConnectorBase_V1` + `SupportsHMA` subclass that vLLM loads as it loads any
(`KVTransferConfig(kv_connector="E2EConnector", kv_connector_module_path="harness.e2e.connector")`), both roles.

An external hit is served with real data: before the scenario runs, the engine computes the hit's prefix as a
"donor" request under a cache salt of its own (harness/e2e/engine.py) and keeps, in host memory, its attention
blocks and its Mamba state (conv and SSM, the column of the prefix's last token: align mode's running state).
When vLLM allocates blocks for the external tokens, the worker side copies the donor's attention blocks past the
local hit and its state into the blocks vLLM handed the request, before that step's forward: what a real
connector moving another instance's KV would leave there. A sync load is done then; an async one is reported
finished (`get_finished`) after the scenario's `load_steps` steps, as vLLM's own async connectors report. A load
the scenario marks `load_fails` writes nothing and is reported failed (`get_transfer_results`, 0.30+).

Scheduler and worker sides share one `Store` (the engine's; named in `kv_connector_extra_config["store"]`), as
the two roles of one in-process engine share its memory.

This module imports vLLM (tier e2e's door into vLLM's connector API, see harness/e2e/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    SupportsHMA,
)


@dataclass
class Donor:
    tokens: int  # the prefix it computed
    # layer -> per KV tensor: the rows of the prefix's blocks in column order (attention), or the row of its last
    # column (Mamba: conv and SSM state)
    rows: dict[str, list[torch.Tensor]]


@dataclass
class Load:
    request: str
    donor: tuple  # the donor's key: (its prefix, the patches it was computed under)
    first_col: int  # the first attention column past the local hit
    tables: tuple[list[int], ...]  # the request's block ids per KV cache group when allocated


@dataclass
class Store:
    """What both roles of one engine share: the plan (internal request id -> the donor key, async, load
    steps, whether the load fails), donors by key, loads allocated but not yet sent to the worker, the worker's KV tensors, and the
    scheduler's KV cache manager (whose tables a load writes into)."""

    plan: dict[str, tuple[tuple, bool, int, bool]] = field(default_factory=dict)  # donor, async, steps, fails
    donors: dict[tuple, Donor] = field(default_factory=dict)
    offered: dict[str, int] = field(default_factory=dict)  # request -> the local hit vLLM showed the connector
    pending: list[Load] = field(default_factory=list)
    used: set[str] = field(default_factory=set)
    # layer -> its KV tensors as the layer reads them (attention: K and V; Mamba: conv and SSM state), each with the
    # dimension that indexes blocks
    kv_caches: dict[str, list[tuple[torch.Tensor, int]]] = field(default_factory=dict)
    manager: Any = None
    kv_cache_config: Any = None
    block_size: int = 0
    loaded: list[tuple[str, int]] = field(default_factory=list)  # (request, tokens) of each load done

    def groups(self) -> list[tuple[str, list[str]]]:
        """(kind, layer names) per KV cache group, in vLLM's group order."""
        out = []
        for g in self.kv_cache_config.kv_cache_groups:
            kind = "mamba" if "Mamba" in type(g.kv_cache_spec).__name__ else "attention"
            out.append((kind, list(g.layer_names)))
        return out

    def bind(self, forward_context: dict) -> None:
        """The worker's KV tensors, read from each layer as vLLM bound them (`layer.kv_cache`; a list per virtual
        engine on older releases): every tensor whose size along some leading dimension is the pool's."""
        num_blocks = self.kv_cache_config.num_blocks
        for _, layers in self.groups():
            for layer in layers:
                found = []
                for t in _tensors(getattr(forward_context[layer], "kv_cache", None)):
                    dim = next((d for d in (0, 1) if t.dim() > d and t.shape[d] == num_blocks), None)
                    if dim is not None:
                        found.append((t, dim))
                if not found:
                    raise RuntimeError(f"tier e2e: no KV tensor with {num_blocks} blocks bound to layer {layer}")
                self.kv_caches[layer] = found

    def _columns(self, kind: str, table: list[int], first: int, last: int) -> torch.Tensor:
        return torch.tensor([table[last]] if kind == "mamba" else table[first:last + 1], dtype=torch.long)

    def snapshot(self, key: tuple, tables: tuple[list[int], ...]) -> None:
        """Keep a donor's prefix (key: the prefix, then what it was computed under): its attention blocks, the
        Mamba state of its last column."""
        n = len(key[0])
        last = (n - 1) // self.block_size
        rows = {}
        for (kind, layers), table in zip(self.groups(), tables):
            idx = self._columns(kind, table, 0, last)
            for layer in layers:
                rows[layer] = [t.index_select(d, idx).clone() for t, d in self.kv_caches[layer]]
        self.donors[key] = Donor(n, rows)

    def load(self, job: Load) -> None:
        """The donor's data into the blocks vLLM handed the request: attention columns past the local hit, the
        Mamba state at the hit's last column."""
        donor = self.donors[job.donor]
        last = (donor.tokens - 1) // self.block_size
        for (kind, layers), table in zip(self.groups(), job.tables):
            first = last if kind == "mamba" else job.first_col
            idx = self._columns(kind, table, first, last)
            for layer in layers:
                for (t, d), saved in zip(self.kv_caches[layer], donor.rows[layer]):
                    src = saved if kind == "mamba" else saved.narrow(d, first, last + 1 - first)
                    t.index_copy_(d, idx, src)
        self.loaded.append((job.request, donor.tokens))


def _tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in _tensors(x)]
    return []


STORES: dict[str, Store] = {}


class _Meta(KVConnectorMetadata):
    def __init__(self, loads: list[Load]) -> None:
        self.loads = loads


class E2EConnector(KVConnectorBase_V1, SupportsHMA):
    def __init__(self, vllm_config, role, kv_cache_config=None, **kwargs) -> None:
        try:
            super().__init__(vllm_config, role, kv_cache_config, **kwargs)
        except TypeError:  # releases whose base takes (vllm_config, role) only
            super().__init__(vllm_config, role)
        extra = vllm_config.kv_transfer_config.kv_connector_extra_config
        self.store = STORES[extra["store"]]
        if kv_cache_config is not None:
            self.store.kv_cache_config = kv_cache_config
        self.store.block_size = vllm_config.cache_config.block_size
        self.vllm_config = vllm_config
        self.in_flight: dict[str, int] = {}  # worker: async request -> steps until its load reports finished
        self.failing: set[str] = set()  # worker: async loads that fail (nothing written; reported failed)

    # -- scheduler side -----------------------------------------------------------------------------------
    def get_num_new_matched_tokens(self, request, num_computed_tokens: int) -> tuple[int | None, bool]:
        rid = request.request_id
        plan = self.store.plan.get(rid)
        if plan is None or rid in self.store.used:
            return 0, False
        key, is_async = plan[:2]
        ext = max(0, len(key[0]) - num_computed_tokens)
        self.store.offered[rid] = num_computed_tokens
        return ext, is_async and ext > 0

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        rid = request.request_id
        if num_external_tokens <= 0 or rid in self.store.used:
            return
        self.store.used.add(rid)
        local = self.store.offered.get(rid, 0)
        # the tables are read in build_connector_meta, once this step's allocation is complete
        self.store.pending.append(Load(rid, self.store.plan[rid][0], local // self.store.block_size, ()))

    def build_connector_meta(self, scheduler_output) -> KVConnectorMetadata:
        loads, self.store.pending = self.store.pending, []
        for job in loads:
            job.tables = tuple(list(t) for t in self.store.manager.get_block_ids(job.request))
        return _Meta(loads)

    def request_finished(self, request, block_ids) -> tuple[bool, dict[str, Any] | None]:
        return False, None

    def request_finished_all_groups(self, request, block_ids) -> tuple[bool, dict[str, Any] | None]:
        return False, None

    # -- worker side ------------------------------------------------------------------------------------
    def register_kv_caches(self, kv_caches) -> None:
        # the layers' own bindings, whatever this release registers (0.32.0 registers attention layers only)
        self.store.bind(self.vllm_config.compilation_config.static_forward_context)

    def start_load_kv(self, forward_context, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        for job in getattr(meta, "loads", ()):
            _, is_async, steps, fails = self.store.plan[job.request]
            if fails:  # a failed transfer leaves the blocks as vLLM handed them
                self.failing.add(job.request)
            else:
                self.store.load(job)
            if is_async:
                self.in_flight[job.request] = steps

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        done = set()
        for rid in list(self.in_flight):
            self.in_flight[rid] -= 1
            if self.in_flight[rid] <= 0:
                del self.in_flight[rid]
                done.add(rid)
        return None, done or None

    def get_transfer_results(self, finished_req_ids: set[str]):
        """Finished loads, the failed among them in `failed_recving` (by request: vLLM refuses block-level load
        errors with several KV cache groups), as vLLM's connectors report them (base.py:401-410 in 0.32.0); the
        scheduler's own recovery runs under `kv_load_failure_policy`."""
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorTransferResults

        _, done = self.get_finished(finished_req_ids)
        failed = {rid for rid in done or () if rid in self.failing}
        self.failing -= failed
        return KVConnectorTransferResults(finished_recving=set(done or ()), failed_recving=failed)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return None

    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs: Any) -> None:
        return None

    def wait_for_save(self) -> None:
        return None


__all__ = ["E2EConnector", "STORES", "Store"]
