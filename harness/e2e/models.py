"""Tiny hybrid models for tier e2e, made locally from a seed: transformers' own config class for each family
vLLM's CPU build runs, randomly initialised with a fixed seed in fp32 and saved as a Hugging Face folder that
vLLM loads like any checkpoint (no hub, no tokenizer: prompts are token ids).

Each family keeps vLLM's hybrid shape (Mamba and attention layers in one model) at hidden size 128 and a
1,024-token vocabulary; a folder is built once per family, seed and transformers version, into
artifacts/cache/e2e-models/ (about 2 MB, a few seconds)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from harness.e2e.families import DEFAULT_FAMILY, FAMILIES
from harness.e2e.geometry import VOCAB
from harness.errors import BadInput

CACHE = Path(__file__).resolve().parents[2] / "artifacts" / "cache" / "e2e-models"



def model_dir(family: str = DEFAULT_FAMILY, seed: int = 0) -> Path:
    """The folder of `family`'s tiny model for `seed`, built on first use."""
    if family not in FAMILIES:
        raise BadInput(f"unknown e2e model family {family!r}: choose one of {', '.join(FAMILIES)}")
    return _build(family, seed)


@functools.cache
def _build(family: str, seed: int) -> Path:
    import torch
    import transformers

    cls_name, kwargs = FAMILIES[family]
    out = CACHE / f"{family}-seed{seed}-transformers{transformers.__version__}"
    if (out / "model.safetensors").is_file() and (out / "config.json").is_file():
        return out
    config = getattr(transformers, cls_name)(vocab_size=VOCAB, bos_token_id=0, eos_token_id=1, pad_token_id=0,
                                             tie_word_embeddings=False, **kwargs)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    meta = json.loads((tmp / "config.json").read_text())
    meta["torch_dtype"] = meta["dtype"] = "float32"
    (tmp / "config.json").write_text(json.dumps(meta, indent=1))
    tmp.replace(out) if not out.exists() else None  # another process may have won the race: keep its folder
    return out


__all__ = ["DEFAULT_FAMILY", "FAMILIES", "model_dir"]
