"""Fixes of the order in which vLLM's V1 runner moves Mamba states and lets the KV connector load.

`sync-external-load-after-mamba-precopy`: in align mode the runner's Mamba pre-copy (`mamba_utils.preprocess_mamba`,
gpu_model_runner.py:4091 in 0.32.0, :4328 in 0.27.1) copies each request's state from the column of its last
computed token into the column its new tokens start in, before the forward; the KV connector's
`start_load_kv` runs later, inside `maybe_get_kv_connector_output` (:4202 in 0.32.0). A synchronous external hit
that ends on a block boundary has its state loaded into the boundary column after the pre-copy read it: the
request continues from whatever that block held (vLLM PR #43935 describes it, closed unmerged).

The fix (the order vLLM's connector contract asks of synchronous loads: loaded before anything reads them): the
step's connector loads start before the pre-copy, and the context's own start is skipped for that step."""

from __future__ import annotations

from harness.fixes.targets import patch_fix
from harness.patches import patch_attr

_MAMBA_UTILS = "vllm.v1.worker.mamba_utils"
_MARK = "_hybrid_harness_loads_first"


def _loads_first(original):
    def preprocess_mamba(scheduler_output, *args, **kwargs):
        from vllm.distributed.kv_transfer.kv_transfer_state import get_kv_transfer_group, has_kv_transfer_group

        meta = getattr(scheduler_output, "kv_connector_metadata", None)
        if has_kv_transfer_group() and meta is not None:
            connector = get_kv_transfer_group()
            connector.bind_connector_metadata(meta)
            connector.start_load_kv(None)
            _skip_next_start(connector)
        return original(scheduler_output, *args, **kwargs)

    setattr(preprocess_mamba, _MARK, True)
    preprocess_mamba.__wrapped__ = original
    return preprocess_mamba


def _skip_next_start(connector) -> None:
    """The runner's own start_load_kv of this step (in the connector context) finds the loads started."""
    started = connector.start_load_kv

    def start_load_kv(*args, **kwargs):
        del connector.start_load_kv  # back to the class's method for the next step
    connector.start_load_kv = start_load_kv
    del started


def _patch():
    import importlib

    module = importlib.import_module(_MAMBA_UTILS)
    return patch_attr(module, "preprocess_mamba", _loads_first(module.preprocess_mamba))


def _is_applied() -> bool:
    import importlib

    return getattr(importlib.import_module(_MAMBA_UTILS).preprocess_mamba, _MARK, False)


def _applies() -> bool:
    """The release's V1 runner pre-copies Mamba states in align mode (mamba_utils.preprocess_mamba)."""
    import importlib

    try:
        return hasattr(importlib.import_module(_MAMBA_UTILS), "preprocess_mamba")
    except ImportError:
        return False


FIXES = (patch_fix("fix-connector-loads-before-mamba-precopy",
                   "v1/worker/mamba_utils.preprocess_mamba (called by GPUModelRunner.execute_model)",
                   "the step's KV connector loads start before the Mamba align pre-copy", _patch, _is_applied,
                   applies=_applies),)
