#!/usr/bin/env python3
"""Writes a GGUF with seeded random weights at a real model's shape, for
measuring speed where real weights cannot be had (a GPU machine with no
network), and for running every architecture at every weight type without
downloads. The tokenizer and chat template are copied from a donor GGUF, whose
vocabulary sets the embedding size. Each layer's weights are the same seeded
random tensors (tiled), so a large model is written in seconds; speed does not
depend on the values.

  python3 tools/make_random_gguf.py --donor SMALL.gguf --shape 1b --type q4_0 [--arch llama] [--vocab N] OUT.gguf

tests/golden/gemma2-odd-vocab.gguf (tensor parallel over a vocabulary that does
not split evenly, with the final soft cap):
  python3 tools/make_random_gguf.py --donor tests/golden/spm-tiny.gguf --shape tiny --type q8_0 \
      --arch gemma2 --vocab 1999 tests/golden/gemma2-odd-vocab.gguf

Architectures, with the tensors and keys llama.cpp's converter writes for each:
llama (the default); qwen2 (q/k/v biases); qwen3 (per-head q/k RMSNorm);
gemma2 (norms after attention and feed-forward too, soft-capping at 50 / 30, a
sliding window of 4096, or 64 with the tiny shape, tied embeddings); gemma3
(gemma2's norms and window without the caps, plus q/k RMSNorm). Norm weights
are ones (Gemma's files hold 1 + w), except Gemma's norms after attention and
feed-forward, which are POST_NORM.

Shapes: 1b (Llama-3.2-1B-like: dim 2048, 16 layers, 32/8 heads, ffn 8192),
8b (Llama-3-8B-like: dim 4096, 32 layers, 32/8 heads, ffn 14336) and tiny (dim
256, 2 layers, 4/2 heads, ffn 384: a test model of a few MB).

Types: q4_0, q8_0, f16, q5_0, q5_1 (quantized by gguf.quants); q4_k, q5_k, q6_k
(gguf cannot quantize these: blocks of random bytes with small f16 scales, which
are valid blocks); q4_k_m, like llama-quantize's mix: q6_k for the embeddings,
output and attn_v, q4_k elsewhere, and where a row is not a whole number of 256
the fallback llama-quantize takes (q4_k -> q5_0, q6_k -> q8_0): with the tiny
shape, ffn_down (rows of 384) is q5_0.
Needs the `gguf` package from PyPI and numpy.
"""
import argparse
import sys

import numpy as np

import gguf
from truncate_gguf import copy_field, finish

SHAPES = {
    "1b": dict(dim=2048, layers=16, heads=32, kv_heads=8, ffn=8192),
    "8b": dict(dim=4096, layers=32, heads=32, kv_heads=8, ffn=14336),
    "tiny": dict(dim=256, layers=2, heads=4, kv_heads=2, ffn=384),
}
Q = gguf.GGMLQuantizationType
TYPES = {"q4_0": Q.Q4_0, "q8_0": Q.Q8_0, "f16": Q.F16, "q5_0": Q.Q5_0, "q5_1": Q.Q5_1, "q4_k": Q.Q4_K,
         "q5_k": Q.Q5_K, "q6_k": Q.Q6_K, "q4_k_m": None}
# Bytes per 256-element block, and the byte offsets of its f16 scales.
K_BLOCKS = {Q.Q4_K: (144, [0, 2]), Q.Q5_K: (176, [0, 2]), Q.Q6_K: (210, [208])}
FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0}
MIX_Q6 = ("token_embd", "output", "attn_v")
# Gemma's norms after attention and feed-forward: large enough that the blocks,
# not the (scaled, tied) embedding of the last token, decide the next one.
POST_NORM = 8.0
# What each architecture adds to Llama's tensors and keys.
ARCHS = {
    "llama": (),
    "qwen2": ("bias",),
    "qwen3": ("qk_norm",),
    "gemma2": ("post_norms", "caps", "window", "tied"),
    "gemma3": ("post_norms", "window", "tied", "qk_norm"),
}


def random_k_blocks(rng, rows: int, cols: int, qtype) -> np.ndarray:
    size, scales = K_BLOCKS[qtype]
    blocks = rng.integers(0, 256, size=(rows * cols // 256, size), dtype=np.uint8)
    for off in scales:  # small, so that activations stay finite through the layers
        blocks[:, off:off + 2] = (rng.uniform(0.2, 1.0, blocks.shape[0]) / (16 * np.sqrt(cols))).astype(
            np.float16).view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, -1)


def add_llama_hparams(w: "gguf.GGUFWriter", s: dict, context_length: int, rope_freq_base: float) -> None:
    """The Llama architecture's keys for a shape of SHAPES' kind."""
    w.add_context_length(context_length)
    w.add_embedding_length(s["dim"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(rope_freq_base)


def layer_shapes(s: dict) -> dict:
    """Each block's weight matrices: name -> (rows, cols)."""
    d, f = s["dim"], s["ffn"]
    dkv = d // s["heads"] * s["kv_heads"]
    return {"attn_q": (d, d), "attn_k": (dkv, d), "attn_v": (dkv, d), "attn_output": (d, d),
            "ffn_gate": (f, d), "ffn_up": (f, d), "ffn_down": (d, f)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--donor", required=True, help="GGUF whose tokenizer and template are copied")
    ap.add_argument("--shape", choices=SHAPES, default="1b")
    ap.add_argument("--type", choices=TYPES, default="q4_0")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--arch", choices=ARCHS, default="llama")
    ap.add_argument("--vocab", type=int, default=0,
                    help="keep only the donor's first VOCAB tokens (e.g. an odd count, which a tensor-parallel "
                         "group cannot split evenly)")
    a = ap.parse_args()
    s = SHAPES[a.shape]
    rng = np.random.default_rng(a.seed)

    donor = gguf.GGUFReader(a.donor)
    donor_vocab = len(donor.fields["tokenizer.ggml.tokens"].contents())
    vocab = min(a.vocab, donor_vocab) if a.vocab > 0 else donor_vocab
    w = gguf.GGUFWriter(a.out, arch=a.arch)
    for name, field in donor.fields.items():
        if not name.startswith("tokenizer."):
            continue
        per_token = field.types[0] == gguf.GGUFValueType.ARRAY and len(field.data) == donor_vocab
        copy_field(w, name, field, field.contents()[:vocab] if per_token and vocab < donor_vocab else None)
    w.add_name(f"random-{a.arch}-{a.shape}-{a.type}")
    add_llama_hparams(w, s, 8192, 500000.0)
    extras = ARCHS[a.arch]
    head_dim = s["dim"] // s["heads"]
    if "window" in extras:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_sliding_window(64 if a.shape == "tiny" else 4096)
    if "caps" in extras:
        w.add_attn_logit_softcapping(50.0)
        w.add_final_logit_softcapping(30.0)

    def qtype_of(name: str, cols: int):
        t = TYPES[a.type] if a.type != "q4_k_m" else (Q.Q6_K if name.startswith(MIX_Q6) else Q.Q4_K)
        return FALLBACK[t] if t in FALLBACK and cols % 256 != 0 else t

    def weight(name: str, rows: int, cols: int):
        qtype = qtype_of(name, cols)
        if qtype in K_BLOCKS:
            return random_k_blocks(rng, rows, cols, qtype), qtype
        x = rng.standard_normal((rows, cols), dtype=np.float32) * (1.0 / np.sqrt(cols))
        return (x.astype(np.float16) if qtype == Q.F16 else gguf.quants.quantize(x, qtype)), qtype

    def put(name: str, data) -> None:
        if isinstance(data, tuple):
            w.add_tensor(name, data[0], raw_dtype=data[1])
        else:
            w.add_tensor(name, data)

    d = s["dim"]
    dkv = head_dim * s["kv_heads"]
    put("token_embd.weight", weight("token_embd", vocab, d))
    put("output_norm.weight", np.ones(d, dtype=np.float32))
    if "tied" not in extras:
        put("output.weight", weight("output", vocab, d))
    layer = {k: weight(k, *v) for k, v in layer_shapes(s).items()}
    vectors = {"attn_norm": d, "ffn_norm": d}  # F32, as the converter writes vectors
    if "post_norms" in extras:
        vectors |= {"post_attention_norm": d, "post_ffw_norm": d}
    if "qk_norm" in extras:
        vectors |= {"attn_q_norm": head_dim, "attn_k_norm": head_dim}
    biases = {"attn_q": d, "attn_k": dkv, "attn_v": dkv} if "bias" in extras else {}
    bias = {k: (rng.standard_normal(n, dtype=np.float32) * 0.02) for k, n in biases.items()}
    for i in range(s["layers"]):
        for k, n in vectors.items():
            put(f"blk.{i}.{k}.weight", np.full(n, POST_NORM if k.startswith("post_") else 1.0, dtype=np.float32))
        for k, v in layer.items():
            put(f"blk.{i}.{k}.weight", v)
        for k, v in bias.items():
            put(f"blk.{i}.{k}.bias", v)
    finish(w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
