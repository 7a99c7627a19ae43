"""A Hugging Face Qwen2ForCausalLM checkpoint directory served by the real
daemon: the tiny random Qwen2 of tests/golden/hf-qwen2-tiny
(tools/make_hf_qwen_golden.py). Prompts tokenize as the `tokenizers` library
does (decomposed text NFC-normalized first), a chat request renders through the checkpoint's ChatML template to
transformers' ids, and its 16 greedy tokens (past end-of-sequence, compared
byte for byte through logprobs) are those transformers generates in float32,
on one rank and on two tensor-parallel ranks (each holding a slice of the
q/k/v biases and of the padded vocabulary)."""
import json

import openai
import pytest

from conftest import SRC, Daemon, two_rank_group

TINY = SRC / "tests" / "golden" / "hf-qwen2-tiny"
GOLDEN = json.loads((SRC / "tests" / "golden" / "hf_qwen2_tiny.json").read_text())
NFC_CASES = json.loads((SRC / "tests" / "golden" / "tokenize_nfc.json").read_text())["cases"]
SHAPES = ["--max-model-len", "256", "--max-num-batched-tokens", "128", "--max-num-seqs", "4"]


@pytest.fixture(scope="module")
def daemon():
    d = Daemon(["--model", str(TINY)] + SHAPES, wait_state="Serving", timeout=300)
    yield d
    d.stop()


def test_listed_and_padding_ids_reported(daemon):
    assert [m["id"] for m in daemon.get("/v1/models").json()["data"]] == ["hf-qwen2-tiny"]
    out = daemon.output()
    assert "the model outputs 448 ids, the tokenizer has 405 tokens" in out, out[-4000:]


def test_prompts_tokenize_as_the_tokenizers_library_does(daemon):
    # NFC_CASES: decomposed text, which the checkpoint's NFC normalizer composes first.
    for case in GOLDEN["tokenize"] + NFC_CASES:
        r = daemon.post("/tokenize", json={"prompt": case["text"], "add_special_tokens": True})
        assert r.status_code == 200, r.text
        assert r.json()["tokens"] == case["ids"], case["text"]


def chat_greedy(daemon):
    c = openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    return c.chat.completions.create(model="hf-qwen2-tiny", messages=GOLDEN["chat"]["messages"], max_tokens=16,
                                     temperature=0, logprobs=True, extra_body={"ignore_eos": True})


def test_chat_renders_chatml_and_decodes_transformers_greedy_tokens(daemon):
    chat = GOLDEN["chat"]
    t = daemon.post("/tokenize", json={"messages": chat["messages"], "add_generation_prompt": True})
    assert t.status_code == 200, t.text
    assert t.json()["tokens"] == chat["ids"]
    assert daemon.post("/detokenize", json={"tokens": chat["ids"]}).json()["prompt"] == chat["rendered"]

    r = chat_greedy(daemon)
    assert r.usage.prompt_tokens == len(chat["ids"])
    assert r.usage.completion_tokens == 16
    assert r.choices[0].finish_reason == "length"
    assert [tok.bytes for tok in r.choices[0].logprobs.content] == chat["greedy_bytes"]
    assert r.choices[0].message.content == chat["text"]  # decoded as the tokenizers library decodes


def test_tensor_parallel_ranks_give_transformers_greedy_tokens():
    with two_rank_group(["--model", str(TINY), "--no-warmup", "--threads", "1"] + SHAPES) as head:
        r = chat_greedy(head)
    assert [tok.bytes for tok in r.choices[0].logprobs.content] == GOLDEN["chat"]["greedy_bytes"]
