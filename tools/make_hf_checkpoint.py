#!/usr/bin/env python3
"""Writes a seeded random Llama checkpoint in the Hugging Face layout.

    tools/make_hf_checkpoint.py OUT_DIR [--shape tiny|1b|8b] [--dtype bf16|f16|f32]
                                [--shard-size 2GB] [--seed 0] [--gguf PATH]

OUT_DIR gets config.json, model.safetensors (or shards and
model.safetensors.index.json when --shard-size is smaller than the weights),
generation_config.json and the tokenizer (tokenizer.json, tokenizer_config.json),
converted by transformers from the GGUF model's tokenizer: by default the model
the tests use ($INFERD_MODEL, else $INFERD_CACHE or ~/.cache/inferd, then
models/SmolLM2-135M-Instruct.Q4_1.gguf; tools/bootstrap.sh fetches it). The
vocabulary size is that tokenizer's.

Shapes: `tiny` (a few MB, for tests: 16 wide, 2 layers, head_dim 8 set apart from
width / heads, linear RoPE scaling, tied embeddings, a feed-forward that
tensor parallelism can split), `1b` (Llama-3.2-1B's layer
shapes) and `8b` (Llama-3-8B's). Weights are drawn with std 1/sqrt(fan-in) (4x that for the
blocks' output projections, the embeddings with std 1, norms around 1) so logits
are well separated and greedy decoding is a meaningful check.

Needs torch, transformers, safetensors, numpy and gguf (pip); inferd's tests do not.
"""
import argparse
import os
import pathlib
import sys

SHAPES = {
    "tiny": dict(hidden_size=16, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=8, max_position_embeddings=256, rope_theta=10000.0,
                 rms_norm_eps=1e-5, tie_word_embeddings=True,
                 rope_scaling={"type": "linear", "factor": 2.0}),
    # Llama-3.2-1B's layers (its llama3 RoPE scaling is left out: inferd takes linear only).
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, head_dim=64, max_position_embeddings=8192, rope_theta=500000.0,
               rms_norm_eps=1e-5, tie_word_embeddings=True),
    # Llama-3-8B's layers.
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, max_position_embeddings=8192, rope_theta=500000.0,
               rms_norm_eps=1e-5, tie_word_embeddings=False),
}
DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}


def default_gguf():
    env = os.environ.get("INFERD_MODEL")
    if env:
        return env
    cache = os.environ.get("INFERD_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "inferd")
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def randomize(model, seed):
    """Fills a transformers model's weights in place, drawn as the docstring says
    (projection biases with std 0.5), parameter by parameter from one seeded generator."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith(".bias"):
                p.copy_(0.5 * r)
            elif p.dim() == 1:  # norm weights
                p.copy_(1.0 + 0.1 * r)
            elif "embed_tokens" in name:
                p.copy_(r)
            else:
                # The blocks' outputs weigh 4x so they, not the embedding's own
                # row, decide the next token (a tied model otherwise repeats its input).
                gain = 4.0 if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
                p.copy_(r.mul_(gain / p.shape[1] ** 0.5))
            del r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--shard-size", default=None, help="e.g. 500MB: shards no larger than this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gguf", default=None, help="GGUF whose tokenizer to take (default: the tests' model)")
    args = ap.parse_args()

    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    gguf = pathlib.Path(args.gguf or default_gguf())
    if not gguf.is_file():
        sys.exit(f"{gguf}: not found (tools/bootstrap.sh fetches the default model)")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    vocab = len(tok)

    cfg = LlamaConfig(vocab_size=vocab, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      hidden_act="silu", attention_bias=False, mlp_bias=False, **SHAPES[args.shape])
    torch.manual_seed(args.seed)
    dtype = getattr(torch, DTYPES[args.dtype])
    # Built in the target dtype and filled tensor by tensor: an 8b model in
    # float32 would need 32 GB at once.
    torch.set_default_dtype(dtype)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model = model.to_empty(device="cpu")
    randomize(model, args.seed)
    if cfg.tie_word_embeddings:
        model.tie_weights()

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kwargs = {"safe_serialization": True}
    if args.shard_size:
        kwargs["max_shard_size"] = args.shard_size
    model.save_pretrained(out, **kwargs)
    GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id).save_pretrained(out)
    tok.save_pretrained(out)
    print(f"{out}: {args.shape} {args.dtype}, vocab {vocab}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")


if __name__ == "__main__":
    main()
