#!/usr/bin/env python3
"""Makes the Qwen2 and Qwen3 GGUF fixtures and their goldens from transformers.

    tools/make_qwen_golden.py [--gguf DONOR.gguf] [--out-dir tests/golden]

For each architecture, a tiny Qwen2ForCausalLM / Qwen3ForCausalLM with seeded
random weights (tools/make_hf_checkpoint.py's draw, the Qwen2 biases included),
its 2-D weights rounded to F16 so that the GGUF and transformers hold the same
values, is written as OUT_DIR/ARCH-tiny.gguf (named as llama.cpp names them:
F16 matrices, F32 norms and biases, tied embeddings, no Q/K permutation), and
transformers' float32 answers for make_hf_golden.py's prompts, tokenized by the
donor's tokenizer (default: the tests' model, see make_hf_checkpoint.py), go to
OUT_DIR/ARCH_tiny.json in hf_tiny.json's layout, plus each case's greedy
tokens decoded (greedy_text).

  qwen2: 16 wide, 2 layers, 2 heads of 8 (each its own kv head), q/k/v biases;
         with the donor's tokenizer and chat template, so it can be served
  qwen3: 16 wide, 2 layers, 4 heads of 8 (head_dim 8, not 16 / 4) over 2 kv heads,
         per-head q/k RMSNorm, attention.sliding_window 256 (the whole context);
         no tokenizer (1.8 MB less), for the model alone

tests/unit/test_qwen.cpp compares inferd's CPU backend against these;
tools/make_gemma_golden.py makes its fixtures with this file's model, writer and golden.
Needs torch, transformers, numpy and gguf (pip); the tests do not.
"""
import argparse
import json
import pathlib
import sys

import numpy as np

import gguf
from make_hf_checkpoint import default_gguf, randomize
from make_hf_golden import PROMPTS, golden_cases
from truncate_gguf import copy_field, finish

ROOT = pathlib.Path(__file__).resolve().parents[1]
COMMON = dict(hidden_size=16, intermediate_size=64, num_hidden_layers=2, max_position_embeddings=256,
              rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
ARCHS = {
    "qwen2": dict(num_attention_heads=2, num_key_value_heads=2),
    "qwen3": dict(num_attention_heads=4, num_key_value_heads=2, head_dim=8),
}
WITH_TOKENIZER = {"qwen2": True, "qwen3": False}
# transformers' parameter names -> llama.cpp's GGUF tensor names.
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf: str, layer_names=LAYER_NAMES) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    _, _, n, rest = hf.split(".", 3)  # model.layers.N.rest
    return f"blk.{n}.{layer_names[rest]}"


def seeded_model(model_class, cfg, seed: int):
    """model_class(cfg) in float32 with make_hf_checkpoint.py's seeded draw, its
    2-D weights rounded to F16 (the values the GGUF holds), embeddings tied."""
    import torch

    torch.manual_seed(seed)
    model = model_class(cfg).float().eval()
    randomize(model, seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(p.half().float())
    model.tie_weights()
    return model


def write_gguf(path: pathlib.Path, arch: str, cfg, model, fields=(), layer_names=LAYER_NAMES, norm_shift=0.0,
               keys=lambda w: None) -> None:
    """The model as llama.cpp's converter writes it: F16 matrices, F32 vectors
    (norm weights plus norm_shift), the tied output weight listed once, the
    reader `fields` given and the architecture's own `keys(writer)`."""
    w = gguf.GGUFWriter(str(path), arch=arch)
    for name, field in fields:
        copy_field(w, name, field)
    w.add_name(f"{arch}-tiny")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    rope = getattr(cfg, "rope_parameters", None) or {"rope_theta": cfg.rope_theta}
    w.add_rope_freq_base(rope.get("full_attention", rope)["rope_theta"])  # Gemma 3: its global layers'
    keys(w)
    for name, p in model.named_parameters():
        x = p.detach().numpy()
        if x.ndim == 1 and name.endswith("norm.weight"):
            x = x + np.float32(norm_shift)
        w.add_tensor(gguf_name(name, layer_names), x.astype(np.float16) if x.ndim == 2 else x.astype(np.float32))
    finish(w)


def write_golden(path: pathlib.Path, model, tok, golden_path: pathlib.Path, decode=None) -> None:
    """transformers' answers for make_hf_golden.py's prompts, in hf_tiny.json's
    layout, plus each case's greedy tokens decoded when `decode` is given."""
    probes, cases = golden_cases(model, tok, PROMPTS)
    if decode:
        for c in cases:  # what a server's completion of the prompt's ids reads
            c["greedy_text"] = decode(c["greedy"])
    golden = {
        "about": f"tools/{pathlib.Path(sys.argv[0]).name}: transformers {type(model).__name__} in float32 on tests/golden/{path.name}",
        "vocab": model.config.vocab_size,
        "probes": probes,
        "cases": cases,
    }
    golden_path.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"{path}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, {path.stat().st_size} bytes")


def make(arch: str, donor: pathlib.Path, out_dir: pathlib.Path, seed: int) -> None:
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(donor.parent), gguf_file=donor.name)
    config_class = {"qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}[arch]
    model_class = {"qwen2": transformers.Qwen2ForCausalLM, "qwen3": transformers.Qwen3ForCausalLM}[arch]
    cfg = config_class(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                       **COMMON, **ARCHS[arch])
    model = seeded_model(model_class, cfg, seed)

    def keys(w):
        if "head_dim" in ARCHS[arch]:
            w.add_key_length(cfg.head_dim)
            w.add_value_length(cfg.head_dim)
            # As long as the context: no effect, but a key the tests can shorten.
            w.add_sliding_window(cfg.max_position_embeddings)

    path = out_dir / f"{arch}-tiny.gguf"
    reader = gguf.GGUFReader(str(donor))
    fields = [(n, f) for n, f in reader.fields.items() if n.startswith("tokenizer.") and WITH_TOKENIZER[arch]]
    write_gguf(path, arch, cfg, model, fields, keys=keys)
    write_golden(path, model, tok, out_dir / f"{arch}_tiny.json", decode=tok.decode)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default=None, help="GGUF whose tokenizer to take (default: the tests' model)")
    ap.add_argument("--out-dir", default=str(ROOT / "tests/golden"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    donor = pathlib.Path(args.gguf or default_gguf())
    if not donor.is_file():
        sys.exit(f"{donor}: not found (tools/bootstrap.sh fetches the default model)")
    for arch in ARCHS:
        make(arch, donor, pathlib.Path(args.out_dir), args.seed)


if __name__ == "__main__":
    main()
