"""The wing's external KV store: a `UnifiedCacheLinker` (srt/mem_cache/unified_cache/unified_cache_linker.py) that
SGLang's own factory loads as an out-of-tree linker (`--enable-unified-cache-external-linker
--unified-cache-external-linker-backend dynamic --unified-cache-external-linker-config
'{"linker": "ScenarioStore", "linker_module_path": "harness.sglang.linker"}'`, linker_factory.py:76-105), the
counterpart of the engine tier's vLLM connector (harness/engine/connector.py).

What it holds: page keys (SGLang's chained storage hashes) for the KV pages, and one Mamba state per key
(a node's state is valid only at its end boundary: mamba.py:729-760). The driver seeds it with each scenario
request's `external` hit (`seed`); SGLang's write-through (`offload`, every inserted node with the linker on:
unified_cache_linker.py:275) adds this instance's own nodes, read from the device slots they name. The store keeps
no KV contents (the wing judges Mamba states only); a Mamba load writes the stored state into the slot SGLang
allocated for it.

Loads run as SGLang's layer-wise contract asks: `load` queues, `start_layer_wise_loading` (at batch build,
scheduler.py:4351-4355) writes the queued states and completes or fails the batch's layer futures, and
`finish_layer_wise_loading` (after the forward, scheduler.py:4926) reports whether every layer landed. A scenario
request whose hit `load_fails` writes nothing and fails its batch; SGLang then aborts every request that loaded in
that batch (unified_cache_linker.py:570-600).
"""

from __future__ import annotations

from array import array

from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.unified_cache.unified_cache_linker import LayerWiseLoadCounter, UnifiedCacheLinker
from sglang.srt.mem_cache.utils import get_storage_hash_str

from harness.states import State, chain

LINKER_CONFIG = {"linker": "ScenarioStore", "linker_module_path": __name__}


class LoadFailed(RuntimeError):
    """What a failing layer reports (LayerWiseLoadCounter.fail): the scenario's hit was set to fail."""


class ScenarioStore(UnifiedCacheLinker):
    """One replay's external store. `io` (harness.sglang.env.StateIO) is set by the env after SGLang built it."""

    def __init__(self, server_args, params, *, components, extra_config, forward_stream=None) -> None:
        self.page = server_args.page_size
        self.layer_done_counter = LayerWiseLoadCounter(num_layers=1)
        self.pools = {PoolName.KV: None, PoolName.MAMBA: None}
        self.forward_stream = None
        self.io = None
        self.kv_keys: set[str] = set()
        self.states: dict[str, State | None] = {}
        self.failing: set[str] = set()  # SGLang rids whose next load fails
        self.queued: dict[str, list[PoolTransfer]] = {}
        self.offloads_done = 0

    def seed(self, rid: str, tokens: list[int], hit: int, state_every: int, fails: bool) -> None:
        """The scenario's external hit of `tokens`' first `hit` tokens: its whole pages, a Mamba state at every
        `state_every`-token boundary among them and at the last page's end (as a producer instance's write-through
        would have left it), keyed as SGLang keys a sequence from its head (get_storage_hash_str with no prior)."""
        pages = hit // self.page
        keys = get_storage_hash_str(RadixKey(array("q", tokens[:pages * self.page])), None, page_size=self.page)
        fps = chain([0], tokens[:pages * self.page])
        self.kv_keys.update(keys)
        for p in range(1, pages + 1):
            if (p * self.page) % state_every == 0 or p == pages:
                self.states[keys[p - 1]] = (p * self.page, fps[p * self.page])
        if fails:
            self.failing.add(rid)

    def lookup(self, rid: str, transfers: list[PoolTransfer]) -> list[int]:
        """Every page count whose pages are all held and whose last page has a Mamba state (TRAILING_PAGES)."""
        keys = next(t for t in transfers if t.name == PoolName.KV).keys
        out = []
        for p, key in enumerate(keys, start=1):
            if key not in self.kv_keys:
                break
            if key in self.states:
                out.append(p)
        return out

    def load(self, rid: str, transfers: list[PoolTransfer]) -> bool:
        """Queued, or refused (SGLang then recomputes: unified_cache_linker.py:440-444) when an object asked for is
        not held."""
        for t in transfers:
            held = self.kv_keys if t.name == PoolName.KV else self.states
            if any(key not in held for key in t.keys):
                return False
        self.queued[rid] = transfers
        return True

    def start_layer_wise_loading(self) -> int:
        index = self.layer_done_counter.update_producer()
        self.layer_done_counter.set_consumer(index)
        failed = [rid for rid in self.queued if rid in self.failing]
        for rid, transfers in self.queued.items():
            for t in transfers:
                if t.name == PoolName.MAMBA and rid not in failed:
                    self.io.write(int(t.device_indices.reshape(-1)[0]), self.states[t.keys[-1]])
        self.failing.difference_update(failed)
        self.queued.clear()
        if failed:
            self.layer_done_counter.fail(index, LoadFailed(f"scenario load failure: {failed}"))
        else:
            self.layer_done_counter.complete(index, 0)
        return index

    def finish_layer_wise_loading(self, counter_index: int) -> bool:
        return self.layer_done_counter.finish(counter_index)

    def cancel_queued_load(self, rid: str) -> bool:
        return self.queued.pop(rid, None) is not None

    def offload(self, transfers: list[PoolTransfer], session_id=None) -> bool:
        """Write-through of one node: its pages' keys and the state its Mamba slot holds now (the forward that
        wrote it has run: the wing is synchronous)."""
        for t in transfers:
            if t.name == PoolName.KV:
                self.kv_keys.update(t.keys)
            elif t.name == PoolName.MAMBA:
                self.states[t.keys[0]] = self.io.read(int(t.device_indices.reshape(-1)[0]))
        self.offloads_done += 1
        return True

    def num_completed_offloads(self) -> int:
        return self.offloads_done

    def pop_completed_offload(self) -> bool:
        self.offloads_done -= 1
        return True

    def reset(self) -> None:
        self.queued.clear()
        self.offloads_done = 0
        self.layer_done_counter.reset()

    def close(self) -> None:
        self.reset()
