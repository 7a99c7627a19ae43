#!/usr/bin/env python3
"""Writes tests/golden/dsv4_template.json: prompts rendered by vLLM's DeepSeek-V4
encoding (vllm/tokenizers/deepseek_v4_encoding.py, read from a vLLM wheel), for
the unit test that renders the same conversations with inferd's built-in V4
template (engine/deepseek_v4_template.cpp) and requires the same text.

    tools/make_dsv4_template_golden.py --wheel vllm-0.34.0-...whl

The options map onto the encoding as vLLM's V4 tokenizer maps a request's:
thinking on unless the request turns it off, reasoning effort "high" when
thinking, request tools attached to the first system message (an empty one is
put first when there is none), reasoning of earlier turns dropped unless tools
are given. Conversations are written as inferd's ChatMessage holds them: role,
content, tool_calls (name, arguments as JSON text), tool_call_id,
reasoning_content. Every conversation that ends in a user or system message is
rendered with add_generation_prompt, which the encoding always implies.
"""
import argparse
import copy
import json
import pathlib
import types
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENCODING = "vllm/tokenizers/deepseek_v4_encoding.py"


def load_encoding(wheel):
    with zipfile.ZipFile(wheel) as z:
        source = z.read(ENCODING).decode()
    mod = types.ModuleType("deepseek_v4_encoding")
    exec(compile(source, ENCODING, "exec"), mod.__dict__)
    return mod


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Zürich"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Searches the web.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "limit": {"type": "integer"}, "filters": {"type": "object"}},
        "required": ["query"]}}}


def call(name, args):
    return {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}


U = lambda text: {"role": "user", "content": text}
A = lambda text, **kw: {"role": "assistant", "content": text, **kw}
S = lambda text: {"role": "system", "content": text}
T = lambda text, cid: {"role": "tool", "content": text, "tool_call_id": cid}

CASES = [
    ("reasoning effort max", [U("Hello!")], dict(reasoning_effort="max")),
    ("reasoning effort medium", [U("Hello!")], dict(reasoning_effort="medium")),
    ("reasoning effort none turns thinking off", [U("Hello!")], dict(reasoning_effort="none")),
    ("plain, thinking off", [U("Hello!")], dict(thinking=False)),
    ("plain, thinking by default", [U("Hello!")], dict()),
    ("system, thinking off", [S("You are a concise assistant."), U("What is 2+2?")], dict(thinking=False)),
    ("system, thinking on", [S("You are a concise assistant."), U("What is 2+2?")], dict(thinking=True)),
    ("multi-turn, thinking off",
     [S("Be brief."), U("Hi"), A("Hello! How can I help?"), U("Tell me a joke.")], dict(thinking=False)),
    ("multi-turn, thinking on, earlier reasoning dropped",
     [U("What is 3*7?"), A("21.", reasoning_content="3 times 7 is 21."), U("And 4*8?")], dict(thinking=True)),
    ("conversation ending in an assistant turn, thinking off",
     [U("Name a colour."), A("Blue.")], dict(thinking=False, add_generation_prompt=False)),
    ("ending in an assistant turn after the last user turn keeps its reasoning",
     [U("Name a colour."), A("Blue.", reasoning_content="Any colour will do.")],
     dict(thinking=True, add_generation_prompt=False)),
    ("tools without a system message, thinking off",
     [U("Weather in Paris?")], dict(thinking=False, tools=[WEATHER])),
    ("tools with a system message, thinking on",
     [S("You help with travel."), U("Weather in Paris?")], dict(thinking=True, tools=[WEATHER, SEARCH])),
    ("tool call and result with tools, thinking on: reasoning kept in every turn",
     [S("You help with travel."), U("Weather in Paris?"),
      A("", reasoning_content="I should call get_weather.",
        tool_calls=[call("get_weather", {"city": "Paris", "unit": "celsius"})]),
      T('{"temperature": 21, "sky": "clear"}', "call_0")],
     dict(thinking=True, tools=[WEATHER])),
    ("two calls with typed arguments, results merged with a following user message, thinking off",
     [U("Find news and weather."),
      A("Let me look.", tool_calls=[
          call("search", {"query": "news 今日", "limit": 3, "filters": {"lang": "en", "safe": True},
                          "tags": ["a", "b"], "score": 0.5, "none": None}),
          call("get_weather", {"city": "São Paulo"})]),
      T("Headline: all quiet.", "call_1"), T("28 degrees", "call_2"), U("Summarise both."),
      ], dict(thinking=False, tools=[WEATHER, SEARCH])),
    ("assistant tool calls without request tools, thinking on: earlier reasoning dropped",
     [U("Weather?"), A("", reasoning_content="Need the tool.", tool_calls=[call("get_weather", {"city": "Oslo"})]),
      T("-3 degrees", "call_0"), A("It is -3 degrees in Oslo.", reasoning_content="Report it."), U("Thanks!")],
     dict(thinking=True)),
    ("consecutive user messages and unicode, thinking off",
     [U("第一段：你好。"), U("Second part — «quoted» ✨"), A("Noted: こんにちは"), U("<｜User｜> typed as text")],
     dict(thinking=False)),
    ("a trailing system message opens the assistant turn",
     [U("Hi"), A("Hello."), S("Answer in French from now on.")], dict(thinking=True)),
]


def to_encoding(messages, opts):
    """The encoding's input for a conversation as inferd holds it, with vLLM's option mapping."""
    out = []
    for m in messages:
        m = copy.deepcopy(m)
        if "tool_calls" in m:
            m["tool_calls"] = [{"type": "function", "function": c} for c in m["tool_calls"]]
        if "reasoning_content" in m:
            m["reasoning"] = m.pop("reasoning_content")
        out.append(m)
    thinking = opts.get("thinking", True)
    tools = opts.get("tools")
    if tools:
        i = next((i for i, m in enumerate(out) if m["role"] == "system"), None)
        if i is None:
            out.insert(0, {"role": "system"})
            i = 0
        out[i]["tools"] = tools
    # vLLM's mapping of the request's reasoning_effort (vllm/tokenizers/deepseek_v4.py).
    effort = opts.get("reasoning_effort")
    mode = "thinking" if thinking else "chat"
    if effort is None:
        effort = "high" if thinking else None
    elif effort == "none":
        mode, effort = "chat", None
    elif effort in ("low", "minimal", "medium"):
        effort = "low"
    elif effort != "max":
        effort = "high"
    return out, dict(thinking_mode=mode, drop_thinking=True, reasoning_effort=effort)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wheel", required=True, help="a vLLM wheel holding " + ENCODING)
    a = ap.parse_args()
    enc = load_encoding(a.wheel)
    cases = []
    for name, messages, opts in CASES:
        msgs, kw = to_encoding(messages, opts)
        prompt = enc.encode_messages(msgs, **kw)
        case = dict(name=name, messages=messages,
                    add_generation_prompt=opts.get("add_generation_prompt", True),
                    tools=[json.dumps(t, ensure_ascii=False) for t in opts.get("tools", [])],
                    prompt=prompt)
        for key in ("thinking", "reasoning_effort"):
            if key in opts:
                case[key] = opts[key]
        cases.append(case)
    out = ROOT / "tests/golden/dsv4_template.json"
    out.write_text(json.dumps(dict(source=ENCODING + " (vLLM 0.34.0)", cases=cases), ensure_ascii=False, indent=1) + "\n")
    print(f"{out}: {len(cases)} cases")


if __name__ == "__main__":
    main()
