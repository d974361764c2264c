"""The V1 runner pool (harness/engine/runner_v1.py): one vLLM V1 model runner per runner config in the process.

One runner per runner config (`POOL`, keyed by the config values the runner is built from,
`runner_key`): building one costs more than a short scenario (its logits-processor set-up scans the installed
distributions' entry points). Between scenarios a pooled runner is put back to its freshly built state
(`Pooled.reset`): every request it still holds is finished through its own `_update_states` (what the
engine's next step would send), the persistent batch is rebuilt by its own `may_reinitialize_input_batch`,
the Mamba buffers are dropped as `initialize_kv_cache` drops them, and every buffer and attribute of the
runner itself is restored from the snapshot taken when it was built; the state tensors are the scenario's
own. tests/test_engine_v1.py checks that a reused runner's traces equal a fresh process's.
"""

from __future__ import annotations

import numpy as np

from harness.vllm_adapter import installed_version, parameters

POOL: dict[tuple, "Pooled"] = {}  # one runner per runner config (runner_key), reset between scenarios
POOL_SIZE = 256  # runners kept (a few MB each at the harness's sizes); the oldest goes first


def runner_key(vc, group_mixers: tuple = ()) -> tuple:
    """What a V1 runner is built from, of the engine config: batch and token limits, model length, block sizes,
    cache mode, scheduling mode and the drafter (method, K). The rest of the engine config (the prefix-match
    unit, the connector and its load-failure policy, the scheduler's block count) is read by the scheduler
    only: the runner's step code reads none of it (v1/worker/gpu_model_runner.py, gpu_input_batch.py,
    block_table.py, mamba_utils.py in 0.33.0), so scenarios that differ only there share a runner.
    `group_mixers`: the KV cache groups' layer families in order (a real model's groups: one block table each;
    a Mamba group's type picks its backend)."""
    sc, cc, spec = vc.scheduler_config, vc.cache_config, vc.speculative_config
    return (installed_version(), sc.max_num_seqs, sc.max_num_batched_tokens, vc.model_config.max_model_len,
            cc.block_size, cc.mamba_block_size, cc.mamba_cache_mode, sc.async_scheduling,
            None if spec is None else (spec.method, spec.num_speculative_tokens), group_mixers)


def reinitialize_input_batch(runner, kvc) -> None:
    """The runner's own may_reinitialize_input_batch (gpu_model_runner.py:6836 in 0.33.0), made to build a
    fresh InputBatch: it rebuilds when the block sizes differ from the ones recorded (`_init_block_sizes`,
    every release 0.26-0.33), so the record is cleared first."""
    runner._init_block_sizes = None
    if "kernel_block_sizes" in parameters(type(runner).may_reinitialize_input_batch):
        # older releases take the kernel block sizes: no backend splits a block here
        runner.may_reinitialize_input_batch(kvc, [g.kv_cache_spec.block_size for g in kvc.kv_cache_groups])
    else:
        runner.may_reinitialize_input_batch(kvc)


class Pooled:
    """A runner kept for its runner config, and the state it was built in.

    `reset` puts it back before the next scenario, in vLLM's own ways where vLLM has one: the requests it still
    holds (a scenario ends with the scheduler's aborts, which reach a worker only with the next step's
    output) are finished through its `_update_states` with an empty SchedulerOutput naming them, so every
    part of the runner that keeps per-request state drops it (persistent batch and its logits processors,
    late-interaction and encoder caches, prompt logprobs); then every attribute of the runner is set back
    to the object it held when built, tensors and numpy buffers refilled in place with their built bytes
    (their addresses are captured by vLLM's kernel metadata), containers refilled in place; then a fresh
    persistent batch (may_reinitialize_input_batch). False if any of it fails: the caller builds anew."""

    def __init__(self, runner, vc) -> None:
        self.runner, self.vc = runner, vc
        self.attrs = dict(vars(runner))
        self.saved = {name: _save(value) for name, value in self.attrs.items()}

    def reset(self, kvc) -> bool:
        from vllm.config import set_current_vllm_config
        from vllm.v1.core.sched.output import SchedulerOutput

        r = self.runner
        try:
            held = set(r.requests) | set(r.input_batch.req_id_to_index)
            if held:
                so = SchedulerOutput.make_empty()
                so.finished_req_ids = held
                with set_current_vllm_config(self.vc):
                    deferred = r._update_states(so)
                    if callable(deferred):
                        deferred()
            for name in [n for n in vars(r) if n not in self.attrs]:
                delattr(r, name)
            for name, value in self.attrs.items():
                _restore(value, self.saved[name])
                if getattr(r, name) is not value:
                    setattr(r, name, value)
            with set_current_vllm_config(self.vc):
                reinitialize_input_batch(r, kvc)
        except Exception:  # noqa: BLE001 - a runner left mid-step by an exception: not reusable
            return False
        return not r.requests and r.input_batch.num_reqs == 0


def _save(value):
    """A copy of what a built runner's attribute holds: bytes of tensors and buffers, contents of containers."""
    import torch
    from vllm.v1.utils import CpuGpuBuffer

    if isinstance(value, CpuGpuBuffer):
        return (value.cpu, value.cpu.clone(), value.gpu, value.gpu.clone())
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, (list, set)):
        return type(value)(value)
    return None


def _restore(value, saved) -> None:
    import torch
    from vllm.v1.utils import CpuGpuBuffer

    if isinstance(value, CpuGpuBuffer):
        cpu, cpu_bytes, gpu, gpu_bytes = saved
        value.cpu, value.gpu = cpu, gpu
        with torch.no_grad():
            cpu.copy_(cpu_bytes)
            if gpu is not cpu:
                gpu.copy_(gpu_bytes)
    elif isinstance(value, torch.Tensor):
        with torch.no_grad():
            value.copy_(saved)
    elif isinstance(value, np.ndarray):
        value[...] = saved
    elif isinstance(value, dict):
        value.clear()
        value.update(saved)
    elif isinstance(value, list):
        value[:] = saved
    elif isinstance(value, set):
        value.clear()
        value.update(saved)


def replace_spec(obj, **changes):
    import dataclasses

    return dataclasses.replace(obj, **changes)
