"""A Gemma 2 GGUF with Gemma's own tokenizer settings and chat template served by
the real daemon: tests/golden/gemma2-chat.gguf (tools/make_gemma_chat_fixture.py).
Chat requests render through the model's template to llama.cpp's ids, answer
through the `openai` client, and a conversation the template refuses (a system
message) is a 400 carrying the template's own message."""
import json

import openai
import pytest

from conftest import SRC, Daemon

MODEL = SRC / "tests" / "golden" / "gemma2-chat.gguf"
GOLDEN = json.loads((SRC / "tests" / "golden" / "gemma_chat.json").read_text())


@pytest.fixture(scope="module")
def daemon():
    d = Daemon(["--model", str(MODEL), "--max-model-len", "256", "--max-num-seqs", "4", "--no-warmup"],
               wait_state="Serving", timeout=300)
    yield d
    d.stop()


def test_chat_prompts_render_through_the_model_template(daemon):
    for chat in GOLDEN["chats"]:
        r = daemon.post("/tokenize", json={"messages": chat["messages"], "add_generation_prompt": True})
        if "error" in chat:
            assert r.status_code == 400, r.text
            assert chat["error"] in r.json()["error"]["message"]
        else:
            assert r.status_code == 200, r.text
            assert r.json()["tokens"] == chat["ids"], chat["messages"]


def test_chat_completion_and_refusal(daemon):
    c = openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    first = GOLDEN["chats"][0]
    r = c.chat.completions.create(model="gemma2-chat", messages=first["messages"], max_tokens=8, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.usage.prompt_tokens == len(first["ids"])
    assert r.usage.completion_tokens == 8 and r.choices[0].finish_reason == "length"
    refused = next(chat for chat in GOLDEN["chats"] if chat.get("error") == "System role not supported")
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="gemma2-chat", messages=refused["messages"], max_tokens=8)
    assert "System role not supported" in str(e.value)
