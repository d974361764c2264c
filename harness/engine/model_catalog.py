"""The real models the generators draw from (`geometry.model`): each shipped config's smallest block per K and its
number of KV cache groups, as vLLM builds them (harness/engine/model_geometry.py), and `--model-config NAME|PATH`
resolved the same way. Computed once per release and harness version, then read from
artifacts/cache/model-geometries.json (building them imports vLLM's model classes: 12-20 s at every engine-tier
entry that builds a fuzz budget, every campaign worker's start among them)."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from harness.engine.config import vllm_config
from harness.engine.model_geometry import default_user_block, model_config_for, model_groups
from harness.errors import BadInput
from harness.model_configs import load, read_path_or_name, shipped

_SHIPPED: list = []
SPEC_WIDTHS = range(3)  # K the generators draw (harness.generate, harness.genome): a block size for each


def model_entry(ref: str) -> tuple:
    """`--model-config NAME|PATH` as the generators take a model: (the scenario's `geometry.model`: the name, or
    the file's config inline; the smallest block vLLM sets for it per K in SPEC_WIDTHS (the conv state holds
    K more tokens: a larger page); its number of KV cache groups)."""
    return _entry(read_path_or_name(ref))


_ENTRIES: dict[str, tuple] = {}  # per config (its JSON): what vLLM built for it, once per process


CACHE = Path(__file__).resolve().parents[2] / "artifacts" / "cache" / "model-geometries.json"
# what decides an entry besides the config and the release: the code that builds it, and vllm_env.py (the platform
# vLLM resolves, hence the Mamba state dtype: entries written before it was set in every process are not reused)
_BUILDERS = ("model_catalog.py", "model_geometry.py", "config.py", "../vllm_env.py")


def _entry(model) -> tuple:
    key = json.dumps(model, sort_keys=True)
    if key not in _ENTRIES:
        _ENTRIES[key] = _cached_entry(model, key)
    return _ENTRIES[key]


@functools.cache
def _builders_digest() -> str:
    digest = hashlib.sha256()
    for name in _BUILDERS:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()


def _cached_entry(model, key: str) -> tuple:
    """The entry from the disk cache, else built and written there. Only what vLLM built is kept: a refusal
    (BadInput) is raised and not cached, since it can come from the process's state (a runner choice in vLLM's
    environment) as well as from the release, and a kept one would be replayed to every later process."""
    from harness.artifacts import write_json_atomic
    from harness.vllm_adapter import installed_version

    ident = f"{installed_version()}:{hashlib.sha256((key + _builders_digest()).encode()).hexdigest()[:20]}"
    try:
        cache = json.loads(CACHE.read_text())
    except (OSError, ValueError):
        cache = {}
    hit = cache.get(ident) if isinstance(cache, dict) else None
    if not (isinstance(hit, dict) and "blocks" in hit and "groups" in hit):
        blocks, groups = _build_entry(model)[1:]  # BadInput: not on this release (or not in this process)
        hit = {"blocks": list(blocks), "groups": groups}
        cache = cache if isinstance(cache, dict) else {}
        cache[ident] = hit
        try:
            write_json_atomic(CACHE, cache)
        except OSError:
            pass  # a read-only checkout builds them each time
    return model, tuple(hit["blocks"]), hit["groups"]


def _build_entry(model) -> tuple:
    name, doc = load(model)
    vc = vllm_config(8, 2048, 65536, 16, 16, 0, False, "v1")
    blocks = []
    for K in SPEC_WIDTHS:
        vck = vllm_config(8, 2048, 65536, 16, 16, K, False, "v1") if K else vc
        # the block vLLM sets for a user who gives no --block-size (64-token default from 0.34.0)
        block = model_config_for(name, doc, vck, default_user_block(name, doc, vck), "align")[0].cache_config.block_size
        try:
            model_groups(model, vck, block, "align", K)
        except BadInput:  # K the engine tier does not follow on this model (a Mamba1 model's drafts): K < this
            break
        blocks.append(block)
    return model, tuple(blocks), len(model_groups(model, vc, blocks[0], "align", 0).groups)


def hidden_entry(model: tuple, layers: int) -> tuple | None:
    """(`model`, `layers`, the hash block vLLM resolves, the hidden-state group's block) for extract_hidden_states
    with `layers` aux layers on a model entry (`model_entry`) at one draft; None where vLLM refuses it (no aux
    hidden-state outputs, no block for one draft, a hash unit that does not divide every group's block)."""
    blocks = hidden_blocks(model, layers)
    return None if blocks is None else (model, layers, *blocks[:2])


def hidden_blocks(model: tuple, layers: int) -> tuple | None:
    """`hidden_entry`'s (hash block, hidden-state group's block) and `cache_config.block_size` as the engine core
    leaves it (model_geometry.engine_block_size); None where vLLM refuses the configuration."""
    from harness.engine.config import engine_block_sizes, vllm_namespace
    from harness.engine.model_geometry import group_kinds

    ref, blocks, _ = model
    if len(blocks) < 2:
        return None
    vc = vllm_config(8, 2048, 65536, blocks[1], blocks[1], 1, False, "v1")
    try:
        groups = list(model_groups(ref, vc, blocks[1], "align", 1, layers).groups)
        kvc = vllm_namespace().kci.KVCacheConfig(num_blocks=1, kv_cache_tensors=[], kv_cache_groups=groups)
        hidden = groups[group_kinds(groups).index("hidden")].kv_cache_spec.block_size
        engine_vc, _, hash_block = engine_block_sizes(vc, kvc)
    except BadInput:
        return None
    # 0.26-0.27 hash the unequal blocks by their lcm, which then divides no hidden-state block: vLLM's coordinator
    # refuses that at engine start (every group's block a multiple of the hash unit, kv_cache_coordinator.py:563-569
    # in 0.26.0; as the engine tier's Scheduler does), so no user runs it there
    return ((hash_block, hidden, engine_vc.cache_config.block_size)
            if all(g.kv_cache_spec.block_size % hash_block == 0 for g in groups) else None)


def shipped_geometries() -> tuple[tuple[str, tuple[int, ...], int], ...]:
    """`model_entry` of every shipped model config this release builds: what the fuzzers draw from."""
    if not _SHIPPED:
        out = []
        for name in shipped():
            try:
                out.append(_entry(name))
            except BadInput:
                continue  # not on this release
        _SHIPPED.append(tuple(out))
    return _SHIPPED[0]
