"""GatedDeltaNet mutants: run-time patches of vLLM's GDN metadata builder (`GDNAttentionMetadataBuilder.build`,
v1/attention/backends/gdn_attn.py in 0.33.0), which both model runners call for a GatedDeltaNet model's groups
(Qwen3-Next: `geometry.model` "qwen3-next-80b-a3b"). Only that model's geometry reaches them, so their campaigns
run on it (`Mutant.model_config`).

- gdn-zero-draft-decode-as-plain: a decode step that got no drafts counts as a plain decode again, not as a
  speculative row with zero drafts. The V1 runner marks those rows (`zero_draft_decode_mask`,
  gpu_model_runner.py:2215-2227 in 0.33.0: "a decode step that got no drafts must still count as a speculative
  row with zero drafts, not as a plain decode"; V2: model_states/mamba_hybrid.py:281-300) because only GDN's
  speculative path reads the previous step's state at its accepted offset; the mutant undoes the mark.
- gdn-spec-accepted-offset-dropped: GDN's speculative rows get accepted counts of 1, so the conv and recurrent
  kernels start from the first speculative column whatever the last step accepted (the class of the accepted-
  count bugs of the bug history: a request decoding with another count than its own).
"""

from __future__ import annotations

from harness.mutants.base import Mutant, bound_arguments, method_wrapped, wrap_method

QWEN3_NEXT = "qwen3-next-80b-a3b"


def gdn_builder_class():
    from vllm.v1.attention.backends.gdn_attn import GDNAttentionMetadataBuilder

    return GDNAttentionMetadataBuilder


def build_argument_changed(name: str, change):
    """make(original) for `build`: vLLM's builder called with argument `name` replaced by change(value)."""
    def make(original):
        def build(self, *args, **kwargs):
            call = bound_arguments(original, self, *args, **kwargs)
            if call.arguments.get(name) is not None:
                call.arguments[name] = change(call.arguments[name])
            return original(*call.args, **call.kwargs)
        return build
    return make


def zero_drafts_as(value: int):
    """change() for the builder's draft counts: every zero (a speculative row with no drafts) becomes `value`."""
    def change(drafts):
        drafts = drafts.clone()
        drafts[drafts == 0] = value
        return drafts
    return change


def _gdn_mutant(name: str, bug_class: str, origin: str, make, runner: str) -> Mutant:
    return Mutant(name=name, bug_class=bug_class, releases="0.33.x", origin=origin,
                  patch=lambda: wrap_method(gdn_builder_class(), "build", make),
                  is_applied=lambda: method_wrapped(gdn_builder_class(), "build"), runner=runner,
                  model_config=QWEN3_NEXT)


GDN_MUTANTS = (
    _gdn_mutant("gdn-zero-draft-decode-as-plain", "lost classification: a GatedDeltaNet decode step with no drafts "
                "runs as a plain decode, so its state is read where the last step wrote its first token's, not its "
                "last accepted token's",
                "vLLM's zero_draft_decode_mask (gpu_model_runner.py:2215-2227 in 0.33.0; V2 mamba_hybrid.py:281-300)",
                build_argument_changed("num_decode_draft_tokens_cpu", zero_drafts_as(-1)), "v1"),  # mask undone
    _gdn_mutant("gdn-spec-accepted-offset-dropped", "lost offset: GatedDeltaNet's speculative rows start from the "
                "first speculative column, not the one the last step's accepted count names",
                "synthetic, in the accepted-count class of the bug history (gdn_attn.py:506-509 in 0.33.0 selects "
                "the speculative rows' counts)",
                build_argument_changed("num_accepted_tokens", lambda n: n.new_ones(n.shape)), "v1"),
)
