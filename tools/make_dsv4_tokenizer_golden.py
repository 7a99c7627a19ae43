#!/usr/bin/env python3
"""Writes tests/golden/dsv4_tokenizer.json: the ids the `tokenizers` library
gives for texts encoded with tests/golden/dsv4-tiny-chat/tokenizer.json (a
byte-level BPE with DeepSeek-V3's pre-tokenizer), for the unit test that
checks inferd's tokenizer gives the same.

    tools/make_dsv4_tokenizer_golden.py

Each case: the text, whether special tokens were added (the post-processor's
BOS), and the ids. Special tokens written in the text are matched as the
library matches added tokens.
"""
import json
import pathlib

from tokenizers import Tokenizer

ROOT = pathlib.Path(__file__).resolve().parents[1]

TEXTS = [
    "Hello world",
    "hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "12345",
    "1 22 333 4444 55555 666666",
    "3.14159 and 1,000,000",
    "a1b22c333",
    "!!! ??? ... ---",
    "(x+y)*z = w; // comment",
    "\"quoted\" 'single' `tick`",
    "#include <stdio.h>",
    "line one\nline two\n\nline four\r\n",
    "  leading spaces and trailing  ",
    "\ttab\tseparated\t",
    "今天天气很好。",
    "中文English混合123",
    "こんにちは、世界",
    "カタカナとひらがな",
    "한국어 텍스트",
    "😀 🚀 ✨ 👍🏽",
    "Café naïve résumé façade",
    "Zürich, São Paulo, Ångström",
    "e\u0301 combining accent",
    "Ελληνικά και русский",
    "<｜User｜>Hi there<｜Assistant｜>",
    "<｜begin▁of▁sentence｜>text<｜end▁of▁sentence｜>",
    "<think>reasoning</think>answer",
    '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n</｜DSML｜invoke>',
    "<tool_result>{\"temperature\": 21}</tool_result>",
    "$PARAMETER_VALUE and snake_case_name and CamelCase",
    "https://example.com/path?q=1&r=two",
    "",
]

WITH_BOS = ["Hello world", "今天天气很好。", ""]


def main():
    tok = Tokenizer.from_file(str(ROOT / "tests/golden/dsv4-tiny-chat/tokenizer.json"))
    cases = []
    for text in TEXTS:
        cases.append(dict(text=text, add_special=False, ids=tok.encode(text, add_special_tokens=False).ids))
    for text in WITH_BOS:
        cases.append(dict(text=text, add_special=True, ids=tok.encode(text, add_special_tokens=True).ids))
    out = ROOT / "tests/golden/dsv4_tokenizer.json"
    lines = ",\n  ".join(json.dumps(c, ensure_ascii=False) for c in cases)  # one case a line
    out.write_text('{"tokenizer": "tests/golden/dsv4-tiny-chat/tokenizer.json",\n "cases": [\n  ' + lines + "\n ]\n}\n")
    print(f"{out}: {len(cases)} cases")


if __name__ == "__main__":
    main()
