#!/usr/bin/env python3
"""Writes tests/golden/kquant_dequant.txt: rows of the k-quant and 5-bit GGUF
block types with their values as the `gguf` package (PyPI) dequantizes them,
the independent reference that test_kquant.cpp holds inferd's dequantization to,
bit for bit.

  python3 tools/make_kquant_fixture.py [OUT]

Types gguf.quants can quantize (Q5_0, Q5_1) are quantized from random floats;
for the others (Q4_K, Q5_K, Q6_K) the blocks are random bytes with finite f16
scales, which is every valid block. Format, one record per type:
  type NAME ID N_ELEMENTS
  bytes HEX...
  values HEX... (float32 bit patterns, 8 hex digits each)
"""
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T

# (type, elements, where each f16 scale sits in a block: byte offsets)
RANDOM_BLOCK = {T.Q4_K: (144, [0, 2]), T.Q5_K: (176, [0, 2]), T.Q6_K: (210, [208])}


def finite_f16(rng, n):
    return (rng.standard_normal(n) * 0.05).astype(np.float16).view(np.uint8).reshape(n, 2)


def main() -> int:
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/golden/kquant_dequant.txt"
    rng = np.random.default_rng(20261205)
    lines = []
    for qtype, n in [(T.Q5_0, 256), (T.Q5_1, 256), (T.Q4_K, 768), (T.Q5_K, 768), (T.Q6_K, 768)]:
        if qtype in RANDOM_BLOCK:
            size, scale_offsets = RANDOM_BLOCK[qtype]
            blocks = rng.integers(0, 256, size=(n // 256, size), dtype=np.uint8)
            for off in scale_offsets:
                blocks[:, off:off + 2] = finite_f16(rng, n // 256)
            raw = blocks.reshape(-1)
        else:
            raw = gguf.quants.quantize(rng.uniform(-1, 1, size=(1, n)).astype(np.float32), qtype).reshape(-1)
        values = gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(-1)
        assert values.size == n and np.all(np.isfinite(values))
        lines.append(f"type {qtype.name} {int(qtype)} {n}")
        lines.append("bytes " + raw.tobytes().hex())
        lines.append("values " + "".join(f"{v:08x}" for v in values.view(np.uint32)))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
