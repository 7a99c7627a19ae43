#!/usr/bin/env python3
"""Writes tests/golden/dsv4_forward.bin: the prefill of a prompt through the tiny
DeepSeek-V4 checkpoint (tests/golden/dsv4-tiny, tools/make_dsv4_checkpoint.py)
as transformers' DeepseekV4ForCausalLM computes it, in float32.

The checkpoint's weights are dequantized here to float32 (FP8 128x128 blocks and
MXFP4 experts, with the decoders of tools/make_dsv4_quant_golden.py) and loaded
into transformers' model built from the same config.json. transformers' model is
the "ideal" one: no FP8/FP4 activation or KV simulation, no indexer Hadamard, so
the golden checks the architecture's arithmetic, not bit parity with DeepSeek's
own kernels. Where transformers and the architecture spec could differ:
- the shared expert's SwiGLU clamp: transformers (5.25) clamps it like the
  routed experts', as the spec requires (asserted below);
- the routing weight: the spec multiplies it in before w2, transformers after;
  w2 is linear, so in float32 the two agree to rounding;
- the sliding window: a query at i reads i - window + 1 .. i (window tokens,
  itself included), the spec's max(0, i - 127) .. i for a window of 128;
- ties in the indexer's top-k: its scores are sums of ReLUs, so several
  entries often score exactly 0, and torch.topk breaks such ties in no defined
  order. The reference is patched to prefer the lower entry index, the order
  the engine uses (see prefer_lower_index_on_ties; no nonzero score changes).
A prompt of PROMPT_LEN tokens exercises every path of the checkpoint: the
window of 16, ratio-4 compressed entries with the indexer's top 4 of up to 40,
and one ratio-128 entry (positions 127 on).

Records (format of make_dsv4_quant_golden.py): tokens i32 [S]; logits f32 [S,
vocab]; hidden_L f32 [S, hc_mult, hidden] the hyper-connection streams after
layer L; topk_L i32 [S, index_topk] the indexer's picks of CSA layer L (-1:
none).

Usage: tools/make_dsv4_forward_golden.py [out path]. Needs torch, safetensors
and transformers >= 5.8 (run with 5.25.0).
"""
import json
import pathlib
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_dsv4_quant_golden import fp8_dequant, mxfp4_dequant, write_records  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
CKPT = ROOT / "tests/golden/dsv4-tiny"
OUT = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "tests/golden/dsv4_forward.bin")
PROMPT_LEN = 160
SEED = 28


def load_dequantized():
    """Every tensor of the checkpoint, scaled weights dequantized to float32 (scales dropped)."""
    raw = {}
    for f in sorted(CKPT.glob("*.safetensors")):
        raw.update(load_file(str(f)))
    out = {}
    for name, t in raw.items():
        if name.endswith(".scale"):
            continue
        scale = raw.get(name[: -len(".weight")] + ".scale") if name.endswith(".weight") else None
        if scale is None:
            out[name] = t if t.dtype == torch.int64 else t.float()
        elif t.dtype == torch.int8:  # MXFP4 experts
            out[name] = mxfp4_dequant(t.view(torch.uint8), scale.view(torch.uint8))
        else:
            out[name] = fp8_dequant(t.view(torch.uint8), scale.float())
    return out


def hf_state_dict(w, cfg):
    """The checkpoint's names mapped onto transformers' module tree (target layers only)."""
    sd = {
        "model.embed_tokens.weight": w["embed.weight"],
        "lm_head.weight": w["head.weight"],
        "model.norm.weight": w["norm.weight"],
        "model.hc_head.hc_fn": w["hc_head_fn"],
        "model.hc_head.hc_base": w["hc_head_base"],
        "model.hc_head.hc_scale": w["hc_head_scale"],
    }
    names = {
        "attn_norm.weight": "input_layernorm.weight",
        "ffn_norm.weight": "post_attention_layernorm.weight",
        "hc_attn_fn": "attn_hc.fn", "hc_attn_base": "attn_hc.base", "hc_attn_scale": "attn_hc.scale",
        "hc_ffn_fn": "ffn_hc.fn", "hc_ffn_base": "ffn_hc.base", "hc_ffn_scale": "ffn_hc.scale",
        "attn.attn_sink": "self_attn.sinks",
        "attn.q_norm.weight": "self_attn.q_a_norm.weight",
        "attn.kv_norm.weight": "self_attn.kv_norm.weight",
        "attn.wq_a.weight": "self_attn.q_a_proj.weight",
        "attn.wq_b.weight": "self_attn.q_b_proj.weight",
        "attn.wkv.weight": "self_attn.kv_proj.weight",
        "attn.wo_a.weight": "self_attn.o_a_proj.weight",
        "attn.wo_b.weight": "self_attn.o_b_proj.weight",
        "ffn.gate.weight": "mlp.gate.weight",
        "ffn.gate.bias": "mlp.gate.e_score_correction_bias",
        "ffn.gate.tid2eid": "mlp.gate.tid2eid",
        "ffn.shared_experts.w1.weight": "mlp.shared_experts.gate_proj.weight",
        "ffn.shared_experts.w3.weight": "mlp.shared_experts.up_proj.weight",
        "ffn.shared_experts.w2.weight": "mlp.shared_experts.down_proj.weight",
    }
    compressor = {"wkv.weight": "kv_proj.weight", "wgate.weight": "gate_proj.weight", "ape": "position_bias",
                  "norm.weight": "kv_norm.weight"}
    for c, h in compressor.items():
        names["attn.compressor." + c] = "self_attn.compressor." + h
        names["attn.indexer.compressor." + c] = "self_attn.compressor.indexer." + h
    names["attn.indexer.wq_b.weight"] = "self_attn.compressor.indexer.q_b_proj.weight"
    names["attn.indexer.weights_proj.weight"] = "self_attn.compressor.indexer.scorer.weights_proj.weight"
    for layer in range(cfg["num_hidden_layers"]):
        p, q = f"layers.{layer}.", f"model.layers.{layer}."
        for c, h in names.items():
            if p + c in w:
                sd[q + h] = w[p + c]
        experts = range(cfg["n_routed_experts"])
        sd[q + "mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([w[f"{p}ffn.experts.{e}.w1.weight"], w[f"{p}ffn.experts.{e}.w3.weight"]]) for e in experts])
        sd[q + "mlp.experts.down_proj"] = torch.stack([w[f"{p}ffn.experts.{e}.w2.weight"] for e in experts])
    return sd


def prefer_lower_index_on_ties(mod):
    """Subtracts index * 1e-30 from the indexer's scores: exact ties (at 0, after
    the ReLU) go to the lower index, and no other score moves (1e-30 * index is
    far below a float32 ulp of any score of this model's size, asserted)."""
    score = mod.DeepseekV4IndexerScorer.forward

    def forward(self, q, compressed_kv, hidden_states):
        s = score(self, q, compressed_kv, hidden_states)
        nudged = s - torch.arange(s.shape[-1], dtype=s.dtype) * 1e-30
        assert torch.equal(nudged[s != 0], s[s != 0])
        return nudged

    mod.DeepseekV4IndexerScorer.forward = forward


def build_model():
    """transformers' model of the checkpoint's config on its dequantized weights, in
    float32, eager attention, the indexer's ties patched; returns (model, config dict)."""
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mod

    cfg = json.loads((CKPT / "config.json").read_text())
    config = DeepseekV4Config(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
    config._attn_implementation = "eager"
    torch.manual_seed(SEED)
    model = DeepseekV4ForCausalLM(config).float().eval()
    sd = hf_state_dict(load_dequantized(), cfg)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    # Only the rotary buffers are not from the checkpoint.
    assert not unexpected and all("inv_freq" in m for m in missing), (missing, unexpected)

    # The spec's points transformers must agree with (see the docstring).
    shared = model.model.layers[0].mlp.shared_experts
    assert shared.limit == cfg["swiglu_limit"] and "clamp" in mod.DeepseekV4MLP.forward.__code__.co_names
    assert config.rope_parameters["main"]["rope_type"] == "default"
    assert config.rope_parameters["compress"]["rope_type"] == "yarn"
    assert config.rope_parameters["compress"].get("attention_factor", 1.0) == 1.0

    prefer_lower_index_on_ties(mod)
    return model, cfg


def main():
    model, cfg = build_model()
    g = torch.Generator().manual_seed(SEED)
    tokens = torch.randint(2, cfg["vocab_size"], (1, PROMPT_LEN), generator=g)

    records = [("tokens", tokens[0].to(torch.int32))]
    kept = {}

    def keep(name, dtype):
        def hook(_module, _inputs, out):
            kept[name] = out[0].to(dtype)
        return hook

    for layer, block in enumerate(model.model.layers):
        block.register_forward_hook(keep(f"hidden_{layer}", torch.float32))
        if block.self_attn.layer_type == "compressed_sparse_attention":
            block.self_attn.compressor.indexer.register_forward_hook(keep(f"topk_{layer}", torch.int32))
    with torch.no_grad():
        logits = model(tokens, use_cache=False).logits
    records.append(("logits", logits[0].float()))
    records += sorted(kept.items())
    write_records(OUT, records)


if __name__ == "__main__":
    main()
