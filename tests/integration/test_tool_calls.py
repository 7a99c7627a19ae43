"""Tool calling and reasoning through the OpenAI API, on the default model.

The request side (tools and tool turns rendered through the chat template,
validation, tool_choice none) is checked exactly through /tokenize. The output
parsers are checked on what the model writes at temperature 0; their every
corner is in the unit tests (test_output_parsers.cpp). tool_choice required and
a named function force calls by constrained decoding: their arguments are
validated with the `jsonschema` package.
"""
import json

import jsonschema
import openai
import pytest

from conftest import default_model, rendered_prompt

GREEDY = {"temperature": 0.0}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}

ROUND_TRIP = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "22 C and sunny"},
]


@pytest.fixture(scope="module")
def daemon(serving_daemon):
    return serving_daemon


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0, timeout=120)



def test_tools_and_tool_turns_render_through_the_template(daemon):
    text = rendered_prompt(daemon, messages=ROUND_TRIP, tools=[WEATHER])
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert "<tools>\n" + json.dumps(WEATHER, separators=(",", ":")) + "\n</tools>" in text
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n'
            '</tool_call><|im_end|>') in text
    assert "<|im_start|>user\n<tool_response>\n22 C and sunny\n</tool_response><|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    # tool_choice none leaves the tools out of the prompt.
    plain = rendered_prompt(daemon, messages=ROUND_TRIP[:1])
    assert rendered_prompt(daemon, messages=ROUND_TRIP[:1], tools=[WEATHER], tool_choice="none") == plain
    assert "<tools>" not in plain


def daemon_model(daemon):
    return daemon.get("/v1/models").json()["data"][0]["id"]


def test_prompt_tokens_match_the_rendering(daemon, client):
    count = daemon.post("/tokenize", json={"messages": ROUND_TRIP, "tools": [WEATHER]}).json()["count"]
    r = client.chat.completions.create(model=daemon_model(daemon), messages=ROUND_TRIP, tools=[WEATHER],
                                       max_tokens=1, **GREEDY)
    assert r.usage.prompt_tokens == count


BAD = [
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name", "a-z"),
    ({"tools": [{"type": "function"}]}, "tools[0].function", "required"),
    ({"tools": [{"type": "retrieval", "function": {"name": "f"}}]}, "tools[0].type", "function"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice",
     "`get_time`, which is not among `tools`"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function"}}, "tool_choice.function", "required"),
    ({"tool_choice": "required"}, "tool_choice", "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": True, "parameters": {
        "type": "object", "properties": {"day": {"type": "string", "format": "date"}}}}}]},
     "tools[0].function.parameters.properties.day.format", "`format` is not supported"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]+$"}}}}}],
      "tool_choice": "required"}, "tools[0].function.parameters.properties.zip.pattern", "`pattern` is not supported"),
    ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format",
     "tool_choice"),
    ({"tool_choice": "auto"}, "tool_choice", "tools"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "r"}]},
     "messages[1].tool_call_id", "required"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"type": "function",
                                                         "function": {"name": "f", "arguments": "{oops"}}]}]},
     "messages[0].tool_calls[0].function.arguments", "JSON"),
    ({"chat_template_kwargs": {"enable_thinking": "yes"}}, "chat_template_kwargs.enable_thinking", "boolean"),
]


@pytest.mark.parametrize("extra,param,words", BAD)
def test_bad_tool_fields_are_400_naming_the_field(daemon, extra, param, words):
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, **extra}
    r = daemon.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param
    assert words in err["message"]


def test_round_trip_streaming_and_not(daemon, client):
    model = daemon_model(daemon)
    r = client.chat.completions.create(model=model, messages=ROUND_TRIP, tools=[WEATHER], max_tokens=24, **GREEDY)
    choice = r.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    # Streamed, the same request says the same, in the same pieces the client joins.
    content, calls = "", {}
    finish = None
    for chunk in client.chat.completions.create(model=model, messages=ROUND_TRIP, tools=[WEATHER], max_tokens=24,
                                                stream=True, **GREEDY):
        for c in chunk.choices:
            content += c.delta.content or ""
            for t in c.delta.tool_calls or []:
                calls.setdefault(t.index, {"name": "", "arguments": ""})
                calls[t.index]["name"] += t.function.name or ""
                calls[t.index]["arguments"] += t.function.arguments or ""
            finish = c.finish_reason or finish
    assert content == (choice.message.content or "")
    assert [c["name"] for c in calls.values()] == [t.function.name for t in choice.message.tool_calls or []]
    assert finish == choice.finish_reason


def test_tool_choice_none_answers_in_text(daemon, client):
    r = client.chat.completions.create(model=daemon_model(daemon), tools=[WEATHER], tool_choice="none",
                                       messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, **GREEDY)
    assert r.choices[0].message.tool_calls is None
    assert isinstance(r.choices[0].message.content, str) and r.choices[0].message.content


def test_reasoning_split_on_real_output(start_daemon):
    """deepseek_r1 reads everything before </think> as reasoning: SmolLM2 never
    writes the tag, so its whole answer is reasoning_content, streamed or not."""
    d = start_daemon(["--model", default_model(), "--reasoning-parser", "deepseek_r1"])
    messages = [{"role": "user", "content": "Say hello."}]
    body = {"messages": messages, "max_tokens": 12, "chat_template_kwargs": {"enable_thinking": True}, **GREEDY}
    whole = d.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert whole["reasoning_content"]
    assert whole["content"] == ""
    reasoning, content = "", ""
    with d.post("/v1/chat/completions", json={**body, "stream": True}, stream=True) as r:
        for line in r.iter_lines(decode_unicode=True):
            if line.startswith("data: {"):
                for c in json.loads(line[6:])["choices"]:
                    reasoning += c["delta"].get("reasoning_content") or ""
                    content += c["delta"].get("content") or ""
    assert reasoning == whole["reasoning_content"]
    assert content == ""
    # Forced calls begin at the first token: the reasoning parser leaves them alone.
    forced = d.post("/v1/chat/completions", json={**body, "tools": [WEATHER], "tool_choice": "required",
                                                  "parallel_tool_calls": False, "max_tokens": 60}).json()["choices"][0]
    assert forced["finish_reason"] == "tool_calls"
    assert "reasoning_content" not in forced["message"]
    assert [t["function"]["name"] for t in forced["message"]["tool_calls"]] == ["get_weather"]


def test_deepseek_v4_reasoning_follows_the_thinking_switch(start_daemon):
    """deepseek_v4 reads each request's thinking switch: on (the default), the
    answer SmolLM2 writes, never closing a think block, is all reasoning; with
    chat_template_kwargs thinking false the same answer is all content. The
    DSML tool-call parser finds no block in it and passes it through."""
    d = start_daemon(["--model", default_model(), "--reasoning-parser", "deepseek_v4",
                      "--tool-call-parser", "deepseek_v4"])
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 12, "tools": [WEATHER], **GREEDY}
    on = d.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert on["reasoning_content"] and not on["content"] and not on.get("tool_calls")
    off = d.post("/v1/chat/completions", json={**body, "chat_template_kwargs": {"thinking": False}}).json()
    off = off["choices"][0]["message"]
    assert "reasoning_content" not in off and not off.get("tool_calls")
    # SmolLM2's template has no thinking switch: the prompt, and so the answer, is the same.
    assert off["content"].rstrip() == on["reasoning_content"]


# ---- calls the model writes ----
# At temperature 0, after a few turns in which the assistant answered such
# questions with a call, SmolLM2-135M answers the next one with a call too.

def calls_turn(*cities):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{i}", "type": "function",
         "function": {"name": "get_weather", "arguments": json.dumps({"city": c})}} for i, c in enumerate(cities)]}


def ask(cities):
    return {"role": "user", "content": "What is the weather in " + " and ".join(cities) + "?"}


FEW_SHOT = [ask(["Paris"]), calls_turn("Paris"), ask(["Rome"]), calls_turn("Rome"), ask(["Madrid"])]
FEW_SHOT_PARALLEL = [ask(["Paris", "Rome"]), calls_turn("Paris", "Rome"), ask(["Oslo", "Lima"]),
                     calls_turn("Oslo", "Lima"), ask(["Berlin", "Madrid"])]


def streamed(client, **kw):
    """A streamed choice as the client joins it: content, calls by index, finish_reason, call-delta shapes."""
    content, calls, finish, heads = "", {}, None, []
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            content += c.delta.content or ""
            for t in c.delta.tool_calls or []:
                if t.id:
                    heads.append((t.index, t.id, t.type, t.function.name, t.function.arguments))
                call = calls.setdefault(t.index, {"name": "", "arguments": ""})
                call["name"] += t.function.name or ""
                call["arguments"] += t.function.arguments or ""
            finish = c.finish_reason or finish
    return content, calls, finish, heads


@pytest.mark.parametrize("messages,cities", [(FEW_SHOT, ["Madrid"]), (FEW_SHOT_PARALLEL, ["Berlin", "Madrid"])],
                         ids=["one", "parallel"])
def test_model_output_becomes_tool_calls(daemon, client, messages, cities):
    kw = dict(model=daemon_model(daemon), messages=messages, tools=[WEATHER], max_tokens=100, **GREEDY)
    r = client.chat.completions.create(**kw)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = choice.message.tool_calls
    assert [t.function.name for t in calls] == ["get_weather"] * len(cities)
    assert [json.loads(t.function.arguments) for t in calls] == [{"city": c} for c in cities]
    assert all(t.id.startswith("call_") and t.type == "function" for t in calls)
    assert len({t.id for t in calls}) == len(calls)

    # Streamed: no piece of a tag as content; each call opens with its id, type
    # and name (arguments empty), then its arguments.
    content, scalls, finish, heads = streamed(client, **kw)
    assert content == ""
    assert finish == "tool_calls"
    assert [(i, tp, name, args) for i, _, tp, name, args in heads] == [
        (i, "function", "get_weather", "") for i in range(len(cities))]
    assert all(h[1].startswith("call_") for h in heads)
    assert [scalls[i] for i in sorted(scalls)] == [
        {"name": t.function.name, "arguments": t.function.arguments} for t in calls]


def test_the_configured_parser_reads_the_output(start_daemon):
    """With --tool-call-parser mistral the model's <tool_call> blocks are not
    calls but text, streamed or not; calls forced by constrained decoding are
    written, and read, as hermes whatever the parser."""
    d = start_daemon(["--model", default_model(), "--tool-call-parser", "mistral", "--no-warmup"])
    c = openai.OpenAI(base_url=d.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    kw = dict(model=daemon_model(d), messages=FEW_SHOT, tools=[WEATHER], max_tokens=100, **GREEDY)
    r = c.chat.completions.create(**kw).choices[0]
    assert r.message.tool_calls is None and r.finish_reason == "stop"
    assert r.message.content.startswith("<tool_call>") and "Madrid" in r.message.content
    content, calls, finish, _ = streamed(c, **kw)
    assert (content, calls, finish) == (r.message.content, {}, "stop")
    forced = c.chat.completions.create(**{**kw, "tool_choice": "required", "parallel_tool_calls": False}).choices[0]
    assert forced.finish_reason == "tool_calls"
    assert [t.function.name for t in forced.message.tool_calls] == ["get_weather"]


def test_tool_result_reaches_the_model(daemon, client):
    messages = [ask(["Madrid"]), calls_turn("Madrid"),
                {"role": "tool", "tool_call_id": "call_0", "content": "Sunny, 31 degrees"}]
    r = client.chat.completions.create(model=daemon_model(daemon), messages=messages, tools=[WEATHER], max_tokens=40,
                                       **GREEDY)
    assert "31 degrees" in r.choices[0].message.content


def test_cut_off_call_is_content(daemon, client):
    """A call cut by max_tokens never closes: it comes back as text, not lost and not a 500."""
    kw = dict(model=daemon_model(daemon), messages=FEW_SHOT, tools=[WEATHER], max_tokens=8, **GREEDY)
    r = client.chat.completions.create(**kw)
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content.startswith("<tool_call>")
    content, calls, finish, _ = streamed(client, **kw)
    assert (content, calls, finish) == (r.choices[0].message.content, {}, "length")


def test_parallel_tool_calls_false_returns_the_first_call(daemon, client):
    kw = dict(model=daemon_model(daemon), messages=FEW_SHOT_PARALLEL, tools=[WEATHER], max_tokens=100,
              parallel_tool_calls=False, **GREEDY)
    r = client.chat.completions.create(**kw)
    assert [json.loads(t.function.arguments) for t in r.choices[0].message.tool_calls] == [{"city": "Berlin"}]
    assert r.choices[0].finish_reason == "tool_calls"
    content, calls, finish, _ = streamed(client, **kw)
    assert (content, len(calls), finish) == ("", 1, "tool_calls")


# ---- calls forced by tool_choice required / a named function ----
# No few-shot turns: the grammar alone makes the model's output calls.

CITY = {"type": "object", "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 30},
                                         "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}
STRICT_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city", "parameters": CITY, "strict": True}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a time zone",
    "parameters": {"type": "object", "properties": {"utc_offset": {"type": "integer"},
                                                    "label": {"type": "string", "maxLength": 20}},
                   "required": ["utc_offset"], "additionalProperties": False}}}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (STRICT_WEATHER, TIME)}


def check_calls(calls):
    """Each call names a given tool and its arguments validate against that tool's schema."""
    assert calls
    for call in calls:
        jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])


@pytest.mark.parametrize("choice,one", [
    ("required", False),
    ({"type": "function", "function": {"name": "get_time"}}, True),
], ids=["required", "named"])
def test_forced_calls_validate_streaming_and_not(daemon, client, choice, one):
    kw = dict(model=daemon_model(daemon), messages=[ask(["Paris"])], tools=[STRICT_WEATHER, TIME],
              tool_choice=choice, max_tokens=150, **GREEDY)
    r = client.chat.completions.create(**kw)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    assert c.message.content is None
    calls = [{"name": t.function.name, "arguments": t.function.arguments} for t in c.message.tool_calls]
    check_calls(calls)
    if one:
        assert [t["name"] for t in calls] == ["get_time"]
    assert all(t.id.startswith("call_") and t.type == "function" for t in c.message.tool_calls)
    assert len({t.id for t in c.message.tool_calls}) == len(calls)
    if choice == "required":  # strict: the properties in their declared order
        for t in calls:
            if t["name"] == "get_weather":
                assert list(json.loads(t["arguments"])) == ["city", "unit"]

    # Streamed: the same calls, each opening with its id, type and name.
    content, scalls, finish, heads = streamed(client, **kw)
    assert (content, finish) == ("", "tool_calls")
    assert [scalls[i] for i in sorted(scalls)] == calls
    assert [(i, tp, name, args) for i, _, tp, name, args in heads] == [
        (i, "function", t["name"], "") for i, t in enumerate(calls)]

    # Sampled, several choices: each one valid calls.
    r = client.chat.completions.create(**{**kw, "temperature": 1.0, "seed": 11, "n": 3})
    for c in r.choices:
        assert c.finish_reason in ("tool_calls", "length")
        if c.finish_reason == "tool_calls":
            check_calls([{"name": t.function.name, "arguments": t.function.arguments} for t in c.message.tool_calls])
            assert not one or len(c.message.tool_calls) == 1


def test_strict_tool_under_auto(daemon, client):
    """auto with a strict tool: the text stays free, and a call the model writes
    is held to the tool's schema (here a second required property the few-shot
    calls never had), streaming and not."""
    kw = dict(model=daemon_model(daemon), messages=FEW_SHOT, tools=[STRICT_WEATHER], max_tokens=100, **GREEDY)
    r = client.chat.completions.create(**kw)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    calls = [{"name": t.function.name, "arguments": t.function.arguments} for t in c.message.tool_calls]
    check_calls(calls)
    assert [json.loads(t["arguments"])["city"] for t in calls] == ["Madrid"]
    content, scalls, finish, _ = streamed(client, **kw)
    assert (content, finish) == ("", "tool_calls")
    assert [scalls[i] for i in sorted(scalls)] == calls
    # A question the model answers in text is still answered in text.
    r = client.chat.completions.create(model=daemon_model(daemon), messages=[{"role": "user", "content": "Say hello."}],
                                       tools=[STRICT_WEATHER], max_tokens=12, **GREEDY)
    c = r.choices[0]
    assert c.message.content or c.message.tool_calls
    for t in c.message.tool_calls or []:
        jsonschema.validate(json.loads(t.function.arguments), SCHEMAS[t.function.name])


# ---- a chat template given by the operator: DeepSeek's DSML calls ----
# Written for this test: ChatML turns whose assistant calls are DSML blocks, as
# DeepSeek-V4's encoding writes them. The template spells ｜DSML｜, so the
# deepseek_v4 parser is the one detected; after three such turns SmolLM2-135M
# answers the next question with a DSML block too (at temperature 0).
DSML_TEMPLATE = """\
{%- if tools %}<|im_start|>system
You can call these functions. To call one, answer with a DSML block.
{% for t in tools %}{{ t | tojson }}
{% endfor %}<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'tool' %}<|im_start|>tool
{{ m.content }}<|im_end|>
{% else %}<|im_start|>{{ m.role }}
{% if m.content %}{{ m.content }}{% endif %}
{%- if m.tool_calls %}<｜DSML｜tool_calls>
{% for c in m.tool_calls %}<｜DSML｜invoke name="{{ c.function.name }}">
{% for k, v in c.function.arguments.items() %}<｜DSML｜parameter name="{{ k }}" string="true">{{ v }}</｜DSML｜parameter>
{% endfor %}</｜DSML｜invoke>
{% endfor %}</｜DSML｜tool_calls>{% endif %}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}
"""


def test_a_chat_template_file_replaces_the_models_and_its_dsml_calls_are_read(start_daemon, tmp_path):
    path = tmp_path / "dsml.jinja"
    path.write_text(DSML_TEMPLATE)
    d = start_daemon(["--model", default_model(), "--chat-template", str(path), "--no-warmup"])
    # The template renders the tool turns: a call as DSML, its result as a tool turn.
    text = rendered_prompt(d, messages=ROUND_TRIP, tools=[WEATHER])
    assert ('<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">Paris'
            '</｜DSML｜parameter>\n</｜DSML｜invoke>') in text, text
    assert "<|im_start|>tool\n22 C and sunny<|im_end|>" in text, text

    c = openai.OpenAI(base_url=d.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    shots = [ask(["Paris"]), calls_turn("Paris"), ask(["Rome"]), calls_turn("Rome"), ask(["Oslo"]),
             calls_turn("Oslo")]
    for messages, cities in ((shots + [ask(["Madrid"])], ["Madrid"]),
                             # Three shots: with two, the model's text on some CPUs' rounding
                             # ends after the last invoke without closing the block (text, as vLLM reads it).
                             (FEW_SHOT_PARALLEL[:4] + [ask(["Cairo", "Quito"]), calls_turn("Cairo", "Quito"),
                                                       ask(["Berlin", "Vienna"])], ["Berlin", "Vienna"])):
        kw = dict(model=daemon_model(d), messages=messages, tools=[WEATHER], max_tokens=300, **GREEDY)
        r = c.chat.completions.create(**kw).choices[0]
        assert r.finish_reason == "tool_calls", r
        assert r.message.content is None
        assert [(t.function.name, json.loads(t.function.arguments)) for t in r.message.tool_calls] == [
            ("get_weather", {"city": city}) for city in cities]
        content, scalls, finish, _ = streamed(c, **kw)
        assert (content, finish) == ("", "tool_calls")
        assert [scalls[i] for i in sorted(scalls)] == [
            {"name": t.function.name, "arguments": t.function.arguments} for t in r.message.tool_calls]


def test_a_chat_template_file_that_cannot_be_read_or_used_fails_the_load(start_daemon, tmp_path):
    missing = tmp_path / "missing.jinja"
    d = start_daemon(["--model", default_model(), "--chat-template", str(missing), "--no-warmup"], wait_state=None)
    assert d.wait(60) == 1
    assert f"{missing}: cannot read the chat template" in d.output()
    bad = tmp_path / "bad.jinja"
    bad.write_text("{{ messages[0].content }}\n{% include 'other.jinja' %}\n")
    d = start_daemon(["--model", default_model(), "--chat-template", str(bad), "--no-warmup"], wait_state=None)
    assert d.wait(60) == 1
    assert f"{bad}" in d.output() and "line 2" in d.output(), d.output()[-2000:]
