"""The SGLang wing: replays a scenario on SGLang 0.5.23's own scheduler-side code and judges the recorded
`harness.trace.Trace` with the project's oracles (`python -m harness.sglang SCENARIO.json`).

Only this package imports `sglang`, and it never imports `vllm`. Importing the package imports no SGLang: the
modules that do (`env`, `forward`, `scheduler`) are imported by `driver.replay` after `runtime.patched` has put
the import stubs in place. It runs in its own venv (`make venv-sglang` -> `.venv-sglang`).

SGLang's own, unmodified code: its `Scheduler` (harness/sglang/scheduler.py: `get_next_batch_to_run` with admission,
chunked prefill and retraction, `process_batch_result`, `_add_request_to_queue`, on an instance made by `__new__`),
`UnifiedRadixCache` with FULL+MAMBA components on the Rust or the Python tree core (built by
`sglang/test/kits/unified_radix_cache/fixtures.py` `build_fixture`), `HybridReqToTokenPool`/`MambaPool`, the token
allocators, `Req`, `SamplingParams`, `PrefillAdder`, `ScheduleBatch` (`prepare_for_extend` with the extra_buffer
track entry and the deferred CoW collection, `prepare_for_decode`, `filter_batch`, `merge_batch`, `retract_decode`),
`checkpoint_kv_cache`, `ModelRunner._maybe_execute_deferred_mamba_cow_and_clear` (srt/model_executor/
model_runner.py:1915, on a `__new__` ModelRunner), `SchedulerBatchResultProcessor` (release, tracking-slot swap,
caching into the tree), `build_prefill_track_plan`, and for external hits the linker path: the factory that loads an
out-of-tree linker, `UnifiedCacheLinkerWrapper` (match, load-back, write-through offloads, failed-load aborts) and
`LayerWiseLoadCounter`; with speculation (NGRAM, harness/sglang/spec.py), the spec prepare and KV allocation
(`spec_prepare_for_decode`, `alloc_for_spec_decode`), `_forward_isolation`, the future map, `NgramVerifyInput`,
`prepare_mamba_track_for_verify`, `commit_mamba_states_after_verify` (with `_verify_commit_step_indices` and
`HybridLinearAttnBackend.update_mamba_state_after_mtp_verify`) and the result processor's spec paths.

Not SGLang's: the forward (`forward.py`: it reads each request's Mamba slot, writes the state after the tokens it
fed, and writes the tracking slots where srt/layers/attention/hybrid_linear_attn_backend.py:537-556 would) and
`scheduler.run_batch`, which calls it in place of Scheduler.run_batch (and, as run_batch does, asks the cache which
external loads failed), the NGRAM worker (`spec.py`: a stand-in following NGRAMWorker.forward_batch_generation
with the scenario's drafts; the verify's per-step states written where the GDN kernel keeps them; CPU stand-ins
for the scatter and req-to-token kernels in runtime.py), and the external store (`linker.py`, a `UnifiedCacheLinker`
as a user's plug-in would be).
Nothing of the scheduler loop is copied.
"""
