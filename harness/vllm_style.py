"""`hybrid-harness regression FINDING --style vllm`: the finding's regression test as vLLM would keep it.

The body is harness/regression.py's allocator replay (KVCacheManager built and driven directly, as vLLM's own
tests/v1/core/test_prefix_caching.py and test_mamba_align_chunk_split.py do). It asserts the bug's consequence, not
the emitting release's schedule, so that it passes on every release without the bug (tools/emitted_across.py checks
that across the releases bisect covers): the replay stops after the last step the finding showed at and aborts what
still holds blocks (later steps' chunk sizes and step counts differ between releases and are no part of the bug);
what it asserts is state (the worker's live columns against the scheduler's, the state every read finds, the state
of every cached Mamba block, the pool after all frees). vLLM's `Scheduler._mamba_block_aligned_split` (called on a
stub self, as test_mamba_align_chunk_split.py's `_split` does) is asserted only at the call whose chunk the bug
changes (regression.split_points: the fixed and the stock replay part there), and where the fixed chunk stops at
the Mamba block boundary the stock one runs past, as that relation rather than a chunk size. Around it, vLLM's conventions: the SPDX header, `pytest`
with the `cpu_test` mark, a test named after the issue in the folder of the component at fault, and a docstring
naming the configuration a user runs (`vllm serve` flags and `LLM(...)` arguments). It imports only vLLM, torch and
pytest: vLLM's `tests/v1/core/utils.py` helpers build Requests from token counts (`create_requests`) or a
Scheduler from a model name (`create_scheduler`), and the replay needs exact token ids and a hybrid geometry.

The expected values are recorded with the known issues' fixes applied (the allocator without the bug): the test
fails on the release with the bug and passes once the fix is in (tools/upstream.py runs it inside vLLM's tree).
Two shapes have modules of their own (`emit_vllm_test` dispatches): the V2 runner's batch order (vllm_style_runner.py)
and the split's grid under extract_hidden_states, an engine-only issue (vllm_style_split_grid.py).
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from harness import vllm_style_split_grid
from harness.errors import BadInput
from harness.known_issues import KnownIssue

if TYPE_CHECKING:
    from harness.artifacts import FindingArtifact

# the test shapes of the known-issue registry's `vllm_test` besides the runner batch orders (vllm_style_runner.SHAPES)
ALLOCATOR, SPLIT_GRID, ACCEPTED_COUNTS = "allocator", "split-grid", "accepted-counts"
ALLOCATOR_FOLDER = "tests/v1/core"  # where vLLM keeps its KVCacheManager and chunk-split tests


def user_config(scenario) -> tuple[dict, list[str]]:
    """The scenario's geometry as a user sets it: `LLM(...)` keyword arguments and `vllm serve` flags (vLLM 0.33's
    CacheConfig / SchedulerConfig / SpeculativeConfig / KVTransferConfig names, config/cache.py)."""
    g = scenario.geometry
    kw: dict = {"enable_prefix_caching": g.mamba_cache_mode != "none", "mamba_cache_mode": g.mamba_cache_mode,
                "block_size": g.mamba_block_size, "max_model_len": g.max_model_len,
                "max_num_batched_tokens": g.token_budget, "num_gpu_blocks_override": g.num_blocks}
    if g.hash_block_size < g.mamba_block_size and not g.hidden_state_layers:  # there vLLM resolves it (no flag)
        kw["prefix_match_unit"] = g.hash_block_size
    if g.prefix_cache_retention_interval is not None:
        kw["prefix_cache_retention_interval"] = g.prefix_cache_retention_interval
    if g.num_speculative_tokens:
        method = ("extract_hidden_states" if g.hidden_state_layers else "mtp" if g.mtp_modules
                  else "eagle" if g.eagle_block_drop else "ngram")
        kw["speculative_config"] = {"method": method,
                                    "num_speculative_tokens": g.num_speculative_tokens}
    if g.hidden_state_layers:  # as vLLM's examples/offline_inference/extract_hidden_states.py sets it up
        kw["speculative_config"]["draft_model_config"] = {"hf_config": {
            "eagle_aux_hidden_state_layer_ids": list(range(1, g.hidden_state_layers + 1))}}
        kw["kv_transfer_config"] = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
                                    "kv_connector_extra_config": {"shared_storage_path": "/tmp/hidden_states"}}
    external = [r.external for r in scenario.requests if r.external]
    if external:
        kw["kv_transfer_config"] = connector_config(external)
    flags = []
    for k, v in kw.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            flags.append(flag if v else f"--no-{flag[2:]}")
        elif isinstance(v, dict):
            import json

            flags.append(f"{flag} '{json.dumps(v)}'")
        else:
            flags.append(f"{flag} {v}")
    return kw, flags


def connector_config(hits) -> dict:
    """A KV connector vLLM ships that loads the way the scenario's external hits do, on hybrid models
    (`SupportsHMA`): MooncakeStoreConnector, whose `load_async` extra config picks an async or a sync load
    (mooncake/store/scheduler.py:135 and :280 in 0.34.0; the same key in 0.26.0-0.33.0)."""
    modes = {hit.async_load for hit in hits}
    config = {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"}
    if modes == {False}:
        config["kv_connector_extra_config"] = {"load_async": False}
    elif len(modes) > 1:  # the harness's connector answers per request; a shipped one per engine
        config["kv_connector_extra_config"] = {"load_async": "per request (one sync hit, one async)"}
    return config


def own_shape(issue: KnownIssue):
    """(folder, emitter) of an issue whose test is not an allocator replay, else None: the runners' batch order,
    the split's grid under extract_hidden_states, V1's accepted counts (the registry's `vllm_test`)."""
    from harness import vllm_style_accepted, vllm_style_runner

    if issue.vllm_test in vllm_style_runner.SHAPES:
        return vllm_style_runner.FOLDER, vllm_style_runner.emit_runner_test
    if issue.vllm_test == SPLIT_GRID:  # engine-only, yet its split runs on a stub (no engine needed)
        return vllm_style_split_grid.FOLDER, vllm_style_split_grid.emit_split_grid_test
    if issue.vllm_test == ACCEPTED_COUNTS:  # V1's accepted counts (tests/v1/worker)
        return vllm_style_accepted.FOLDER, vllm_style_accepted.emit_accepted_test
    return None


def folder_for(issue: KnownIssue) -> str:
    own = own_shape(issue)
    if own:
        return own[0]
    if issue.vllm_test != ALLOCATOR:
        raise BadInput(f"--style vllm: {issue.id} is in {issue.code} code ({issue.fix_target}); only allocator and "
                       "Scheduler-split issues (tests/v1/core, the split's grid under extract_hidden_states included), "
                       "the runners' batch order and V1's accepted counts (tests/v1/worker) replay as a vLLM unit "
                       "test so far (known_issues.toml `vllm_test`)")
    return ALLOCATOR_FOLDER


def _docstring(issue: KnownIssue | None, scenario, signature: str, version: str) -> str:
    kw, flags = user_config(scenario)
    args = ", ".join(f"{k}={v!r}" for k, v in kw.items())
    what = issue.summary if issue else f"a finding of hybrid-harness ({signature})"
    parts = [f"Hybrid (attention + Mamba) prefix caching: {issue.id if issue else signature}.", "", what + ".", ""]
    if issue:
        parts += [f"Reached by: {issue.reached_by}.", ""]
    parts += ["The configuration of this test, as a user sets it (a Mamba2 hybrid model, e.g. "
              "nvidia/NVIDIA-Nemotron-H-4B-Instruct-128K):", "", f"    vllm serve MODEL {' '.join(flags)}",
              f"    LLM(model=MODEL, {args})", "",
              f"Found by hybrid-harness on vLLM {version} (finding {signature}). The expected values are vLLM's "
              f"with the fix applied" + (f" ({issue.fix_what})" if issue else "")
              + "; the release with the bug fails here."]
    wrapped = [textwrap.fill(p, 100, break_long_words=False, break_on_hyphens=False)
               if p and not p.startswith("    ") else p for p in parts]
    return '"""' + "\n".join(wrapped) + '\n"""'


def emit_vllm_test(artifact: FindingArtifact, issues: list[KnownIssue]) -> tuple[str, str]:
    """(test text, its path in vLLM's tree) for a finding artifact whose verdict names `issues`."""
    from harness.regression import emit_regression
    from harness.scenario import parse_scenario

    if (artifact.config.get("tier") or artifact.tier or "symbolic") == "engine" and not issues:
        raise BadInput("--style vllm: an engine-tier finding of no known issue cannot be replayed as an allocator "
                       "test; replay it on the symbolic tier first")
    scenario = parse_scenario(artifact.scenario)
    issue = issues[0] if len(issues) == 1 else None
    folder = folder_for(issue) if issue else "tests/v1/core"
    docstring = _docstring(issue, scenario, artifact.signature, artifact.vllm_version or "?")
    own = issue and own_shape(issue)
    if own:  # a runner's test (tests/v1/worker) or the split's grid: its own emitter
        return own[1](artifact, issue, docstring)
    for k in issues:
        if own_shape(k) or folder_for(k) != folder:  # each must be allocator or split code
            raise BadInput(f"--style vllm: {k.id}'s test is not an allocator replay; emit it from a finding of it "
                           "alone")
    name = (issue.id if issue else artifact.signature.split(":")[0]).replace("-", "_")
    body = emit_regression(scenario, artifact.signature, None, issues, split=True,
                           until_step=last_finding_step(artifact, issues))
    # vLLM's header and docstring instead of the standalone file's; pytest (and the split stub's SimpleNamespace)
    _, _, rest = body.partition('"""\n\nfrom __future__ import annotations\n')
    rest = rest.replace("\nimport torch\n", "\nimport pytest\nimport torch\n", 1)
    rest = rest.replace("\nMAMBA = ", "\npytestmark = pytest.mark.cpu_test\n\nMAMBA = ", 1)
    func = body.split("\ndef test_", 1)[1].split("(", 1)[0]
    rest = rest.replace(f"\ndef test_{func}(", f"\ndef test_{name}(", 1)
    head = ("# SPDX-License-Identifier: Apache-2.0\n# SPDX-FileCopyrightText: Copyright contributors to the vLLM project\n"
            + docstring + "\n" + ("\nfrom types import SimpleNamespace\n" if "\ndef mamba_split(" in rest else ""))
    return head + rest, f"{folder}/test_hh_{name}.py"


def last_finding_step(artifact: FindingArtifact, issues: list[KnownIssue]) -> int | None:
    """The last step at which the finding showed (its findings of `issues`, where its verdict names them): the
    replay needs no later step. None where a finding has no step (the test then runs the whole schedule)."""
    known = (artifact.verdict or {}).get("known") or {}
    ids = {k.id for k in issues}
    findings = artifact.findings
    mine = [f for f in findings if ids & set(known.get(f.get("signature"), "").split("+"))] or findings
    steps = [f.get("step") for f in mine]
    return max(steps) if steps and None not in steps else None


__all__ = ["emit_vllm_test", "folder_for", "user_config"]
