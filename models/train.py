"""Train the tiny hybrid LM locally on the synthetic chat corpus (byte-level), so that its outputs are text
and a wrong state shows as text a user would read. Nothing is downloaded: the corpus is the seeded
generator of `harness/workloads.py`. ~20 s for the default 300 Adam steps on one core; weights are cached
under artifacts/models/ keyed by everything that decides them.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import asdict
from pathlib import Path

import torch

from models import kernels
from models.hybrid import HybridLM, ModelConfig, contiguous_kv
from models.tokenizer import ByteTokenizer

CACHE = Path(__file__).resolve().parent.parent / "artifacts" / "models"


def corpus(seed: int = 1, sessions: int = 200) -> list[int]:
    from harness.workloads import synthetic_sessions

    rows = synthetic_sessions(sessions=sessions, turns=3, seed=seed)
    return ByteTokenizer().encode(" ".join(" ".join(r["turns"]) for r in rows), bos=False)


def _params(model: HybridLM) -> list[torch.Tensor]:
    return [model.embed, model.lm_head, model.final_norm] + [t for p in model.layers for t in p.values()]


def train(cfg: ModelConfig = ModelConfig(), *, steps: int = 300, seq_len: int = 64, batch: int = 4,
          lr: float = 3e-3, seed: int = 0) -> tuple[HybridLM, list[float]]:
    """Adam on next-byte cross-entropy over random windows of the corpus. Returns the model and the losses."""
    ids = corpus()
    model = HybridLM(cfg)
    # index tensors cached under inference_mode cannot be saved for backward: start the caches afresh
    kernels.index.cache_clear()
    kernels._above_diagonal.cache_clear()
    params = _params(model)
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=lr)
    rng, losses = random.Random(seed), []
    zero = [model._new_zero_state() for _ in cfg.mamba_layers]
    with torch.enable_grad():
        for _ in range(steps):
            opt.zero_grad()
            loss = torch.zeros((), dtype=cfg.torch_dtype)
            for _ in range(batch):
                start = rng.randrange(len(ids) - seq_len - 1)
                window = ids[start:start + seq_len + 1]
                kv, _ = contiguous_kv()
                logits, _ = model.forward(window[:-1], 0, zero, kv, [seq_len - 1], 0)
                loss = loss + torch.nn.functional.cross_entropy(logits, torch.tensor(window[1:]))
            (loss / batch).backward()
            opt.step()
            losses.append(float(loss.detach()) / batch)
    for p in params:
        p.requires_grad_(False)
    kernels.index.cache_clear()
    kernels._above_diagonal.cache_clear()
    return model, losses


def trained_model(cfg: ModelConfig = ModelConfig(), steps: int = 300) -> HybridLM:
    """The trained model, from artifacts/models/ when it was trained before with the same settings."""
    key = hashlib.sha1(json.dumps([asdict(cfg), steps, torch.__version__], sort_keys=True).encode()).hexdigest()[:12]
    path = CACHE / f"trained-{key}.pt"
    model = HybridLM(cfg)
    if path.exists():
        weights = torch.load(path)
        model.embed, model.lm_head, model.final_norm, model.layers = (
            weights["embed"], weights["lm_head"], weights["final_norm"], weights["layers"])
        return model
    model, _ = train(cfg, steps=steps)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # campaign workers may train at the same time
    torch.save({"embed": model.embed, "lm_head": model.lm_head, "final_norm": model.final_norm,
                "layers": model.layers}, tmp)
    tmp.replace(path)
    return model
