"""The SGLang wing: replays a scenario on SGLang 0.5.23's own scheduler-side code and judges the recorded
`harness.trace.Trace` with the project's oracles (`python -m harness.sglang SCENARIO.json`).

Only this package imports `sglang`, and it never imports `vllm`. Importing the package imports no SGLang: the
modules that do (`env`, `forward`, `scheduler`) are imported by `driver.replay` after `runtime.patched` has put
the import stubs in place. It runs in its own venv (`make venv-sglang` -> `.venv-sglang`).

SGLang's own, unmodified code: `UnifiedRadixCache` with FULL+MAMBA components (built by
`sglang/test/kits/unified_radix_cache/fixtures.py` `build_fixture`), `HybridReqToTokenPool`/`MambaPool`, the
token allocators, `Req`, `SamplingParams`, `PrefillAdder` (`add_one_req`, `add_chunked_req`), `ScheduleBatch`
(`init_new`, `prepare_for_extend` with the extra_buffer track entry and the deferred CoW collection,
`prepare_for_decode`, `filter_batch`, `merge_batch`, `check_decode_mem`), `checkpoint_kv_cache`,
`ModelRunner._maybe_execute_deferred_mamba_cow_and_clear` (srt/model_executor/model_runner.py:1915, on a
`__new__` ModelRunner), `SchedulerBatchResultProcessor.process_batch_result_prefill/_decode` (release,
tracking-slot swap, caching into the tree) and `build_prefill_track_plan`.

Mirrored (copied, cited per line in `scheduler.py`) from srt/managers/scheduler.py: `get_next_batch_to_run`
3911-3919, 3935-3961, 3965-3968, 3975, 3992-4003; `_get_new_batch_prefill_raw` 4093-4101, 4157-4184,
4199-4303 (no LoRA, hicache or preemption), 4306-4357, 4412; `update_running_batch` 4459-4552 without
retraction; `run_batch` 4614-4623; `process_batch_result` 5088-5106. The forward is simulated (`forward.py`):
it reads each request's Mamba slot, writes the state after the tokens it fed, and writes the tracking slots
where srt/layers/attention/hybrid_linear_attn_backend.py:537-556 would.
"""
