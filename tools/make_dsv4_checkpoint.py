#!/usr/bin/env python3
"""Writes a random DeepSeek-V4 checkpoint with the real structure and storage.

    tools/make_dsv4_checkpoint.py [--preset tiny|tiny-chat|real-layer] [--out DIR] [--seed 0] [--shards 3]

tiny (the committed fixture tests/golden/dsv4-tiny): 5 layers covering
window-only attention (0, 1), ratio-4 compressed sparse attention with the
indexer (2, 4) and ratio-128 heavily compressed attention (3); hash routing on
layers 0-2 (layer 2 is both hash-routed and CSA, as in V4-Flash); 4 routed
experts (2 active) and the shared expert; 3 DSpark stages mtp.0-2 with
main_proj, main_norm and the last stage's norm, hc_head, Markov and confidence
heads. Dimensions are small; the names, dtypes and layouts are V4-Flash's:
- linear weights F8_E4M3 [out, in] (torch.float8_e4m3fn) with 128x128 block
  scales `.scale` in F8_E8M0 (torch.float8_e8m0fnu): W = w * 2^(s - 127);
- routed experts MXFP4: I8 [out, in/2], element 2i in the low nibble and 2i+1
  in the high nibble (E2M1 codes), with F8_E8M0 scales [out, in/32];
- hash layers' ffn.gate.tid2eid I64 [vocab, top-k] (distinct experts per row),
  score-routed layers' ffn.gate.bias F32; hyper-connection mixers F32.
Shards: globals, then the layers, then the DSpark stages, split over --shards
files named model-0000i-of-0000n.safetensors with model.safetensors.index.json.

tiny-chat (the committed fixture tests/golden/dsv4-tiny-chat, for serving):
tiny's structure with a 512-token vocabulary and a tokenizer: tokenizer.json,
a byte-level BPE trained by the `tokenizers` library on a small built-in text
with DeepSeek-V3's pre-tokenizer (three isolated Split regexes, then ByteLevel
without its own regex) and DeepSeek-V4's special tokens; tokenizer_config.json
(BOS, EOS, no chat template: V4 ships none) and generation_config.json.

real-layer: one layer (CSA, the stage with every tensor kind) at V4-Flash's
real dimensions (hidden 4096, 256 experts of 2048, vocab 129280), about 5 GB,
for measuring the load's time and memory (docs/PERFORMANCE.md). Its weights are
random bytes (no quantization pass) so it is written quickly.

The config is checked against transformers' DeepseekV4Config when transformers
is installed. Deterministic for a given seed. Needs torch and safetensors
(and tokenizers for tiny-chat).
"""
import argparse
import json
import math
import pathlib

import torch
from safetensors.torch import save_file

ROOT = pathlib.Path(__file__).resolve().parents[1]


def config_for(preset):
    if preset in ("tiny", "tiny-chat"):
        dims = dict(hidden_size=64, num_hidden_layers=5, num_attention_heads=2, head_dim=32, qk_rope_head_dim=16,
                    q_lora_rank=32, o_lora_rank=32, o_groups=2, vocab_size=128, n_routed_experts=4,
                    num_experts_per_tok=2, moe_intermediate_size=32, num_hash_layers=3, hc_mult=2,
                    index_n_heads=2, index_head_dim=16, index_topk=4, sliding_window=16,
                    compress_ratios=[0, 0, 4, 128, 4, 0, 0, 0],
                    dspark_block_size=5, dspark_markov_rank=16, dspark_noise_token_id=127,
                    dspark_target_layer_ids=[2, 3, 4], num_nextn_predict_layers=1)
        if preset == "tiny-chat":
            dims.update(vocab_size=CHAT_VOCAB, dspark_noise_token_id=CHAT_VOCAB - 1)
    else:
        dims = dict(hidden_size=4096, num_hidden_layers=1, num_attention_heads=64, head_dim=512, qk_rope_head_dim=64,
                    q_lora_rank=1024, o_lora_rank=1024, o_groups=8, vocab_size=129280, n_routed_experts=256,
                    num_experts_per_tok=6, moe_intermediate_size=2048, num_hash_layers=0, hc_mult=4,
                    index_n_heads=64, index_head_dim=128, index_topk=512, sliding_window=128,
                    compress_ratios=[4], num_nextn_predict_layers=0)
    return dict(
        architectures=["DeepseekV4ForCausalLM"], model_type="deepseek_v4", **dims,
        num_key_value_heads=1, n_shared_experts=1, scoring_func="sqrtsoftplus", topk_method="noaux_tc",
        norm_topk_prob=True, routed_scaling_factor=1.5, swiglu_limit=10.0, hc_sinkhorn_iters=20, hc_eps=1e-6,
        rms_norm_eps=1e-6, rope_theta=10000, compress_rope_theta=160000,
        rope_scaling=dict(type="yarn", factor=16, original_max_position_embeddings=65536, beta_fast=32, beta_slow=1),
        max_position_embeddings=1048576, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False,
        expert_dtype="fp4", torch_dtype="bfloat16",
        quantization_config=dict(quant_method="fp8", fmt="e4m3", activation_scheme="dynamic", scale_fmt="ue8m0",
                                 weight_block_size=[128, 128]))


# ---- tiny-chat's tokenizer ----------------------------------------------------

CHAT_VOCAB = 512

# DeepSeek-V3's pre-tokenizer regexes (also V3.2's and V4's), spelled as its
# tokenizer.json spells them: CR and LF as the characters themselves.
DEEPSEEK3_SPLITS = [
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^""" + "\r\n" + r"""\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+["""
    + "\r\n" + r"""]*|\s*[""" + "\r\n" + r"""]+|\s+(?!\S)|\s+""",
]

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
# Control tokens: BOS and EOS first (ids 0 and 1, as config.json says), then
# what DeepSeek-V4's prompt encoding writes (turns, the reminder, task markers,
# fill-in-the-middle, image placeholder).
SPECIAL_TOKENS = [BOS, EOS, "<｜▁pad▁｜>", "<｜User｜>", "<｜Assistant｜>", "<｜latest_reminder｜>",
                  "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>", "<｜deepseek_image｜>",
                  "<｜action｜>", "<｜query｜>", "<｜authority｜>", "<｜domain｜>", "<｜title｜>", "<｜read_url｜>"]
# Added but not special: the model writes them and they stay in the text.
PLAIN_ADDED = ["<think>", "</think>"]

# What the merges are learnt from: English, code, numbers, CJK, kana, and the
# text of V4's tool and DSML layout, so chat prompts come out in few tokens.
CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun.",
    "You are a helpful assistant. Answer the question of the user in a short sentence.",
    "What is the weather like in Paris today? It is sunny and warm, about 21 degrees.",
    "def main():\n    print(\"hello, world\")\n    return 0\n",
    "for (int i = 0; i < n; ++i) { total += values[i]; }",
    "## Tools\n\nYou have access to a set of tools to help answer the user's question.",
    '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>',
    "<tool_result>{\"temperature\": 21, \"unit\": \"celsius\"}</tool_result>",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 123 2024 3.14159 1,000,000",
    "今天天气很好。我们去公园散步吧。中文分词测试。",
    "こんにちは。カタカナとひらがなのテストです。ありがとうございます。",
    "Café, naïve, résumé, Zürich, São Paulo, Ångström, façade.",
    "Emoji: 😀 🚀 ✨ and symbols: © ® ™ € £ ¥ § ¶ • … → ←",
]


def write_tokenizer(out):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(p), behavior="isolated") for p in DEEPSEEK3_SPLITS]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=CHAT_VOCAB - len(PLAIN_ADDED), min_frequency=1, show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in PLAIN_ADDED])
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                                       special_tokens=[(BOS, 0)])
    assert tok.get_vocab_size() == CHAT_VOCAB, tok.get_vocab_size()
    assert tok.token_to_id(BOS) == 0 and tok.token_to_id(EOS) == 1
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(dict(
        add_bos_token=True, add_eos_token=False, bos_token=BOS, eos_token=EOS, pad_token="<｜▁pad▁｜>",
        model_max_length=1048576, tokenizer_class="PreTrainedTokenizerFast", clean_up_tokenization_spaces=False,
        legacy=True), indent=1, ensure_ascii=False) + "\n")
    (out / "generation_config.json").write_text(json.dumps(dict(
        bos_token_id=0, eos_token_id=1, do_sample=True, temperature=1.0, top_p=1.0), indent=1) + "\n")


class Writer:
    """Random tensors in the stored formats; `fast` fills quantized ones with raw random bytes."""

    def __init__(self, cfg, seed, fast):
        self.c = cfg
        self.g = torch.Generator().manual_seed(seed)
        self.fast = fast
        self.t = {}

    def randn(self, shape, std):
        return torch.randn(shape, generator=self.g) * std

    def bytes_(self, shape):
        return torch.randint(0, 256, shape, generator=self.g, dtype=torch.uint8)

    def bf16(self, name, shape, std=0.02):
        self.t[name] = self.randn(shape, std).to(torch.bfloat16)

    def norm(self, name, n):
        self.t[name + ".weight"] = (1 + self.randn((n,), 0.05)).to(torch.bfloat16)

    def f32(self, name, shape, std=0.02):
        self.t[name] = self.randn(shape, std).float()

    def e8m0(self, exponents):  # exponents: int tensor of 2^e
        return torch.pow(2.0, exponents.float()).to(torch.float8_e8m0fnu)

    def linear(self, name, out, inp):
        bo, bi = self.c["quantization_config"]["weight_block_size"]
        so, si = math.ceil(out / bo), math.ceil(inp / bi)
        if self.fast:
            self.t[name + ".weight"] = self.bytes_((out, inp)).view(torch.float8_e4m3fn)
            self.t[name + ".scale"] = self.bytes_((so, si)).view(torch.float8_e8m0fnu)
            return
        w = self.randn((out, inp), 0.02)
        # Per 128x128 block: a power-of-two scale so the block's amax maps to at most 448.
        pad = torch.zeros(so * bo, si * bi)
        pad[:out, :inp] = w
        amax = pad.view(so, bo, si, bi).abs().amax(dim=(1, 3)).clamp(min=1e-4)
        exp = torch.ceil(torch.log2(amax / 448.0))
        scale = torch.pow(2.0, exp)
        full = scale.repeat_interleave(bo, 0).repeat_interleave(bi, 1)[:out, :inp]
        self.t[name + ".weight"] = (w / full).to(torch.float8_e4m3fn)
        self.t[name + ".scale"] = self.e8m0(exp)

    def mxfp4(self, name, out, inp):
        if self.fast:
            self.t[name + ".weight"] = self.bytes_((out, inp // 2)).view(torch.int8)
            self.t[name + ".scale"] = self.bytes_((out, inp // 32)).view(torch.float8_e8m0fnu)
            return
        codes = torch.randint(0, 16, (out, inp), generator=self.g, dtype=torch.uint8)
        packed = codes[:, 0::2] | (codes[:, 1::2] << 4)  # element 2i low nibble, 2i+1 high
        self.t[name + ".weight"] = packed.view(torch.int8)
        self.t[name + ".scale"] = self.e8m0(torch.randint(-9, -5, (out, inp // 32), generator=self.g))

    def hyper_connection(self, prefix, mixes, scales):
        hc, d = self.c["hc_mult"], self.c["hidden_size"]
        self.f32(prefix + "_fn", (mixes, hc * d), 0.01)
        self.f32(prefix + "_base", (mixes,), 0.1)
        self.f32(prefix + "_scale", (scales,), 0.1)

    def compressor(self, p, ratio, dim):
        coff = 2 if ratio == 4 else 1
        d = self.c["hidden_size"]
        self.bf16(p + "wkv.weight", (coff * dim, d))
        self.bf16(p + "wgate.weight", (coff * dim, d))
        self.f32(p + "ape", (ratio, coff * dim), 0.1)
        self.norm(p + "norm", dim)

    def block(self, p, ratio, hash_routed):
        c = self.c
        d, hc, heads, hd = c["hidden_size"], c["hc_mult"], c["num_attention_heads"], c["head_dim"]
        ql, ol, og, e = c["q_lora_rank"], c["o_lora_rank"], c["o_groups"], c["n_routed_experts"]
        inter = c["moe_intermediate_size"] * c["n_shared_experts"]
        self.norm(p + "attn_norm", d)
        self.norm(p + "ffn_norm", d)
        self.hyper_connection(p + "hc_attn", (2 + hc) * hc, 3)
        self.hyper_connection(p + "hc_ffn", (2 + hc) * hc, 3)
        self.f32(p + "attn.attn_sink", (heads,), 0.5)
        self.norm(p + "attn.q_norm", ql)
        self.norm(p + "attn.kv_norm", hd)
        self.linear(p + "attn.wq_a", ql, d)
        self.linear(p + "attn.wq_b", heads * hd, ql)
        self.linear(p + "attn.wkv", hd, d)
        self.linear(p + "attn.wo_a", og * ol, heads * hd // og)
        self.linear(p + "attn.wo_b", d, og * ol)
        if ratio:
            self.compressor(p + "attn.compressor.", ratio, hd)
            if ratio == 4:
                self.linear(p + "attn.indexer.wq_b", c["index_n_heads"] * c["index_head_dim"], ql)
                self.bf16(p + "attn.indexer.weights_proj.weight", (c["index_n_heads"], d))
                self.compressor(p + "attn.indexer.compressor.", ratio, c["index_head_dim"])
        self.bf16(p + "ffn.gate.weight", (e, d))
        if hash_routed:
            k = c["num_experts_per_tok"]
            rows = [torch.randperm(e, generator=self.g)[:k] for _ in range(c["vocab_size"])]
            self.t[p + "ffn.gate.tid2eid"] = torch.stack(rows).to(torch.int64)
        else:
            self.f32(p + "ffn.gate.bias", (e,), 0.01)
        for w in ("w1", "w3"):
            self.linear(p + "ffn.shared_experts." + w, inter, d)
        self.linear(p + "ffn.shared_experts.w2", d, inter)
        mi = c["moe_intermediate_size"]
        for x in range(e):
            q = f"{p}ffn.experts.{x}."
            self.mxfp4(q + "w1", mi, d)
            self.mxfp4(q + "w3", mi, d)
            self.mxfp4(q + "w2", d, mi)

    def hc_head(self, prefix):
        self.hyper_connection(prefix + "hc_head", self.c["hc_mult"], 1)


def build(cfg, seed, fast):
    """Returns [(group name, {tensor: value})] in shard order: globals, layers, DSpark stages."""
    c = cfg
    w = Writer(cfg, seed, fast)
    v, d = c["vocab_size"], c["hidden_size"]
    w.bf16("embed.weight", (v, d))
    w.bf16("head.weight", (v, d))
    w.norm("norm", d)
    w.hc_head("")
    for layer in range(c["num_hidden_layers"]):
        w.block(f"layers.{layer}.", c["compress_ratios"][layer], layer < c["num_hash_layers"])
    groups = [dict(w.t)]
    w.t = {}
    stages = len(c["compress_ratios"]) - c["num_hidden_layers"]
    for s in range(stages):
        p = f"mtp.{s}."
        w.block(p, c["compress_ratios"][c["num_hidden_layers"] + s], False)
        if s == 0:
            w.linear(p + "main_proj", d, len(c["dspark_target_layer_ids"]) * d)
            w.norm(p + "main_norm", d)
        if s == stages - 1:
            r = c["dspark_markov_rank"]
            w.norm(p + "norm", d)
            w.hc_head(p)
            w.bf16(p + "markov_head.markov_w1.weight", (v, r))
            w.bf16(p + "markov_head.markov_w2.weight", (v, r))
            w.bf16(p + "confidence_head.proj.weight", (1, d + r))
    if w.t:
        groups.append(w.t)
    return groups


def split(groups, n):
    """The tensors in order, cut into n shards of about equal bytes (the draft stages start a shard)."""
    names = [(k, t) for g in groups for k, t in g.items()]
    total = sum(t.numel() * t.element_size() for _, t in names)
    shards, cur, size = [], {}, 0
    first_draft = next(iter(groups[1])) if len(groups) > 1 else None
    for k, t in names:
        if cur and len(shards) < n - 1 and (size >= total * (len(shards) + 1) / n or k == first_draft):
            shards.append(cur)
            cur = {}
        cur[k] = t
        size += t.numel() * t.element_size()
    shards.append(cur)
    return shards


def check_with_transformers(cfg):
    try:
        from transformers import DeepseekV4Config
    except ImportError:
        print("transformers has no DeepseekV4Config: config not cross-checked")
        return
    t = DeepseekV4Config(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
    for key in ("hidden_size", "num_hidden_layers", "n_routed_experts", "q_lora_rank", "o_groups", "hc_mult"):
        assert getattr(t, key) == cfg[key], key
    print("transformers DeepseekV4Config:", t.num_hidden_layers, "layers,", getattr(t, "layer_types", None))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=["tiny", "tiny-chat", "real-layer"], default="tiny")
    ap.add_argument("--out", help="default: tests/golden/dsv4-tiny, or dsv4-tiny-chat for tiny-chat")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shards", type=int, default=3)
    a = ap.parse_args()
    cfg = config_for(a.preset)
    check_with_transformers(cfg)
    out = pathlib.Path(a.out or ROOT / ("tests/golden/dsv4-tiny-chat" if a.preset == "tiny-chat" else "tests/golden/dsv4-tiny"))
    out.mkdir(parents=True, exist_ok=True)
    if a.preset == "tiny-chat":
        write_tokenizer(out)
    (out / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    shards = split(build(cfg, a.seed, fast=a.preset == "real-layer"), a.shards)
    weight_map, total = {}, 0
    for i, tensors in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({k: t.contiguous() for k, t in tensors.items()}, str(out / name))
        for k, t in tensors.items():
            weight_map[k] = name
            total += t.numel() * t.element_size()
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=1) + "\n")
    print(f"{out}: {len(weight_map)} tensors, {total} bytes in {len(shards)} shards")


if __name__ == "__main__":
    main()
