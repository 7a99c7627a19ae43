#!/usr/bin/env python3
"""Makes the tiny Qwen2 and Qwen3 Hugging Face checkpoints and their goldens from transformers.

    tools/make_hf_qwen_golden.py [--golden-dir tests/golden] [--seed 0]

For each architecture (Qwen2ForCausalLM -> hf-qwen2-tiny + hf_qwen2_tiny.json,
Qwen3ForCausalLM -> hf-qwen3-tiny + hf_qwen3_tiny.json):

1. A byte-level BPE tokenizer trained by the `tokenizers` library on the
   corpus below, spelled as Qwen's tokenizer.json spells it: an NFC normalizer,
   Qwen2's split regex (inferd's `qwen2` pre-tokenizer family) as a Split step,
   then ByteLevel without its own regex; Qwen's special tokens after the
   learned vocabulary, <think> and </think> as added non-special tokens (as
   Qwen3's), and a ChatML chat_template in tokenizer_config.json.
2. Random weights at tiny shapes (GQA, 3 layers), drawn as
   tools/make_hf_checkpoint.py draws them, saved by save_pretrained in BF16.
   Both untied (tied, such tiny random models repeat one token). Qwen2: q/k/v
   biases (std 0.1: larger ones add the same vector at every position, and
   greedy decoding repeats one token), the embedding and lm_head padded past
   the tokenizer's vocabulary with zero rows (as Qwen2.5's are padded). Qwen3:
   q/k norms, head_dim 32 set apart from hidden_size / heads.
3. transformers in float32 on the CPU: per prompt the ids, the logits at every
   position for a fixed set of probe ids (plus each position's argmax and
   logsumexp) and 16 greedy tokens (tools/make_hf_golden.py's layout); the
   ChatML rendering of one conversation with its ids and greedy text; and the
   `tokenizers` library's ids for a list of strings.

The output is the same for the same seed. tests/unit/test_hf_qwen.cpp and
tests/integration/test_hf_qwen.py compare inferd against these. Needs torch,
transformers and tokenizers; the tests do not.
"""
import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

# inferd's `qwen2` pre-tokenizer (engine/pretokenizer.cpp), as Qwen's tokenizer.json writes it.
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>"]
CHATML = ("{%- for message in messages %}"
          "{%- if loop.first and message['role'] != 'system' %}"
          "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
          "{%- endif %}"
          "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
          "{%- endfor %}"
          "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
CORPUS = [
    "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun.",
    "What is the capital of France? The capital of France is Paris, a city on the Seine.",
    "In 2024 there were 365 days plus one: 366 in all, and 12 months of 28 to 31 days.",
    "def main():\n    for i in range(10):\n        print(i * 2)\n    return 0\n",
    "I'm sure they're right, you've seen it and we'll see; it's what he'd do.",
    "Hello, world! Hello again, world. Good morning, good evening, good night.",
    "Large language models predict the next token given the tokens that came before.",
    "Café au lait, naïve façade, Zürich and São Paulo; 東京 and 北京 are capitals too.",
    "The assistant answers questions from the user in a helpful and honest way.",
    "  Indented text,\ttabs\tand\r\nWindows line ends\n\n\nand blank lines.",
    "Numbers: 3.14159, 2.71828, 1,000,000 and -42; emails like someone@example.com.",
    "Once upon a time there was a little model that wanted to learn to speak.",
]
TOKENIZER_STRINGS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog. 12345",
    "I'm sure they're RIGHT; you've seen IT and we'll see.",
    "  leading spaces and trailing   ",
    "line one\nline two\r\n\n\tindented",
    "Café, naïve, Zürich: 東京 und São Paulo",
    "emoji 🙂 and symbols ©®™ ± ≤ ≥",
    "3.14159 + 2.71828 = 5.85987",
    "def f(x):\n    return x ** 2  # square",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nLet me think.\n</think>\n\nThe answer is 42.<|endoftext|>",
    "unknown ü bytes \u00a0 nbsp and zero\u200bwidth",
]
PROMPTS = [
    "The quick brown fox jumps over the lazy dog. 12345",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "Café au lait in Zürich, 東京.",
]
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6, hidden_act="silu")
ARCHS = {
    "qwen2": dict(cls="Qwen2ForCausalLM", extra=dict(tie_word_embeddings=False, rope_theta=1000000.0),
                  pad_vocab_to=64),
    "qwen3": dict(cls="Qwen3ForCausalLM", extra=dict(tie_word_embeddings=False, head_dim=32,
                                                     rope_theta=1000000.0), pad_vocab_to=1),
}
N_VOCAB = 400  # learned tokens, specials and added tokens come after


def token_bytes(tok, ids):
    """Each token's bytes: a byte-level piece mapped back through GPT-2's byte
    alphabet, an added token's own text."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    byte_of = {chr(b): b for b in printable}
    n = 0
    for b in range(256):
        if b not in printable:
            byte_of[chr(256 + n)] = b
            n += 1
    added = set(SPECIALS + ADDED)
    out = []
    for i in ids:
        piece = tok.id_to_token(i)
        out.append(list(piece.encode()) if piece in added else [byte_of[c] for c in piece])
    return out


def build_tokenizer():
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers import trainers

    tok = Tokenizer(models.BPE(byte_fallback=False, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=N_VOCAB, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in ADDED])
    return tok


def write_checkpoint(out, arch, seed, tok):
    import torch
    import transformers
    from make_hf_checkpoint import randomize

    spec = ARCHS[arch]
    n_tok = tok.get_vocab_size(with_added_tokens=True)
    vocab = -(-n_tok // spec["pad_vocab_to"]) * spec["pad_vocab_to"]
    eot, im_start, im_end = (tok.token_to_id(s) for s in SPECIALS)
    cls = getattr(transformers, spec["cls"])
    cfg = cls.config_class(vocab_size=vocab, bos_token_id=eot, eos_token_id=im_end, **COMMON, **spec["extra"])
    torch.manual_seed(seed)
    model = cls(cfg).to(torch.float32)
    randomize(model, seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.mul_(0.2)
        model.model.embed_tokens.weight[n_tok:].zero_()
        model.lm_head.weight[n_tok:].zero_()
    model = model.to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    transformers.GenerationConfig(bos_token_id=eot, eos_token_id=[im_end, eot], pad_token_id=eot).save_pretrained(out)
    (out / "tokenizer.json").write_text(tok.to_str(pretty=False))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": None,
        "chat_template": CHATML,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 256,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
    }, indent=2) + "\n")
    return n_tok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--golden-dir", default=str(ROOT / "tests/golden"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from make_hf_golden import N_GREEDY, golden_cases

    torch.use_deterministic_algorithms(True)
    tok = build_tokenizer()
    for arch in ARCHS:
        name = f"hf-{arch}-tiny"
        out = pathlib.Path(args.golden_dir) / name
        n_tok = write_checkpoint(out, arch, args.seed, tok)
        lib = Tokenizer.from_file(str(out / "tokenizer.json"))
        hf_tok = AutoTokenizer.from_pretrained(out)
        model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
        assert type(model).__name__ == ARCHS[arch]["cls"]
        tokenize = [{"text": s, "ids": lib.encode(s, add_special_tokens=True).ids} for s in TOKENIZER_STRINGS]
        for t in tokenize:  # transformers' tokenizer agrees with the library's
            assert hf_tok(t["text"], add_special_tokens=True)["input_ids"] == t["ids"], t
        probes, cases = golden_cases(model, hf_tok, PROMPTS)
        rendered = hf_tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
        chat_ids = lib.encode(rendered, add_special_tokens=False).ids
        with torch.no_grad():
            greedy = model.generate(torch.tensor([chat_ids]), max_new_tokens=N_GREEDY, min_new_tokens=N_GREEDY,
                                    do_sample=False, eos_token_id=None, pad_token_id=0)[0][len(chat_ids):].tolist()
        # The daemon never samples padding ids; a golden that did could not be served.
        assert max(greedy) < n_tok, greedy
        text = lib.decode(greedy, skip_special_tokens=True)
        golden = {
            "about": f"tools/make_hf_qwen_golden.py: transformers {ARCHS[arch]['cls']} in float32 on tests/golden/{name}",
            "vocab": model.config.vocab_size,
            "tokenizer_vocab": n_tok,
            "probes": probes,
            "cases": cases,
            "chat": {"messages": CHAT, "rendered": rendered, "ids": chat_ids, "greedy": greedy, "text": text,
                     "greedy_bytes": token_bytes(lib, greedy)},
            "tokenize": tokenize,
        }
        path = pathlib.Path(args.golden_dir) / f"hf_{arch}_tiny.json"
        path.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")
        print(f"{out}: vocab {model.config.vocab_size} ({n_tok} tokens); {path}: {len(cases)} prompts; "
              f"chat greedy {text!r}")


if __name__ == "__main__":
    main()
