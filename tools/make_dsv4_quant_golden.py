#!/usr/bin/env python3
"""Writes tests/golden/dsv4_quant.bin: DeepSeek-V4's scaled weight formats decoded
and multiplied by PyTorch, the reference the CPU kernels (kernels/scaled_weight.hpp,
Backend::matmul_scaled) are checked against.

- e4m3fn and E8M0: every byte decoded through torch.float8_e4m3fn /
  torch.float8_e8m0fnu.
- E2M1: torch (2.15) stores float4_e2m1fn_x2 but cannot convert it, so its 16
  codes are decoded from the bit layout (1 sign, 2 exponent bits of bias 1,
  1 mantissa bit), not from a table.
- An FP8 block-scaled weight [200, 192] (ragged last 128-block in both dims) with
  E8M0 and with float32 scales, and an MXFP4 weight [64, 256]; edge bytes placed
  in them: e4m3 zero, -0, subnormals, +-448, NaN (one row), E8M0 2^-127 and NaN
  (one row); dequantized by torch and multiplied in float64 with 3 tokens of
  seeded inputs.

- DeepSeek-V4's routed experts (moe_*): 6 MXFP4 experts [32, 64] / [64, 32],
  top 3 of 4 tokens by score (with a bias that changes a selection) and by hash
  (tid2eid), SwiGLU clamped at a limit that bites.

Record format: a text line "name dtype dim..." (dtype u8, i32, i64, f32 or f64),
then the array's raw little-endian bytes.

Usage: tools/make_dsv4_quant_golden.py [out path]
"""
import sys

import torch

SEED = 28
OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/golden/dsv4_quant.bin"
TOKENS = 3


def e2m1_from_bits(code):
    sign = -1.0 if code & 8 else 1.0
    e, m = (code >> 1) & 3, code & 1
    mag = m * 0.5 if e == 0 else 2.0 ** (e - 1) * (1 + m / 2)
    return sign * mag


def fp8_dequant(w, scale):
    """w: uint8 [out, in] e4m3fn; scale: float32 [ceil(out/128), ceil(in/128)]."""
    out, inp = w.shape
    s = scale.repeat_interleave(128, 0).repeat_interleave(128, 1)[:out, :inp]
    return w.view(torch.float8_e4m3fn).float() * s


def mxfp4_dequant(w, scale):
    """w: uint8 [out, in/2], element 2i the low nibble of byte i; scale: uint8 E8M0 [out, in/32]."""
    table = torch.tensor([e2m1_from_bits(c) for c in range(16)], dtype=torch.float32)
    codes = torch.stack([w & 0xF, w >> 4], dim=-1).reshape(w.shape[0], -1).long()
    s = scale.view(torch.float8_e8m0fnu).float().repeat_interleave(32, 1)
    return table[codes] * s


def moe_case(g, add):
    """DeepSeek-V4's routed experts as its reference model.py runs them (Gate and
    Expert), in float64: sqrtsoftplus scores, top-k of score + bias (the bias
    selects only) or tid2eid by token id, weights normalized then scaled, SwiGLU
    with the gate clamped above and the up clamped both ways, the routing weight
    applied before w2."""
    dim, inter, n_experts, top_k, vocab, tokens = 64, 32, 6, 3, 10, 4
    route_scale = 1.5
    w1 = torch.randint(0, 256, (n_experts, inter, dim // 2), generator=g, dtype=torch.uint8)
    w3 = torch.randint(0, 256, (n_experts, inter, dim // 2), generator=g, dtype=torch.uint8)
    w2 = torch.randint(0, 256, (n_experts, dim, inter // 2), generator=g, dtype=torch.uint8)
    s1 = torch.randint(121, 126, (n_experts, inter, dim // 32), generator=g, dtype=torch.uint8)
    s3 = torch.randint(121, 126, (n_experts, inter, dim // 32), generator=g, dtype=torch.uint8)
    s2 = torch.randint(121, 126, (n_experts, dim, inter // 32), generator=g, dtype=torch.uint8)
    x = torch.randn(tokens, dim, generator=g, dtype=torch.float32)
    logits = 2 * torch.randn(tokens, n_experts, generator=g, dtype=torch.float32)
    bias = 0.5 * torch.randn(n_experts, generator=g, dtype=torch.float32)
    tid2eid = torch.stack([torch.randperm(n_experts, generator=g)[:top_k] for _ in range(vocab)]).long()
    token_ids = torch.tensor([3, 9, 0, 3], dtype=torch.int32)

    dq = lambda w, s: mxfp4_dequant(w, s).double()  # noqa: E731
    W1 = [dq(w1[e], s1[e]) for e in range(n_experts)]
    W3 = [dq(w3[e], s3[e]) for e in range(n_experts)]
    W2 = [dq(w2[e], s2[e]) for e in range(n_experts)]
    # The clamp must bite: the limit at the 70th percentile of |w1 x| and |w3 x|.
    gu = torch.cat([(x.double() @ W1[e].T).abs().flatten() for e in range(n_experts)] +
                   [(x.double() @ W3[e].T).abs().flatten() for e in range(n_experts)])
    limit = float(torch.quantile(gu, 0.7).float())

    scores = torch.nn.functional.softplus(logits.double()).sqrt()
    by_score = (scores + bias.double()).topk(top_k, dim=-1)[1]
    plain = scores.topk(top_k, dim=-1)[1]
    assert not torch.equal(by_score, plain), "the bias should change a selection"

    def experts(idx):
        weights = scores.gather(1, idx)
        weights = weights / weights.sum(dim=-1, keepdim=True) * route_scale
        y = torch.zeros(tokens, dim, dtype=torch.float64)
        for t in range(tokens):
            for j in range(top_k):
                e = int(idx[t, j])
                gate = (x[t].double() @ W1[e].T).clamp(max=limit)
                up = (x[t].double() @ W3[e].T).clamp(-limit, limit)
                y[t] += (weights[t, j] * (torch.nn.functional.silu(gate) * up)) @ W2[e].T
        return weights.float(), y.float()

    for name, t in [("moe_w1", w1), ("moe_w3", w3), ("moe_w2", w2), ("moe_s1", s1), ("moe_s3", s3), ("moe_s2", s2),
                    ("moe_x", x), ("moe_logits", logits), ("moe_bias", bias), ("moe_tid2eid", tid2eid),
                    ("moe_token_ids", token_ids), ("moe_limit", torch.tensor([limit], dtype=torch.float32))]:
        add(name, t)
    for name, idx in [("score", by_score), ("hash", tid2eid[token_ids.long()])]:
        weights, y = experts(idx)
        add(f"moe_{name}_ids", idx.int())
        add(f"moe_{name}_weights", weights)
        add(f"moe_{name}_y", y)


def main():
    g = torch.Generator().manual_seed(SEED)
    records = []

    def add(name, t):
        records.append((name, t.contiguous()))

    all_bytes = torch.arange(256, dtype=torch.uint8)
    add("e4m3_table", all_bytes.view(torch.float8_e4m3fn).float())
    add("e8m0_table", all_bytes.view(torch.float8_e8m0fnu).float())
    add("e2m1_table", torch.tensor([e2m1_from_bits(c) for c in range(16)], dtype=torch.float32))

    # FP8 block-scaled [200, 192]: rows 128..199 and cols 128..191 are the ragged blocks.
    out, inp = 200, 192
    w = torch.randint(0, 256, (out, inp), generator=g, dtype=torch.uint8)
    w[(w & 0x7F) == 0x7F] = 0x3C  # no NaN but where placed below
    edges = [0x00, 0x80, 0x01, 0x02, 0x07, 0x81, 0x87, 0x08, 0x7E, 0xFE, 0x77, 0xF7]
    w[0, : len(edges)] = torch.tensor(edges, dtype=torch.uint8)
    w[199, 180 : 180 + len(edges)] = torch.tensor(edges, dtype=torch.uint8)
    w[5, 100] = 0x7F  # row 5 reads NaN
    w[150, 130] = 0xFF  # row 150 reads NaN
    add("fp8_weight", w)
    e8 = torch.tensor([[118, 121], [125, 0]], dtype=torch.uint8)  # 0: 2^-127
    add("fp8_scale_e8m0", e8)
    f32 = torch.tensor([[0.0123, 3.5e-3], [7.25e-4, 1.7]], dtype=torch.float32)
    add("fp8_scale_f32", f32)
    x = torch.randn(TOKENS, inp, generator=g, dtype=torch.float32)
    add("fp8_x", x)
    w_e8 = fp8_dequant(w, e8.view(torch.float8_e8m0fnu).float())
    w_f32 = fp8_dequant(w, f32)
    add("fp8_y_e8m0", (x.double() @ w_e8.double().T).float())
    add("fp8_y_f32", (x.double() @ w_f32.double().T).float())
    # Checksums of the dequantized weights: sum_c W[r][c] * (c + 1), so an element
    # in the wrong place shows.
    pos = torch.arange(1, inp + 1, dtype=torch.float64)
    add("fp8_rowsum_e8m0", w_e8.double() @ pos)
    add("fp8_rowsum_f32", w_f32.double() @ pos)

    # MXFP4 [64, 256].
    out, inp = 64, 256
    w = torch.randint(0, 256, (out, inp // 2), generator=g, dtype=torch.uint8)
    w[0, :8] = torch.tensor([0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE], dtype=torch.uint8)  # every code
    add("mxfp4_weight", w)
    s = torch.randint(118, 131, (out, inp // 32), generator=g, dtype=torch.uint8)
    s[1, 3] = 0  # 2^-127
    s[3, 2] = 255  # row 3 reads NaN
    add("mxfp4_scale", s)
    x = torch.randn(TOKENS, inp, generator=g, dtype=torch.float32)
    add("mxfp4_x", x)
    wd = mxfp4_dequant(w, s)
    add("mxfp4_y", (x.double() @ wd.double().T).float())
    add("mxfp4_rowsum", wd.double() @ torch.arange(1, inp + 1, dtype=torch.float64))

    moe_case(g, add)

    write_records(OUT, records)


def write_records(path, records):
    """records: [(name, tensor)] in the format above."""
    names = {torch.uint8: "u8", torch.int32: "i32", torch.int64: "i64", torch.float32: "f32", torch.float64: "f64"}
    with open(path, "wb") as f:
        for name, t in records:
            f.write(f"{name} {names[t.dtype]} {' '.join(str(d) for d in t.shape)}\n".encode())
            f.write(t.contiguous().numpy().tobytes())
    print(f"wrote {path}: {len(records)} arrays")


if __name__ == "__main__":
    main()
