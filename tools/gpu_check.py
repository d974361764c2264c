"""One-shot GPU check (docs/gpu.md): mamba-ssm's Triton kernels (models/gpu.py) against the torch reference.

    python tools/gpu_check.py        # < 5 min on one H200; prints "SKIPPED: <reason>" and exits 0 without a GPU

1. versions: torch, CUDA, triton, mamba-ssm;
2. each GPU kernel on random float32 inputs of a few sizes vs models/kernels.py in float64 on the CPU from the
   same inputs: max |error| <= ATOL + RTOL * max |reference| (TOLERANCES), plus a batched decode step on a
   TensorPool's SSM pages through state_batch_indices;
3. if vLLM is importable: the model-tier seed scenario, twice, on HybridLM(float32, cuda, GPU backend), with
   harness.oracles.output_summary of each run.
Writes a JSON summary to $OUT/gpu_check.json (or artifacts/gpu_check.json). Exit 0: passed or skipped; 1: failed.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from models import gpu, kernels  # noqa: E402

SCENARIO = ROOT / "scenarios" / "seed-external-hit-same-block.json"
DEVICE = "cuda"
BUDGET_S = 200  # past this, the optional parts (model tier, wide shape) are skipped: the check stays < 5 min
# float32 GPU vs float64 CPU: (RTOL, ATOL) in max|err| <= ATOL + RTOL * max|ref|. The SSD chunk scan multiplies
# with tl.dot, which takes float32 operands as TF32 by default (10-bit mantissa): ~1e-3 relative, so 1e-2.
# selective_state_update is elementwise float32; conv and attention are torch float32 (TF32 off by default).
TOLERANCES = {"causal_conv1d": (1e-5, 1e-6), "paged_attention": (1e-4, 1e-6), "ssd_chunk_scan": (1e-2, 1e-5),
              "ssd_recurrent": (1e-4, 1e-6), "decode_step_pooled": (1e-4, 1e-6)}
# (T, H, P, N, state_at): H/P/N of the default ModelConfig, T across the 64-token chunk; then one wider shape,
# last because every new (H, P, N) re-runs the Triton autotuning (about 40 kernel configurations)
SIZES = [(1, 8, 8, 16, [0]), (5, 8, 8, 16, [4, 1]), (37, 8, 8, 16, [36, 0, 20]), (150, 8, 8, 16, [149, 63, 64])]
WIDE_SIZES = [(70, 4, 16, 32, [69, 7])]


def versions() -> dict:
    def dist(name):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"
    try:
        name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception as exc:  # noqa: BLE001 - versions never stop the check
        name = f"unreadable ({type(exc).__name__})"
    return {"python": sys.version.split()[0], "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "gpu": name, "triton": dist("triton"),
            "mamba_ssm": dist("mamba-ssm"), "vllm": dist("vllm")}


def _inputs(T, H, P, N, g):
    """Random float32 inputs in the model's ranges: dt in ~[1e-3, 0.1], A in [-16, -1]."""
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    dt = torch.nn.functional.softplus(r(T, H) - 4.0)
    return dict(x=r(T, H, P), dt=dt, A=-(1 + 15 * torch.rand(H, generator=g)), B=r(T, N), C=r(T, N),
                h0=0.5 * r(H, P, N))


def _compare(name, size, got, want) -> dict:
    rtol, atol = TOLERANCES[name]
    err = max(float((a.double().cpu() - b).abs().max()) for a, b in zip(got, want))
    scale = max(float(b.abs().max()) for b in want)
    tol = atol + rtol * scale
    return {"kernel": name, "size": size, "max_abs_err": err, "ref_max_abs": scale, "tolerance": tol,
            "ok": err <= tol}


def check_kernels(be, device: str, sizes=SIZES + WIDE_SIZES, pooled: bool = True, seed: int = 0) -> list[dict]:
    """Every kernel of `be` on `device` vs models.kernels in float64 on the CPU, from the same float32 inputs."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for T, H, P, N, state_at in sizes:
        i = _inputs(T, H, P, N, g)
        d = {k: v.to(device) for k, v in i.items()}
        ref = {k: v.double() for k, v in i.items()}
        size = f"T={T} H={H} P={P} N={N} state_at={state_at}"
        args = ("x", "dt", "A", "B", "C", "h0")
        rows.append(_compare("ssd_chunk_scan", size, be.ssd_chunk_scan(*(d[k] for k in args), state_at),
                             kernels.ssd_chunk_scan(*(ref[k] for k in args), state_at)))
        rows.append(_compare("ssd_recurrent", size, be.ssd_recurrent(*(d[k] for k in args)),
                             kernels.ssd_recurrent(*(ref[k] for k in args))))
        D, K = H * P, 4
        xc, win, w, b = torch.randn(T, D, generator=g), torch.randn(K - 1, D, generator=g), \
            torch.randn(D, K, generator=g) / 2, torch.randn(D, generator=g) / 10
        rows.append(_compare("causal_conv1d", f"T={T} D={D} d_conv={K}",
                             be.causal_conv1d(*(t.to(device) for t in (xc, win, w, b))),
                             kernels.causal_conv1d(*(t.double() for t in (xc, win, w, b)))))
        start, nh, hd = 3, 4, 8
        q, k, v = torch.randn(T, nh, hd, generator=g), torch.randn(start + T, nh, hd, generator=g), \
            torch.randn(start + T, nh, hd, generator=g)
        rows.append(_compare("paged_attention", f"T={T} start={start} heads={nh} hd={hd}",
                             [be.paged_attention(q.to(device), k.to(device), v.to(device), start)],
                             [kernels.paged_attention(q.double(), k.double(), v.double(), start)]))
    if pooled:
        rows.append(check_pooled_decode(be, device, g))
    return rows


def check_pooled_decode(be, device: str, g) -> dict:
    """A batched decode step on the SSM pages of a float32 TensorPool: block ids -> state_batch_indices;
    stepped pages match the reference recurrence, every other page is untouched."""
    from models.hybrid import HybridLM, ModelConfig
    from models.pool import TensorPool
    cfg = ModelConfig(dtype="float32", device=device)
    pool = TensorPool(HybridLM(cfg), num_blocks=16, num_speculative_tokens=0, attn_block_size=4)
    ssm = pool.ssm[1]  # [num_blocks, H, P, N], one Mamba layer's pages
    ssm.copy_(torch.randn(ssm.shape, generator=g).to(device))
    before = ssm.double().cpu()
    blocks = [9, 2, 14, 5]
    i = _inputs(len(blocks), cfg.nheads, cfg.headdim, cfg.d_state, g)
    y = be.decode_step(ssm, torch.tensor(blocks, dtype=torch.int32, device=device),
                       *(i[k].to(device) for k in ("x", "dt", "A", "B", "C")))
    ref = {k: v.double() for k, v in i.items()}
    want_y, want_h = [], before.clone()
    for r, blk in enumerate(blocks):
        yr, hr = kernels.ssd_recurrent(ref["x"][r:r + 1], ref["dt"][r:r + 1], ref["A"], ref["B"][r:r + 1],
                                       ref["C"][r:r + 1], before[blk])
        want_y.append(yr[0])
        want_h[blk] = hr[0]
    return _compare("decode_step_pooled", f"blocks={blocks} of {ssm.shape[0]}", [y, ssm],
                    [torch.stack(want_y), want_h])


def check_model(be, device: str) -> dict:
    """The model-tier seed scenario twice on the float32 model with the GPU backend."""
    from harness.replay import replay
    from harness.oracles import output_summary
    from harness.run_config import RunConfig
    from harness.scenario import load_scenario
    from models.hybrid import HybridLM, ModelConfig
    runs = []
    for _ in range(2):
        t0 = time.monotonic()
        trace = replay(load_scenario(SCENARIO), config=RunConfig(tier="model"),
                       model=HybridLM(ModelConfig(device=device, dtype="float32"), backend=be))
        runs.append({"summary": output_summary(trace), "exception": None if trace.exception is None
                     else str(trace.exception), "seconds": round(time.monotonic() - t0, 2)})
    # stock vLLM: the outputs must match the float32 reference (oracles.LOGIT_TOLERANCES["float32"])
    return {"scenario": SCENARIO.name, "runs": runs,
            "same_both_runs": runs[0]["summary"] == runs[1]["summary"],
            "ok": all(r["exception"] is None and r["summary"]["diverged"] == 0 for r in runs)}


def write(result: dict) -> Path:
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "artifacts"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu_check.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def _print(rows) -> None:
    for r in rows:
        print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['kernel']:<19} {r['size']:<44} max|err| {r['max_abs_err']:.3g}"
              f" (tol {r['tolerance']:.3g}, max|ref| {r['ref_max_abs']:.3g})")


def main() -> int:
    t0 = time.monotonic()
    result = {"versions": versions()}
    print("versions:", " ".join(f"{k}={v}" for k, v in result["versions"].items()))
    ok, why = gpu.available()
    if not ok:
        result.update(status="skipped", reason=why)
        print(f"SKIPPED: {why}  ({write(result)})")
        return 0
    be = gpu.backend()
    try:
        rows = result["kernels"] = check_kernels(be, DEVICE, SIZES)
        _print(rows)
        if importlib.util.find_spec("vllm") is None:
            result["model_tier"] = {"skipped": "vLLM is not importable"}
        elif time.monotonic() - t0 > BUDGET_S:
            result["model_tier"] = {"skipped": f"kernel checks took over {BUDGET_S} s"}
        else:
            m = result["model_tier"] = check_model(be, DEVICE)
            for r in m["runs"]:
                print(f"model tier {m['scenario']}: {r['summary']} exception={r['exception']} ({r['seconds']} s)")
        print("model tier:", result["model_tier"].get("skipped", "ran"))
        if time.monotonic() - t0 > BUDGET_S:
            result["wide_shape"] = f"skipped: over {BUDGET_S} s"
        else:
            rows += check_kernels(be, DEVICE, WIDE_SIZES, pooled=False)
            _print(rows[-len(WIDE_SIZES) * 4:])
        passed = all(r["ok"] for r in rows) and result["model_tier"].get("ok", True)
    except Exception as exc:  # recorded, then re-raised after the JSON is written
        result.update(status="failed", error=f"{type(exc).__name__}: {exc}", elapsed_s=time.monotonic() - t0)
        write(result)
        raise
    result.update(status="passed" if passed else "failed", elapsed_s=round(time.monotonic() - t0, 1))
    print(f"{result['status'].upper()} in {result['elapsed_s']} s ({write(result)})")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
