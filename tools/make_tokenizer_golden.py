#!/usr/bin/env python3
"""Writes tests/golden/tokenize.json: token ids of tricky texts as llama.cpp's
tokenizer (through llama-cpp-python, vocabulary only) produces them for the
default model. inferd's tokenizer must reproduce them exactly.

  python3 tools/make_tokenizer_golden.py [--model PATH] [--out tests/golden/tokenize.json]

Each case records the ids with special tokens taken literally ("ids") and with
special tokens in the text parsed ("ids_special"); neither adds a BOS token.
The input is "text", or "hex" for byte strings that are not valid UTF-8.
"""
import argparse
import json
import os

TEXTS = [
    "",
    "Hello world",
    "Hello, World! HELLO wOrLd MixedCase camelCaseWord",
    "I'm sure it's what they're saying: we'll see, you've done it, he'd go. IT'S LOUD",
    "don't \u2019curly\u2019 'quoted' ''double'' '' 's 'S 'll",
    "In 2024 there were 1234567890 items, 3.14159 and -42; 0x1F",
    "12345678901234567890123456789",
    "a  b   c    d\t\te\n\nf \n g  \n\n  h   ",
    "\t\n \r\n\t  ",
    "        ",
    "   leading spaces and trailing   ",
    "line1\nline2\r\nline3\n\n\nline4",
    "def fib(n):\n    \"\"\"Fibonacci.\"\"\"\n    if n < 2:\n        return n\n\treturn fib(n - 1) + fib(n - 2)  # tail\n",
    '{"key": "value", "n": [1, 2, 3], "nested": {"a": null}}',
    "https://example.com/path?q=1&r=two#frag user@example.org",
    "!!! ??? ... --- === *** ((())) [[]] {{}} <<>> @#$%^&*",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u4e2d\u6587\u6587\u672c\uff0c\u8fd8\u6709\ud55c\uad6d\uc5b4\ub3c4 \uc788\uc2b5\ub2c8\ub2e4\u3002",
    "I \u2764\ufe0f \U0001f999s! \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family \U0001f1eb\U0001f1f7 flag \U0001f600\U0001f603",
    "e\u0301 cafe\u0301 na\u00efve Zo\u00eb \u00f1 n\u0303 a\u0308\u0304",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440, \u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
    "\u2211 x\u00b2 + \u221ay \u2264 \u221e \u2260 \u03c0 \u2248 3.14 \u00b0C \u00b5s \u2167 \u00bd",
    "zero\u200bwidth non\u00a0breaking\u2003em space\u3000ideographic",
    "Pneumonoultramicroscopicsilicovolcanoconiosis aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "abc<|im_end|>def <|endoftext|> <repo_name>x<|im_start|><|im_start|>",
    "<|im_start|<|im_end>|<|im_start|>system",
]

# Not valid UTF-8, or bytes the vocabulary has no token for: llama.cpp reads a
# byte that does not begin a well-formed character as U+FFFD and drops bytes it
# cannot spell.
BYTES = [
    b"\xff\xfe abc \xc3",
    b"cut \xe2\x82 euro \xe2\x82\xac \xf0\x9f\x98",
    b"ctrl\x04\x13chars\x80\x80 end",
]


def write_golden(path, model, reference, cases):
    """Writes a golden file: one line per case keeps it readable and its diffs small."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        f.write(f' "model": {json.dumps(model)},\n')
        f.write(f' "reference": {json.dumps(reference)},\n')
        f.write(' "cases": [\n')
        rows = [" " + json.dumps(c, ensure_ascii=False) for c in cases]
        f.write(",\n".join(rows))
        f.write("\n ]\n}\n")
    print(f"wrote {len(cases)} cases to {path}")


def inputs(texts=TEXTS, byte_strings=BYTES):
    """(key, raw bytes) of each case: "text" for UTF-8 text, "hex" for byte strings."""
    return [("text", t.encode("utf-8")) for t in texts] + [("hex", b) for b in byte_strings]


def case(key, raw, ids, ids_special):
    return {key: raw.decode("utf-8") if key == "text" else raw.hex(), "ids": ids, "ids_special": ids_special}


def main():
    import llama_cpp

    ap = argparse.ArgumentParser()
    default_model = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                 "inferd", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--model", default=os.environ.get("INFERD_MODEL", default_model))
    ap.add_argument("--out", default="tests/golden/tokenize.json")
    args = ap.parse_args()

    llm = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    cases = [case(key, raw, llm.tokenize(raw, add_bos=False, special=False),
                  llm.tokenize(raw, add_bos=False, special=True)) for key, raw in inputs()]
    write_golden(args.out, os.path.basename(args.model), f"llama-cpp-python {llama_cpp.__version__}", cases)


if __name__ == "__main__":
    main()
