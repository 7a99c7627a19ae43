#!/usr/bin/env python3
"""Makes the Gemma 2 and Gemma 3 GGUF fixtures and their goldens from transformers.

    tools/make_gemma_golden.py [--out-dir tests/golden] [--seed 0]

For each architecture, a tiny Gemma2ForCausalLM / Gemma3ForCausalLM with seeded
random weights (tools/make_qwen_golden.py's model, writer and golden), written
as OUT_DIR/ARCH-tiny.gguf the way llama.cpp's converter writes it: F16
matrices, F32 norms holding transformers' 1 + w, tied embeddings, no Q/K
permutation, the caps and the window as ARCH.* keys; and transformers' float32
answers (eager attention, the one that soft-caps) for make_hf_golden.py's
prompts to OUT_DIR/ARCH_tiny.json.

  gemma2: 16 wide, 2 layers (0 local, 1 global), 2 heads of 16 (wider than
          16 / 2) over 1 kv head, a 32-wide GELU feed-forward, a sliding window
          of 8 (shorter than the prompts), attention scores capped at 2 and
          logits at 15 (both bind: the logits reach 24 uncapped),
          query_pre_attn_scalar = head width (as llama.cpp assumes for every
          size but 27B), norm weights w such that 1 + w is around 1 (4 for
          the blocks' output norms)
  gemma3: the same shape with 6 layers (0-4 local, 5 global), per-head q/k
          RMSNorm, no soft-capping, RoPE base 10000 on the local layers and
          1e6 with linear scaling by 2 on the global one

No tokenizer (the file stays a few KB): a prompt's ids are its UTF-8 bytes, in
a 256-token vocabulary. tests/unit/test_gemma.cpp compares inferd's CPU backend
against these. Needs torch, transformers, numpy and gguf (pip); the tests do not.
"""
import argparse
import pathlib

import gguf

from make_qwen_golden import LAYER_NAMES, ROOT, seeded_model, write_golden, write_gguf

# Gemma's four norms per layer, named as llama.cpp names them (gguf's
# TensorNameMap for gemma2 and gemma3: post_attention_norm, ffn_norm, post_ffw_norm).
GEMMA_LAYER_NAMES = dict(LAYER_NAMES) | {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}
GEMMA2 = dict(vocab_size=256, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16, max_position_embeddings=256,
              rope_theta=10000.0, rms_norm_eps=1e-6, sliding_window=8, attn_logit_softcapping=2.0,
              final_logit_softcapping=15.0, tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
              bos_token_id=2, eos_token_id=1, pad_token_id=0)


def check_names(arch: str, n_layers: int) -> None:
    """That the names above are gguf's own for the architecture (what llama.cpp's converter writes)."""
    names = gguf.TensorNameMap(gguf.MODEL_ARCH[arch.upper()], n_layers)
    for hf, ours in GEMMA_LAYER_NAMES.items():
        theirs = names.get_name(f"model.layers.0.{hf.removesuffix('.weight')}")
        if theirs and not hf.endswith(".bias") and f"{theirs}.weight" != f"blk.0.{ours}":
            raise SystemExit(f"{arch}: {hf} is {theirs} in gguf, not blk.0.{ours}")


class ByteIds:
    """A prompt's UTF-8 bytes as its ids: what golden_cases asks of a tokenizer."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": list(text.encode())}


# Gemma 2's shape without the caps, six layers, and RoPE by layer type.
GEMMA3 = {k: v for k, v in GEMMA2.items() if "softcapping" not in k} | dict(
    num_hidden_layers=6, rope_theta=None,
    rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
                     "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
del GEMMA3["rope_theta"]


def make(arch: str, out_dir: pathlib.Path, seed: int) -> None:
    import torch
    import transformers

    config_class = {"gemma2": transformers.Gemma2Config, "gemma3": transformers.Gemma3TextConfig}[arch]
    model_class = {"gemma2": transformers.Gemma2ForCausalLM, "gemma3": transformers.Gemma3ForCausalLM}[arch]
    cfg = config_class(**{"gemma2": GEMMA2, "gemma3": GEMMA3}[arch])
    cfg._attn_implementation = "eager"
    model = seeded_model(model_class, cfg, seed)
    # The draw's norm weights are around 1 and Gemma's norms multiply by 1 + w:
    # w = draw - 1, and 4 draw - 1 for the blocks' output norms so that, as in
    # the draw's 4x output projections, the blocks rather than the embedding's
    # own row decide the next token.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_((4.0 if ".post_" in name else 1.0) * p - 1.0)

    def keys(w):
        w.add_key_length(cfg.head_dim)
        w.add_value_length(cfg.head_dim)
        w.add_sliding_window(cfg.sliding_window)
        if cfg.attn_logit_softcapping:
            w.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
            w.add_final_logit_softcapping(cfg.final_logit_softcapping)
        scaling = cfg.rope_parameters.get("full_attention", {}) if arch == "gemma3" else {}
        if scaling.get("rope_type") == "linear":
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(scaling["factor"])

    check_names(arch, cfg.num_hidden_layers)
    path = out_dir / f"{arch}-tiny.gguf"
    write_gguf(path, arch, cfg, model, layer_names=GEMMA_LAYER_NAMES, norm_shift=1.0, keys=keys)
    write_golden(path, model, ByteIds(), out_dir / f"{arch}_tiny.json")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=str(ROOT / "tests/golden"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for arch in ("gemma2", "gemma3"):
        make(arch, pathlib.Path(args.out_dir), args.seed)


if __name__ == "__main__":
    main()
