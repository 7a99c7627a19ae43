#!/usr/bin/env python3
"""Writes the SentencePiece tokenizer fixture: tests/golden/spm-tiny.gguf, a tiny
Llama model (random weights) whose vocabulary is a SentencePiece BPE model
trained here on the project's own docs (as of commit CORPUS_COMMIT, so that the
fixture does not move when the docs do), and tests/golden/tokenize_spm.json, the
token ids of tricky texts for it. inferd's tokenizer must reproduce them exactly.

  python3 tools/make_spm_fixture.py [--llama-tokenize PATH] [--out-dir tests/golden]

The vocabulary is written as llama.cpp's converter writes a SentencePiece model
(tokenizer.ggml.model = "llama": pieces, scores and types normal / unknown /
control / byte). Llama's own settings are kept: no normalization, whitespace
kept as written, a dummy prefix space, digits split, byte fallback.

The reference ids come from llama.cpp's llama-tokenize (--llama-tokenize, or
found at ~/peers/llama.cpp/build-cpu/bin/llama-tokenize) when it is there; the
`sentencepiece` library's ids of each text are compared with them and any
difference printed. Without llama-tokenize the ids are sentencepiece's, with
control tokens in the text split off first and each piece of text between them
encoded on its own (what llama.cpp does), and the byte-string cases left out.

Needs `sentencepiece`, `gguf` and numpy from PyPI.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import gguf
from make_random_gguf import add_llama_hparams, layer_shapes
from make_tokenizer_golden import BYTES, TEXTS, case, inputs, write_golden
from truncate_gguf import finish

VOCAB_SIZE = 2000
CONTROL = ["<|im_start|>", "<|im_end|>"]
GEMMA_CONTROL = ["<start_of_turn>", "<end_of_turn>"]
# Texts that matter to a SentencePiece vocabulary in particular: the dummy
# prefix, spaces next to control tokens, the special tokens' own text.
SPM_TEXTS = [
    " ",
    "  two leading, two trailing  ",
    "\u2581 already a meta space \u2581\u2581",
    "<s>Hello</s> <unk> </s><s>",
    "<|im_start|>system\nYou are inferd.<|im_end|>\n<|im_start|>user\n  spaced  <|im_end|>",
    "tab\tseparated\tvalues\n\ttabbed line\r\nCRLF",
    "\u4f60\u597d\uff0c\u4e16\u754c \U0001f642 \u00e9t\u00e9 \u00fcber \u0100\u0101",
]
CORPUS_COMMIT = "b7dd2e5f92ba28a16979d05841fab0800d149d0f"
SHAPE = dict(dim=16, layers=2, heads=4, kv_heads=2, ffn=32)


def corpus(root: str) -> str:
    """The training text: the README and docs, plus a little of other scripts so
    that some non-ASCII characters have pieces of their own."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", root, *args], capture_output=True, check=True, text=True).stdout

    docs = [p for p in git("ls-tree", "--name-only", CORPUS_COMMIT, "docs/").split() if p.endswith(".md")]
    parts = [git("show", f"{CORPUS_COMMIT}:{p}") for p in ["README.md"] + sorted(docs)]
    parts.append("\u4e16\u754c \u4f60\u597d \u65e5\u672c\u8a9e \u00e9t\u00e9 na\u00efve caf\u00e9 "
                 "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440\n" * 3)
    return "\n".join(parts)


def train(text: str, workdir: str, gemma: bool = False):
    """Llama's settings, or Gemma's: no dummy prefix, <pad> <eos> <bos> <unk>
    as ids 0-3, turn markers as control symbols."""
    import sentencepiece as spm

    src = os.path.join(workdir, "corpus.txt")
    with open(src, "w", encoding="utf-8") as f:
        f.write(text)
    prefix = os.path.join(workdir, "spm")
    spm.SentencePieceTrainer.train(
        input=src, model_prefix=prefix, model_type="bpe", vocab_size=VOCAB_SIZE,
        character_coverage=0.9995, byte_fallback=True, split_digits=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=not gemma,
        allow_whitespace_only_pieces=True, max_sentence_length=1 << 16,
        control_symbols=GEMMA_CONTROL if gemma else CONTROL, num_threads=1, minloglevel=2,
        **(dict(pad_id=0, eos_id=1, bos_id=2, unk_id=3, bos_piece="<bos>", eos_piece="<eos>") if gemma else dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1)))
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def token_type(sp, i: int) -> int:
    """As llama.cpp's converter classifies a SentencePiece piece."""
    T = gguf.TokenType
    if sp.IsUnknown(i):
        return T.UNKNOWN
    if sp.IsControl(i):
        return T.CONTROL
    if sp.IsUnused(i):
        return T.UNUSED
    if sp.IsByte(i):
        return T.BYTE
    return T.NORMAL


def write_gguf(sp, path: str, seed: int, gemma_template: str = "") -> None:
    """A tiny Llama on the vocabulary; with gemma_template, Gemma's tokenizer
    settings (no space prefix) and that chat template."""
    n = sp.GetPieceSize()
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_name("spm-tiny")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list([sp.IdToPiece(i).encode("utf-8") for i in range(n)])
    w.add_token_scores([sp.GetScore(i) for i in range(n)])
    w.add_token_types([token_type(sp, i) for i in range(n)])
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(not gemma_template)
    if gemma_template:
        w.add_chat_template(gemma_template)
    add_llama_hparams(w, SHAPE, 256, 10000.0)

    rng = np.random.default_rng(seed)

    def rand(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    d = SHAPE["dim"]
    w.add_tensor("token_embd.weight", rand(n, d))  # the output head is tied to it
    w.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    for i in range(SHAPE["layers"]):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(d, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(d, dtype=np.float32))
        for name, (rows, cols) in layer_shapes(SHAPE).items():
            w.add_tensor(f"blk.{i}.{name}.weight", rand(rows, cols))
    finish(w)


def llama_cpp_ids(exe: str, model: str, raw: bytes, parse_special: bool):
    args = [exe, "-m", model, "--stdin", "--ids", "--no-bos", "--no-escape", "--log-disable"]
    if not parse_special:  # llama-tokenize parses them by default
        args.append("--no-parse-special")
    out = subprocess.run(args, input=raw, capture_output=True, check=True).stdout.decode("utf-8")
    ids = re.findall(r"\[[-0-9, ]*\]", out)
    if not ids:
        sys.exit(f"llama-tokenize printed no ids for {raw!r}: {out!r}")
    return [int(x) for x in re.findall(r"-?\d+", ids[-1])]


def sentencepiece_ids(sp, text: str, parse_special: bool):
    """sentencepiece's ids; with parse_special, the control tokens written in the
    text become their ids and the text between them is encoded piece by piece."""
    if not parse_special:
        return sp.encode(text)
    pattern = "(" + "|".join(re.escape(sp.IdToPiece(i)) for i in range(sp.GetPieceSize())
                             if sp.IsControl(i) or sp.IsUnknown(i)) + ")"
    ids = []
    for part in re.split(pattern, text):
        if part == "":
            continue
        special = sp.PieceToId(part)
        ids += [special] if sp.IdToPiece(special) == part and (sp.IsControl(special) or sp.IsUnknown(special)) \
            else sp.encode(part)
    return ids


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out-dir", default=os.path.join(root, "tests", "golden"))
    ap.add_argument("--llama-tokenize",
                    default=os.path.expanduser("~/peers/llama.cpp/build-cpu/bin/llama-tokenize"))
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    model = os.path.join(a.out_dir, "spm-tiny.gguf")
    with tempfile.TemporaryDirectory() as tmp:
        sp = train(corpus(root), tmp)
        write_gguf(sp, model, a.seed)
    exe = a.llama_tokenize if os.access(a.llama_tokenize, os.X_OK) else shutil.which("llama-tokenize")

    cases, differ = [], 0
    byte_strings = BYTES if exe else []
    for key, raw in inputs(TEXTS + SPM_TEXTS, byte_strings):
        ref = {}
        for special in (False, True):
            sp_ids = sentencepiece_ids(sp, raw.decode("utf-8"), special) if key == "text" else None
            ref[special] = llama_cpp_ids(exe, model, raw, special) if exe else sp_ids
            if sp_ids is not None and sp_ids != ref[special]:
                differ += 1
                print(f"sentencepiece differs (parse_special={special}) on {raw!r}:\n"
                      f"  llama.cpp     {ref[special]}\n  sentencepiece {sp_ids}")
        cases.append(case(key, raw, ref[False], ref[True]))
    reference = (f"llama.cpp llama-tokenize; sentencepiece {__import__('sentencepiece').__version__} "
                 f"differs on {differ} encodings") if exe else \
        f"sentencepiece {__import__('sentencepiece').__version__}, control tokens split off first"
    write_golden(os.path.join(a.out_dir, "tokenize_spm.json"), os.path.basename(model), reference, cases)
    print(f"wrote {model} ({os.path.getsize(model)} bytes), reference: {reference}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
