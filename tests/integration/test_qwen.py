"""A Qwen2 GGUF served by the real daemon: the tiny random model of
tests/golden/qwen2-tiny.gguf (tools/make_qwen_golden.py; q/k/v biases, RoPE by
halves, tied embeddings, the default model's tokenizer) completes a prompt given
as token ids with transformers' greedy text."""
import json

import openai

from conftest import SRC

GOLDEN = SRC / "tests" / "golden"
# The model's trained context is 256 tokens.
SHAPES = ["--max-model-len", "256", "--max-num-batched-tokens", "128", "--max-num-seqs", "4"]


def test_a_qwen2_gguf_completes_with_transformers_greedy_text(start_daemon):
    d = start_daemon(["--model", str(GOLDEN / "qwen2-tiny.gguf")] + SHAPES)
    c = openai.OpenAI(base_url=d.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    assert [m.id for m in c.models.list().data] == ["qwen2-tiny"]
    for case in json.loads((GOLDEN / "qwen2_tiny.json").read_text())["cases"]:
        r = c.completions.create(model="qwen2-tiny", prompt=case["ids"], max_tokens=len(case["greedy"]),
                                 temperature=0)
        assert r.usage.prompt_tokens == len(case["ids"])
        assert r.usage.completion_tokens == len(case["greedy"])
        assert r.choices[0].text == case["greedy_text"]
