#!/usr/bin/env python3
"""Writes tests/golden/hf-spm-tiny, a Hugging Face Llama checkpoint directory
whose tokenizer.json is SentencePiece-style BPE with byte fallback (as Llama 2,
Mistral and TinyLlama ship it), and tests/golden/hf_spm_tiny.json, its goldens.

  python3 tools/make_hf_spm_fixture.py [--out-dir tests/golden]

1. The SentencePiece BPE model of tools/make_spm_fixture.py (the same corpus and
   settings: byte fallback, digits split, a dummy prefix space, no
   normalization) is converted to tokenizer.json by transformers, as a Llama
   tokenizer; its control symbols <|im_start|> and <|im_end|> are special.
2. A tiny LlamaForCausalLM (random, seed 0, BF16) with that vocabulary.
3. Goldens: the `tokenizers` library's ids for tricky texts (each also checked
   against the `sentencepiece` library's, control tokens split off first), and
   transformers' logits at probe ids and greedy tokens in float32 for two
   prompts (tools/make_hf_golden.py's golden_cases).

Needs sentencepiece, protobuf, torch, transformers, tokenizers (pip); the tests do not.
"""
import argparse
import json
import pathlib
import shutil
import tempfile

from make_hf_golden import golden_cases
from make_spm_fixture import CONTROL, SPM_TEXTS, corpus, sentencepiece_ids, train
from make_tokenizer_golden import TEXTS

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROMPTS = ["The quick brown fox jumps over the lazy dog. 12345",
           "<|im_start|>user\n  What is inferd?<|im_end|>\n<|im_start|>assistant\n"]
SHAPE = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=True)


def llama_tokenizer_json(sp, model_file):
    """tokenizer.json as transformers' LlamaConverter writes it for a legacy
    Llama tokenizer (Llama 2's): BPE over the model's pieces with merges in
    score order and byte fallback, the Prepend + Replace normalizer, the
    ByteFallback decoder; with the BOS post-processor LlamaTokenizerFast adds
    and the control symbols special. (The converter class itself fails on BPE
    models in transformers 5.25; its extractor and settings are used here.)"""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, processors
    from tokenizers.models import BPE
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    kw = SentencePieceExtractor(model_file).extract(BPE)
    tok = Tokenizer(BPE(kw["vocab"], kw["merges"], unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ["<unk>", "<s>", "</s>"] + CONTROL])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", sp.bos_id())])
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=str(ROOT / "tests/golden"))
    args = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = pathlib.Path(args.out_dir) / "hf-spm-tiny"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as wd:
        sp = train(corpus(str(ROOT)), wd)
        lib = llama_tokenizer_json(sp, str(pathlib.Path(wd) / "spm.model"))
    lib.save(str(out / "tokenizer.json"), pretty=False)
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": True, "add_eos_token": False, "legacy": True, "clean_up_tokenization_spaces": False,
        "extra_special_tokens": CONTROL}, indent=1) + "\n")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=sp.GetPieceSize(), bos_token_id=sp.bos_id(), eos_token_id=sp.eos_id(), **SHAPE)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)

    tokenize = []
    for text in TEXTS + SPM_TEXTS:
        ids = lib.encode(text, add_special_tokens=True).ids
        ref = sentencepiece_ids(sp, text, True)
        if ids[1:] != ref:
            print(f"tokenizers and sentencepiece differ on {text!r}:\n  {ids[1:]}\n  {ref}")
        tokenize.append({"text": text, "ids": ids})
    hf_tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    probes, cases = golden_cases(model, hf_tok, PROMPTS)
    golden = {"about": "tools/make_hf_spm_fixture.py: tokenizers and transformers (float32) on tests/golden/hf-spm-tiny",
              "vocab": config.vocab_size, "probes": probes, "cases": cases, "tokenize": tokenize}
    path = pathlib.Path(args.out_dir) / "hf_spm_tiny.json"
    path.write_text(json.dumps(golden, indent=None, ensure_ascii=True) + "\n")
    print(f"{out}: vocab {config.vocab_size}; {path}: {len(tokenize)} texts, {len(cases)} prompts")


if __name__ == "__main__":
    main()
