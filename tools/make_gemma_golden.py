#!/usr/bin/env python3
"""Makes the Gemma 2 GGUF fixture and its golden from transformers.

    tools/make_gemma_golden.py [--out-dir tests/golden] [--seed 0]

A tiny Gemma2ForCausalLM with seeded random weights (tools/make_qwen_golden.py's
model, writer and golden), written as OUT_DIR/gemma2-tiny.gguf the way
llama.cpp's converter writes Gemma 2: F16 matrices, F32 norms holding
transformers' 1 + w, tied embeddings, no Q/K permutation, the caps and the
window as gemma2.* keys; and transformers' float32 answers (eager attention,
the one that soft-caps) for make_hf_golden.py's prompts to OUT_DIR/gemma2_tiny.json.

  gemma2: 16 wide, 2 layers (0 local, 1 global), 2 heads of 16 (wider than
          16 / 2) over 1 kv head, a 32-wide GELU feed-forward, a sliding window
          of 8 (shorter than the prompts), attention scores capped at 2 and
          logits at 15 (both bind: the logits reach 24 uncapped),
          query_pre_attn_scalar = head width (as llama.cpp assumes for every
          size but 27B), norm weights w such that 1 + w is around 1 (4 for
          the blocks' output norms)

No tokenizer (the file stays a few KB): a prompt's ids are its UTF-8 bytes, in
a 256-token vocabulary. tests/unit/test_gemma.cpp compares inferd's CPU backend
against these. Needs torch, transformers, numpy and gguf (pip); the tests do not.
"""
import argparse
import pathlib

from make_qwen_golden import LAYER_NAMES, ROOT, seeded_model, write_golden, write_gguf

# Gemma's four norms per layer, named as llama.cpp names them.
GEMMA_LAYER_NAMES = dict(LAYER_NAMES) | {
    "post_attention_layernorm.weight": "attn_post_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "ffn_post_norm.weight",
}
GEMMA2 = dict(vocab_size=256, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16, max_position_embeddings=256,
              rope_theta=10000.0, rms_norm_eps=1e-6, sliding_window=8, attn_logit_softcapping=2.0,
              final_logit_softcapping=15.0, tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
              bos_token_id=2, eos_token_id=1, pad_token_id=0)


class ByteIds:
    """A prompt's UTF-8 bytes as its ids: what golden_cases asks of a tokenizer."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": list(text.encode())}


def make_gemma2(out_dir: pathlib.Path, seed: int) -> None:
    import torch
    import transformers

    cfg = transformers.Gemma2Config(**GEMMA2)
    cfg._attn_implementation = "eager"
    model = seeded_model(transformers.Gemma2ForCausalLM, cfg, seed)
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
        w.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
        w.add_final_logit_softcapping(cfg.final_logit_softcapping)

    path = out_dir / "gemma2-tiny.gguf"
    write_gguf(path, "gemma2", cfg, model, layer_names=GEMMA_LAYER_NAMES, norm_shift=1.0, keys=keys)
    write_golden(path, model, ByteIds(), out_dir / "gemma2_tiny.json")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=str(ROOT / "tests/golden"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    make_gemma2(pathlib.Path(args.out_dir), args.seed)


if __name__ == "__main__":
    main()
