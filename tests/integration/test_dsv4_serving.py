"""DeepSeek-V4 served by the daemon end to end, on tests/golden/dsv4-tiny-chat
(tools/make_dsv4_checkpoint.py --preset tiny-chat: the tiny random checkpoint
in the real storage formats, with a byte-level BPE tokenizer using
DeepSeek-V3's pre-tokenizer and V4's special tokens).

The checkpoint passes the gate, warms up and serves through the official
`openai` client: prompts are tokenized as the `tokenizers` library does
(tests/golden/dsv4_tokenizer.json) and rendered in DeepSeek-V4's encoding (the
built-in template, checked against vLLM's in the unit tests); thinking on puts
the output in `reasoning_content`, thinking off in `content`; a forced tool call
is written in DSML and comes back as `tool_calls`, and the tool turns render as
DSML and <tool_result>. The weights are random, so the text means nothing: that greedy
tokens served together equal the model's own decode alone is checked in
tests/unit/test_dsv4_serving.cpp, and the forward pass against transformers in
test_dsv4_forward.cpp and test_dsv4_decode.cpp."""
import concurrent.futures
import json

import jsonschema
import openai
import pytest

from conftest import SRC, Daemon, rendered_prompt

TINY_CHAT = SRC / "tests" / "golden" / "dsv4-tiny-chat"
GREEDY = {"temperature": 0.0}
CITY = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Berlin", "Vienna"]}},
        "required": ["city"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": CITY}}


@pytest.fixture(scope="module")
def daemon():
    d = Daemon(["--model", str(TINY_CHAT)], wait_state="Serving", timeout=300)
    yield d
    d.stop()


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0, timeout=120)



def test_the_checkpoint_is_gated_warmed_and_listed(daemon):
    out = daemon.output()
    assert "checkpoint gate: passed" in out and "169/169 draft params" in out, out[-4000:]
    assert "deepseek_v4 keeps each sequence's state itself: prefix caching is off" in out, out[-4000:]
    assert "warm-up passed" in out, out[-4000:]
    assert [m["id"] for m in daemon.get("/v1/models").json()["data"]] == ["dsv4-tiny-chat"]


def test_prompts_tokenize_as_the_tokenizers_library_does(daemon):
    golden = json.loads((SRC / "tests" / "golden" / "dsv4_tokenizer.json").read_text())
    cases = [c for c in golden["cases"] if not c["add_special"]]
    assert len(cases) >= 20
    for c in cases:
        r = daemon.post("/tokenize", json={"prompt": c["text"], "add_special_tokens": False})
        assert r.status_code == 200, r.text
        assert r.json()["tokens"] == c["ids"], c["text"]


def test_completions_streamed_together_equal_each_alone(client):
    prompts = ["Hello world", "The quick brown fox", "12345 and 678", "def f(x):\n    return"]
    alone = [client.completions.create(model="dsv4-tiny-chat", prompt=p, max_tokens=24, extra_body={"ignore_eos": True},
                                       **GREEDY) for p in prompts]
    for a in alone:
        assert a.usage.completion_tokens == 24 and a.choices[0].finish_reason == "length"

    def streamed(p):
        chunks = client.completions.create(model="dsv4-tiny-chat", prompt=p, max_tokens=24, stream=True,
                                           extra_body={"ignore_eos": True}, **GREEDY)
        return "".join(c.choices[0].text for c in chunks if c.choices)

    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(streamed, prompts))
    assert together == [a.choices[0].text for a in alone]


def test_chat_prompts_are_rendered_in_deepseek_v4s_encoding(daemon):
    hi = [{"role": "user", "content": "Hi"}]
    thinking = rendered_prompt(daemon, messages=hi)
    assert thinking.startswith("<｜begin▁of▁sentence｜>") and thinking.endswith("<｜User｜>Hi<｜Assistant｜><think>")
    plain = rendered_prompt(daemon, messages=hi, chat_template_kwargs={"thinking": False})
    assert plain == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>"
    assert rendered_prompt(daemon, messages=hi, reasoning_effort="none") == plain
    assert rendered_prompt(daemon, messages=hi, reasoning_effort="max").startswith(
        "<｜begin▁of▁sentence｜>Reasoning Effort: Beyond maximum")
    # A tool call and its result in the history: DSML, then the result in the user turn.
    turns = hi + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "22 C"}]
    text = rendered_prompt(daemon, messages=turns, tools=[WEATHER], chat_template_kwargs={"thinking": False})
    assert '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">' in text, text
    assert '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>' in text, text
    assert "<tool_result>22 C</tool_result>" in text, text
    assert '"name": "get_weather"' in text, text  # the tools' schemas in the system part


def test_thinking_puts_the_output_in_reasoning_content(client, daemon):
    hi = [{"role": "user", "content": "Hi"}]
    on = client.chat.completions.create(model="dsv4-tiny-chat", messages=hi, max_tokens=16,
                                        extra_body={"ignore_eos": True}, **GREEDY)
    off = client.chat.completions.create(model="dsv4-tiny-chat", messages=hi, max_tokens=16,
                                         extra_body={"ignore_eos": True, "chat_template_kwargs": {"thinking": False}},
                                         **GREEDY)
    # The random weights never write </think>: thinking, all of it is reasoning.
    reasoning = on.choices[0].message.model_extra.get("reasoning_content")
    assert reasoning and not on.choices[0].message.content, on
    assert off.choices[0].message.content and not off.choices[0].message.model_extra.get("reasoning_content"), off
    # Each is the text of the tokens generated, as /v1/completions gives it for the same prompt.
    for resp, kwargs, text in ((on, {}, reasoning), (off, {"thinking": False}, off.choices[0].message.content)):
        prompt = daemon.post("/tokenize", json={"messages": hi, "chat_template_kwargs": kwargs}).json()["tokens"]
        same = client.completions.create(model="dsv4-tiny-chat", prompt=prompt, max_tokens=16,
                                         extra_body={"ignore_eos": True}, **GREEDY)
        assert resp.usage.completion_tokens == 16
        assert same.choices[0].text.strip() == text.strip()


def test_a_forced_tool_call_comes_back_as_tool_calls(client):
    for stream in (False, True):
        kw = dict(model="dsv4-tiny-chat", messages=[{"role": "user", "content": "Weather in Paris?"}],
                  tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}},
                  max_tokens=200, extra_body={"chat_template_kwargs": {"thinking": False}}, **GREEDY)
        if not stream:
            r = client.chat.completions.create(**kw)
            calls, finish = r.choices[0].message.tool_calls, r.choices[0].finish_reason
            name, args = calls[0].function.name, calls[0].function.arguments
        else:
            name, args, finish = "", "", None
            for c in client.chat.completions.create(stream=True, **kw):
                for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
                    name += tc.function.name or ""
                    args += tc.function.arguments or ""
                if c.choices and c.choices[0].finish_reason:
                    finish = c.choices[0].finish_reason
        assert name == "get_weather" and finish == "tool_calls", (stream, name, args, finish)
        jsonschema.validate(json.loads(args), CITY)


def test_a_forced_tool_call_is_written_in_dsml(daemon):
    """The model writes the call as its template taught it, and the deepseek_v4 parser reads it."""
    body = dict(messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER], tool_choice="required",
                max_tokens=200, logprobs=True, chat_template_kwargs={"thinking": False}, **GREEDY)
    r = daemon.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    written = b"".join(bytes(t["bytes"]) for t in choice["logprobs"]["content"]).decode()
    city = json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"])["city"]
    assert written == ('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
                       f'<｜DSML｜parameter name="city" string="true">{city}</｜DSML｜parameter>\n'
                       '</｜DSML｜invoke>\n</｜DSML｜tool_calls>'), written
