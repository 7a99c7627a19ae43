#!/usr/bin/env python3
"""Writes a Llama-architecture GGUF with seeded random weights at a real model's
shape, for measuring speed where real weights cannot be had (a GPU machine with
no network). The tokenizer and chat template are copied from a donor GGUF, whose
vocabulary sets the embedding size. Each layer's weights are the same seeded
random tensors (tiled), so a large model is written in seconds; speed does not
depend on the values.

  python3 tools/make_random_gguf.py --donor SMALL.gguf --shape 1b --type q4_0 OUT.gguf

Shapes: 1b (Llama-3.2-1B-like: dim 2048, 16 layers, 32/8 heads, ffn 8192) and
8b (Llama-3-8B-like: dim 4096, 32 layers, 32/8 heads, ffn 14336).
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
}
TYPES = {"q4_0": gguf.GGMLQuantizationType.Q4_0, "q8_0": gguf.GGMLQuantizationType.Q8_0,
         "f16": gguf.GGMLQuantizationType.F16}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--donor", required=True, help="GGUF whose tokenizer and template are copied")
    ap.add_argument("--shape", choices=SHAPES, default="1b")
    ap.add_argument("--type", choices=TYPES, default="q4_0")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    s = SHAPES[a.shape]
    qtype = TYPES[a.type]
    rng = np.random.default_rng(a.seed)

    donor = gguf.GGUFReader(a.donor)
    vocab = len(donor.fields["tokenizer.ggml.tokens"].contents())
    w = gguf.GGUFWriter(a.out, arch="llama")
    for name, field in donor.fields.items():
        if name.startswith("tokenizer."):
            copy_field(w, name, field)
    w.add_name(f"random-{a.shape}-{a.type}")
    w.add_context_length(8192)
    w.add_embedding_length(s["dim"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(500000.0)

    def weight(rows: int, cols: int) -> np.ndarray:
        x = rng.standard_normal((rows, cols), dtype=np.float32) * (1.0 / np.sqrt(cols))
        return x.astype(np.float16) if qtype == gguf.GGMLQuantizationType.F16 else gguf.quants.quantize(x, qtype)

    def put(name: str, data: np.ndarray) -> None:
        w.add_tensor(name, data, raw_dtype=qtype if data.dtype != np.float32 else None)

    d, dkv, f = s["dim"], s["dim"] // s["heads"] * s["kv_heads"], s["ffn"]
    put("token_embd.weight", weight(vocab, d))
    put("output_norm.weight", np.ones(d, dtype=np.float32))
    put("output.weight", weight(vocab, d))
    layer = {"attn_q": weight(d, d), "attn_k": weight(dkv, d), "attn_v": weight(dkv, d),
             "attn_output": weight(d, d), "ffn_gate": weight(f, d), "ffn_up": weight(f, d),
             "ffn_down": weight(d, f)}
    for i in range(s["layers"]):
        put(f"blk.{i}.attn_norm.weight", np.ones(d, dtype=np.float32))
        put(f"blk.{i}.ffn_norm.weight", np.ones(d, dtype=np.float32))
        for k, v in layer.items():
            put(f"blk.{i}.{k}.weight", v)
    finish(w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
