"""The tiny model families tier e2e builds (harness/e2e/models.py): transformers' config class and its arguments
per family, pure data (the run configuration validates `--e2e-model` against it without importing torch).

Each keeps vLLM's hybrid shape at hidden size 128: Mamba and attention layers in one model. What runs on vLLM's
CPU build (0.32.0, measured: docs/e2e-tier.md#models): Nemotron-H, Falcon-H1 and Granite-4 (Mamba2 layers, so
behind the known CPU chunk-scan crash, cpu-mamba2-prefill-checkpoint, on 0.32.0). Jamba (Mamba1: the CPU build has
no `selective_scan_fwd`), Qwen3-Next (GatedDeltaNet: the CPU kernel wants bf16 and head_dim a multiple of 32) and
LFM2 (short convolutions) are not built here."""

from __future__ import annotations

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
    # Falcon-H1: attention and Mamba2 in parallel in every layer
    "falcon-h1": ("FalconH1Config", dict(
        hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        intermediate_size=256, mamba_d_ssm=64, mamba_n_heads=4, mamba_d_head=16, mamba_d_state=16, mamba_n_groups=1,
        mamba_d_conv=4, mamba_chunk_size=16, max_position_embeddings=8192, initializer_range=0.1)),
    # Granite-4 (GraniteMoeHybrid): Mamba2, attention, Mamba2, Mamba2, dense MLPs
    "granite-4": ("GraniteMoeHybridConfig", dict(
        hidden_size=128, num_hidden_layers=4, layer_types=["mamba", "attention", "mamba", "mamba"],
        num_attention_heads=4, num_key_value_heads=2, intermediate_size=256, mamba_n_heads=4, mamba_d_head=32,
        mamba_d_state=8, mamba_n_groups=1, mamba_d_conv=4, mamba_chunk_size=16, mamba_expand=1,
        num_local_experts=0, shared_intermediate_size=256, max_position_embeddings=8192, initializer_range=0.1)),
}
DEFAULT_FAMILY = "nemotron-h"

__all__ = ["DEFAULT_FAMILY", "FAMILIES"]
