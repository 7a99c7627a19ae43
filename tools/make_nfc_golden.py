#!/usr/bin/env python3
"""Golden ids for text that NFC normalization changes, on the Qwen-style fixture.

The `tokenizers` library encodes each string with tests/golden/hf-qwen2-tiny's
tokenizer.json (its NFC normalizer applies to the text between special
tokens); the unit test checks inferd's ids against these and against the ids of
the string's NFC form. Writes tests/golden/tokenize_nfc.json.

    pip install tokenizers && python3 tools/make_nfc_golden.py
"""
import json
import pathlib
import unicodedata

ROOT = pathlib.Path(__file__).resolve().parent.parent
STRINGS = [
    "Cafe\u0301 au lait, nai\u0308ve",             # e + combining acute, i + diaeresis
    "A\u030angstro\u0308m and \u212bngstr\u00f6m",   # A + ring; U+212B ANGSTROM SIGN (a singleton)
    "\u2126 ohms, \u03a9 omega",                       # U+2126 OHM SIGN -> U+03A9
    "q\u0307\u0323 reordered marks",                   # combining marks in canonical order
    "\u1100\u1161\u11a8 jamo to a syllable",           # Hangul L V T -> U+AC01
    "Vie\u0302\u0323t Nam",                            # two marks onto one base
    "\ufb01 ligature and \u00bd stay (NFKC would change them)",
    "<|im_start|>user\nre\u0301sume\u0301<|im_end|>\n",  # specials around decomposed text
    "already NFC: caf\u00e9 \u00c5 \uac01",
]


def main():
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(ROOT / "tests/golden/hf-qwen2-tiny/tokenizer.json"))
    cases = []
    for s in STRINGS:
        ids = tok.encode(s, add_special_tokens=True).ids
        assert ids == tok.encode(unicodedata.normalize("NFC", s), add_special_tokens=True).ids, s
        cases.append({"text": s, "ids": ids})
    out = ROOT / "tests/golden/tokenize_nfc.json"
    out.write_text(json.dumps({"about": "tools/make_nfc_golden.py: the tokenizers library on tests/golden/hf-qwen2-tiny",
                               "cases": cases}, indent=1, ensure_ascii=True) + "\n")
    print(f"{out}: {len(cases)} strings")


if __name__ == "__main__":
    main()
