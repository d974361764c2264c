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

from harness.e2e.geometry import VOCAB
from harness.errors import BadInput

CACHE = Path(__file__).resolve().parents[2] / "artifacts" / "cache" / "e2e-models"

# family -> (transformers config class, its arguments): the layer pattern mixes Mamba and attention
FAMILIES: dict[str, tuple[str, dict]] = {
    # Nemotron-H: Mamba2, attention, Mamba2, MLP (hybrid_override_pattern "M*M-"). The Mamba state (5.2 KB) fits
    # a 16-token attention page (8 KB), so vLLM keeps a 16-token block (it raises the block until the attention
    # page holds a Mamba state: platforms/interface.py `_align_hybrid_block_size`)
    "nemotron-h": ("NemotronHConfig", dict(
        hidden_size=128, num_hidden_layers=4, hybrid_override_pattern="M*M-", num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, intermediate_size=256, mamba_num_heads=4, mamba_head_dim=16,
        ssm_state_size=16, n_groups=1, mamba_d_conv=4, chunk_size=16, max_position_embeddings=8192,
        time_step_limit=[0.0, 1e4], initializer_range=0.1)),
}
DEFAULT_FAMILY = "nemotron-h"


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
