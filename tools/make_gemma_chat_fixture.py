#!/usr/bin/env python3
"""Writes tests/golden/gemma2-chat.gguf, a tiny random Gemma 2 whose vocabulary
is a Gemma-style SentencePiece model and whose chat template is Gemma's, and
tests/golden/gemma_chat.json, its goldens.

  python3 tools/make_gemma_chat_fixture.py [--llama-tokenize PATH] [--out-dir tests/golden]

The SentencePiece BPE model is tools/make_spm_fixture.py's (same corpus, byte
fallback, digits split) with Gemma's settings: no dummy prefix, <pad> <eos>
<bos> <unk> as ids 0-3, <start_of_turn> and <end_of_turn> as control symbols.
tools/make_random_gguf.py writes the Gemma 2 weights (tiny, Q4_0, seeded) around
it. Goldens:
- `tokenize`: llama.cpp's llama-tokenize ids (specials parsed, no BOS added) of
  tricky texts;
- `chats`: conversations rendered by jinja2 as transformers renders chat
  templates (tools/make_chat_template_golden.py's environment), with their
  llama-tokenize ids; a conversation the template refuses carries its message.

Needs sentencepiece, gguf, numpy, jinja2 (pip) and llama-tokenize; the tests do not.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import jinja2

from make_chat_template_golden import environment
from make_spm_fixture import SPM_TEXTS, corpus, llama_cpp_ids, train, write_gguf
from make_tokenizer_golden import TEXTS

# google/gemma-2-*-it's tokenizer_config.json chat_template.
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}")
GEMMA_TEXTS = ["<start_of_turn>user\n  two spaces<end_of_turn>\n<start_of_turn>model\n", "<bos>Hi<eos> <pad><unk>"]
CHATS = [
    [{"role": "user", "content": "What is inferd?"}],
    [{"role": "user", "content": "  Hello  \n"}, {"role": "assistant", "content": "Hi! How can I help?"},
     {"role": "user", "content": "Count to 3: 1, 2,"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out-dir", default=os.path.join(root, "tests", "golden"))
    ap.add_argument("--llama-tokenize", default=os.path.expanduser("~/peers/llama.cpp/build-cpu/bin/llama-tokenize"))
    a = ap.parse_args()
    model = os.path.join(a.out_dir, "gemma2-chat.gguf")
    with tempfile.TemporaryDirectory() as tmp:
        sp = train(corpus(root), tmp, gemma=True)
        donor = os.path.join(tmp, "donor.gguf")
        write_gguf(sp, donor, 1, gemma_template=GEMMA_TEMPLATE)
        subprocess.run([sys.executable, os.path.join(root, "tools", "make_random_gguf.py"), "--donor", donor,
                        "--shape", "tiny", "--type", "q4_0", "--arch", "gemma2", "--seed", "3", model], check=True)
    tokenize = [{"text": t, "ids": llama_cpp_ids(a.llama_tokenize, model, t.encode(), True)}
                for t in TEXTS + SPM_TEXTS + GEMMA_TEXTS]
    template = environment().from_string(GEMMA_TEMPLATE)
    chats = []
    for messages in CHATS:
        try:
            rendered = template.render(messages=messages, add_generation_prompt=True, bos_token="<bos>",
                                       eos_token="<eos>")
            chats.append({"messages": messages, "rendered": rendered,
                          "ids": llama_cpp_ids(a.llama_tokenize, model, rendered.encode(), True)})
        except jinja2.exceptions.TemplateError as e:
            chats.append({"messages": messages, "error": str(e)})
    golden = {"about": "tools/make_gemma_chat_fixture.py: llama.cpp's llama-tokenize and jinja2 on "
                       "tests/golden/gemma2-chat.gguf", "tokenize": tokenize, "chats": chats}
    path = os.path.join(a.out_dir, "gemma_chat.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(golden, ensure_ascii=True) + "\n")
    print(f"wrote {model} ({os.path.getsize(model)} bytes) and {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
