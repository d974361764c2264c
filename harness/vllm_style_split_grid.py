"""`regression --style vllm` for the Mamba split's grid: the chunk ends vLLM's Scheduler picks on the cache config
its engine core leaves, as vLLM keeps such a test (tests/v1/core).

With speculative method extract_hidden_states the bug spans two components, so the test runs both, on CPU:
`EngineCore._initialize_kv_caches` on a stub executor that reports the layers' KV cache specs (one attention layer,
one Mamba layer and the cache-only hidden-state layer of the finding's model, as its layers build them), as
vLLM's own test_engine_queries_offload_blocks_only_when_enabled drives it (tests/v1/kv_connector/unit/
test_simple_cpu_offload_connector.py in 0.34.0's sdist; here nothing of the engine core is replaced: the executor
reports the memory, the config is a namespace of the fields it reads, 0.28.0-0.34.0). vLLM's own grouping gives the hidden-state group its smaller block (kv_cache_planning.py:1223-1242 in
0.34.0) and the engine core sets `cache_config.block_size` to it (core.py:366-377). Then
`Scheduler._mamba_block_aligned_split` is called on a stub self holding that cache config, as
test_mamba_align_chunk_split.py's `_split` does, for every chunk of the repro's first prompt under its token
budget; the chunk ends must be those recorded on vLLM's Scheduler with the issue's fix applied (Mamba-block boundaries, then
the stops vLLM makes on the hash grid near the prompt's end). The stub's other fields are recorded from vLLM's own
Scheduler built for the finding (the engine tier's). It imports only vLLM, torch and pytest.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.errors import BadInput
from harness.known_issues import KnownIssue

if TYPE_CHECKING:
    from harness.artifacts import FindingArtifact

FOLDER = "tests/v1/core"

# the emitted test (str.format: doubled braces are the test's own)
TEMPLATE = '''# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
{docstring}

from types import SimpleNamespace

import pytest
import torch

from vllm.config import CacheConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine.core import EngineCore
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    HiddenStateCacheSpec,
    KVCacheConfig,
    MambaSpec,
)
from vllm.v1.request import Request

pytestmark = pytest.mark.cpu_test

MAMBA_BLOCK_SIZE = {block}  # align mode: the attention and Mamba block the platform picks
MAX_NUM_BATCHED_TOKENS = {budget}
MAX_MODEL_LEN = {max_model_len}
PROMPT_LEN = {prompt_len}
NUM_BLOCKS = {num_blocks}
# The prefill's chunk ends with the split on the Mamba grid: Mamba-block boundaries,
# then the stops vLLM makes on the hash grid near the prompt's end, then the end.
EXPECTED_CHUNK_ENDS = {expected}

# One layer of each kind, each spec as its layer builds it (the hidden-state layer:
# the aux hidden states extract_hidden_states stores, hidden_size each).
LAYER_SPECS = {{
    {attention_name}: FullAttentionSpec(
        block_size=MAMBA_BLOCK_SIZE,
        num_kv_heads={kv_heads},
        head_size={head_size},
        dtype={attention_dtype},
    ),
    {mamba_name}: MambaSpec(
        block_size=MAMBA_BLOCK_SIZE,
        shapes={shapes},
        dtypes={dtypes},
        page_size_padded={page_size_padded},
        mamba_cache_mode="align",
        num_speculative_blocks={num_spec},
    ),
    {hidden_name}: HiddenStateCacheSpec(
        block_size=MAMBA_BLOCK_SIZE,
        num_kv_heads={aux_layers},
        head_size={hidden_size},
        dtype={hidden_dtype},
    ),
}}

# What the split reads off the Scheduler besides the block sizes, as vLLM's Scheduler
# sets it for this configuration.
SCHEDULER_FIELDS = {{
{fields}
}}
LONG_PREFILL_TOKEN_THRESHOLD = {long_prefill}


def _scheduler_after_kv_cache_init() -> tuple[SimpleNamespace, KVCacheConfig]:
    """EngineCore._initialize_kv_caches with a worker reporting LAYER_SPECS, then what
    the split reads off the Scheduler built from its results (a stub self), and the
    scheduler's KV cache config."""
    cache_config = CacheConfig(
        block_size=MAMBA_BLOCK_SIZE,
        enable_prefix_caching=True,
        mamba_cache_mode="align",
        mamba_block_size=MAMBA_BLOCK_SIZE,
    )
    cache_config.kv_cache_layout = "LBNHC"
    # The VllmConfig fields KV cache init reads (a real one needs a model's HF config).
    vllm_config = SimpleNamespace(
        cache_config=cache_config,
        model_config=SimpleNamespace(
            max_model_len=MAX_MODEL_LEN,
            original_max_model_len=MAX_MODEL_LEN,
            supports_kv_cache_grouping=False,
        ),
        scheduler_config=SimpleNamespace(
            disable_hybrid_kv_cache_manager=False, enable_chunked_prefill=True
        ),
        parallel_config=SimpleNamespace(
            tensor_parallel_size=1,
            pipeline_parallel_size=1,
            prefill_context_parallel_size=1,
            decode_context_parallel_size=1,
            cp_kv_cache_interleave_size=1,
            world_size=1,
        ),
        speculative_config=None,
        kv_transfer_config=None,
        num_prefill_lookahead_tokens=0,
        device_config=SimpleNamespace(device_type="cpu"),
        attention_config=SimpleNamespace(hisparse_config=None),
        compilation_config=SimpleNamespace(
            compilation_time=0, encoder_compilation_time=0
        ),
        adjust_dcp_kv_cache_interleave_size=lambda groups: None,
        validate_block_size=lambda: None,
    )
    page_size = LAYER_SPECS[{attention_name}].page_size_bytes
    executor = SimpleNamespace(
        get_kv_cache_specs=lambda: [LAYER_SPECS],
        # room for NUM_BLOCKS pages per layer
        determine_available_memory=lambda: [NUM_BLOCKS * len(LAYER_SPECS) * page_size],
        get_supported_kv_cache_layouts=lambda: None,  # the layout is set above
        set_kv_cache_layout=lambda *args: None,
        initialize_from_config=lambda kv_cache_configs: None,
        compile_or_warm_up_model=lambda: [],
    )
    engine = object.__new__(EngineCore)
    engine.model_executor = executor
    kv_cache_config = engine._initialize_kv_caches(vllm_config)
    scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(
        kv_cache_config, vllm_config
    )
    stub = SimpleNamespace(
        cache_config=cache_config,
        block_size=scheduler_block_size,
        hash_block_size=hash_block_size,
        scheduler_config=SimpleNamespace(
            long_prefill_token_threshold=LONG_PREFILL_TOKEN_THRESHOLD
        ),
        **SCHEDULER_FIELDS,
    )
    return stub, kv_cache_config


def test_{name}():
    scheduler, kv_cache_config = _scheduler_after_kv_cache_init()
    hidden_block_size = next(
        g.kv_cache_spec.block_size
        for g in kv_cache_config.kv_cache_groups
        if isinstance(g.kv_cache_spec, HiddenStateCacheSpec)
    )
    # The configuration of the bug: the hidden-state group's block is below the Mamba
    # block and the engine core took it as the global block size.
    assert hidden_block_size < MAMBA_BLOCK_SIZE
    assert scheduler.cache_config.block_size == hidden_block_size

    request = Request(
        request_id="a",
        prompt_token_ids=list(range(PROMPT_LEN)),
        sampling_params=SamplingParams(max_tokens=2),
        pooling_params=None,
    )
    chunk_ends = []
    while request.num_computed_tokens < PROMPT_LEN:
        budget = min(PROMPT_LEN - request.num_computed_tokens, MAX_NUM_BATCHED_TOKENS)
        num_new_tokens = Scheduler._mamba_block_aligned_split(
            scheduler, request, budget
        )
        assert num_new_tokens > 0, f"the prefill stalls after {{chunk_ends}}"
        request.num_computed_tokens += num_new_tokens
        chunk_ends.append(request.num_computed_tokens)

    # Mamba state is written at chunk ends and cached per Mamba block: a chunk ending
    # mid-block leaves the block keyed as a Mamba-block boundary with an earlier state.
    assert chunk_ends == EXPECTED_CHUNK_ENDS, (
        f"chunk ends {{chunk_ends}} follow the hidden-state group's grid "
        f"({{hidden_block_size}}), not the Mamba block ({{MAMBA_BLOCK_SIZE}})"
    )
'''


def _dtype(dtype) -> str:
    return f"torch.{str(dtype).rsplit('.', 1)[-1]}"


def chunk_ends(sched, prompt_len: int, budget: int) -> list[int]:
    """Where vLLM's Scheduler (`sched`, with whatever fix is applied) ends each chunk of a lone prompt of
    `prompt_len` tokens under a token budget: the test's loop, on the real Scheduler."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    request = Request(request_id="a", prompt_token_ids=list(range(prompt_len)),
                      sampling_params=SamplingParams(max_tokens=2), pooling_params=None)
    ends: list[int] = []
    while request.num_computed_tokens < prompt_len:
        n = sched._mamba_block_aligned_split(request, min(prompt_len - request.num_computed_tokens, budget))
        if n <= 0:
            raise BadInput(f"--style vllm: vLLM's split stalls this prompt after {ends}")
        request.num_computed_tokens += n
        ends.append(request.num_computed_tokens)
    return ends


def _tuple_source(items: list[str]) -> str:
    return f"({', '.join(items)}{',' if len(items) == 1 else ''})"


# Scheduler fields the split reads under another name in other releases (0.28-0.30: use_eagle and
# mamba_fine_grained_prefix_cache): the stub holds every name, so the test runs on each release's split
RENAMED = (("use_eagle", "use_eagle_block_drop"), ("mamba_fine_grained_prefix_cache", "mamba_shared_prefix_checkpoint"))


def _split_fields(sched) -> dict:
    """The scheduler attributes the release's `_mamba_block_aligned_split` reads, but the ones the test sets from
    the engine core's results (block sizes, cache config) and the scheduler config's threshold; a field renamed
    between releases under each of its names (RENAMED)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    source = inspect.getsource(inspect.unwrap(Scheduler._mamba_block_aligned_split))
    names = sorted(set(re.findall(r"self\.(\w+)", source)) - {"cache_config", "scheduler_config", "block_size",
                                                                 "hash_block_size"})
    fields = {n: getattr(sched, n) for n in names}
    for pair in RENAMED:
        known = [n for n in pair if n in fields]
        if known:
            fields.update((n, fields[known[0]]) for n in pair if n not in fields)
    fields = dict(sorted(fields.items()))
    odd = {n: v for n, v in fields.items() if v is not None and not isinstance(v, (bool, int))}
    if odd:
        raise BadInput(f"--style vllm: the split reads scheduler fields a test cannot write as literals: {odd}")
    return fields


def _layer_specs(groups) -> dict:
    """The template's spec fields from the model's KV cache groups (as vLLM grouped them for the finding)."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec, HiddenStateCacheSpec, MambaSpec

    def first(kind):
        return next(g for g in groups if type(g.kv_cache_spec) is kind)

    attention, mamba, hidden = first(FullAttentionSpec), first(MambaSpec), first(HiddenStateCacheSpec)
    a, m, h = attention.kv_cache_spec, mamba.kv_cache_spec, hidden.kv_cache_spec
    return {"attention_name": json.dumps(attention.layer_names[0]), "kv_heads": a.num_kv_heads,
            "head_size": a.head_size, "attention_dtype": _dtype(a.dtype), "mamba_name": json.dumps(mamba.layer_names[0]),
            "shapes": tuple(tuple(s) for s in m.shapes), "dtypes": _tuple_source([_dtype(d) for d in m.dtypes]),
            "page_size_padded": m.page_size_padded, "num_spec": m.num_speculative_blocks,
            "hidden_name": json.dumps(hidden.layer_names[0]), "aux_layers": h.num_kv_heads, "hidden_size": h.head_size,
            "hidden_dtype": _dtype(h.dtype)}


def emit_split_grid_test(artifact: FindingArtifact, issue: KnownIssue, docstring: str) -> tuple[str, str]:
    """(test text, its place in vLLM's tree) for a finding of `issue` (its fix changes the split): the geometry and the
    scheduler fields from vLLM's own Scheduler built for the finding on the engine tier (stock)."""
    from harness.engine.config import build_scheduler, derive_geometry
    from harness.fixes import fix_by_name
    from harness.scenario import parse_scenario

    scenario = parse_scenario(artifact.scenario)
    g = scenario.geometry
    if not (g.model and g.hidden_state_layers and g.mamba_cache_mode == "align"):
        raise BadInput(f"--style vllm: {issue.id}'s test needs a model with extract_hidden_states "
                       "(geometry.hidden_state_layers) in Mamba align mode")
    if g.attn_block_size != g.mamba_block_size:  # the template builds both layers at one block
        raise BadInput(f"--style vllm: attention block {g.attn_block_size} is not the Mamba block {g.mamba_block_size}")
    _, sched = build_scheduler(scenario, derive_geometry(scenario))
    prompt_len = scenario.requests[0].prompt.num_tokens
    stock = chunk_ends(sched, prompt_len, g.token_budget)
    undo = fix_by_name(issue.fix_name).mutant.patch()
    try:
        expected = chunk_ends(sched, prompt_len, g.token_budget)
    finally:
        undo()
    if expected == stock:
        raise BadInput(f"--style vllm: the first prompt of this finding is split alike with and without {issue.fix_name}")
    case = SplitCase(block=g.mamba_block_size, budget=g.token_budget, max_model_len=g.max_model_len,
                     prompt_len=prompt_len, num_blocks=g.num_blocks,
                     groups=tuple(sched.kv_cache_config.kv_cache_groups),
                     fields=_split_fields(sched), long_prefill=sched.scheduler_config.long_prefill_token_threshold,
                     expected=tuple(expected))
    name = issue.id.replace("-", "_")
    return render_test(case, docstring, name), f"{FOLDER}/test_hh_{name}.py"


@dataclass(frozen=True)
class SplitCase:
    """The emitted test's values: the geometry, vLLM's KV cache groups for the finding's model (one layer of each
    kind is kept), the Scheduler's fields the split reads and the chunk ends recorded with the issue's fix."""

    block: int
    budget: int
    max_model_len: int
    prompt_len: int
    num_blocks: int
    groups: tuple
    fields: dict
    long_prefill: int
    expected: tuple[int, ...]


def render_test(case: SplitCase, docstring: str, name: str) -> str:
    return TEMPLATE.format(
        docstring=docstring, block=case.block, budget=case.budget, max_model_len=case.max_model_len,
        prompt_len=case.prompt_len, num_blocks=case.num_blocks, expected=list(case.expected),
        fields="\n".join(f"    {json.dumps(n)}: {v!r}," for n, v in case.fields.items()),
        long_prefill=case.long_prefill, name=name, **_layer_specs(case.groups))


__all__ = ["FOLDER", "SplitCase", "chunk_ends", "emit_split_grid_test", "render_test"]
