#!/usr/bin/env python3
"""Writes tests/golden/chat_templates.json: chat templates rendered by Python's
jinja2 in the environment transformers renders them in, for inferd's Jinja
engine (engine/jinja) to reproduce byte for byte.

  python3 tools/make_chat_template_golden.py [--model PATH] [--out tests/golden/chat_templates.json]

Templates: the default model's own `tokenizer.chat_template` (read from the
GGUF; the test reads it from there too) and the ones in
tests/golden/chat_templates/, written for these tests in the styles real
models use. Each is rendered over every conversation below with
add_generation_prompt on and off, and for templates that read
`enable_thinking` with it unset, true and false before the generation prompt. A template that does not read
`tools` gets only the cases without tools or tool calls (inferd writes those in
its own Hermes layout, checked by the unit tests).

The context is what transformers' apply_chat_template passes (messages, tools,
documents, add_generation_prompt, bos_token, eos_token, chat_template_kwargs),
with the messages as an OpenAI client sends them and the calls' arguments
parsed into objects, as vLLM and llama.cpp's server do. strftime_now formats a
fixed time (noon UTC, so the date is the same in every time zone). A case the
template refuses records jinja2's error message instead of the text.
"""
import argparse
import json
import os
import time

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.sandbox

NOW = 1767268800  # 2026-01-01 12:00:00 UTC
BOS, EOS = "<s>", "</s>"
HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE_DIR = os.path.join(HERE, "..", "tests", "golden", "chat_templates")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city, today.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "Name, e.g. Zürich"},
                                                    "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Local time.",
                                         "parameters": {"type": "object", "properties": {}}}}


def call(name, **args):
    return {"name": name, "arguments": args}


def tool_result(content, call_id):
    return {"role": "tool", "content": content, "tool_call_id": call_id}


# (name, messages, tools); a message's tool_calls as {"name", "arguments"}.
CASES = [
    ("user", [{"role": "user", "content": "Hi"}], None),
    ("system", [{"role": "system", "content": "  Be terse.\n"}, {"role": "user", "content": "Hi there"}], None),
    ("multi_turn", [{"role": "system", "content": "S"}, {"role": "user", "content": "What is 2+2?"},
                    {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}], None),
    ("unicode", [{"role": "user", "content": "héllo 日本語 🙂 <|im_end|> [INST]\ttab"},
                 {"role": "assistant", "content": "Grüße\n\n"}, {"role": "user", "content": "ok"}], None),
    ("empty", [{"role": "user", "content": ""}, {"role": "assistant", "content": ""},
               {"role": "user", "content": "   "}], None),
    ("thinking", [{"role": "user", "content": "Think."},
                  {"role": "assistant", "content": "<think>\nstep one\n</think>\n\nDone."},
                  {"role": "user", "content": "Again"}], None),
    ("tools_offered", [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather?"}],
     [WEATHER, TIME]),
    ("tool_calls", [{"role": "user", "content": "Weather in Paris and Rome?"},
                    {"role": "assistant", "content": "", "tool_calls": [call("get_weather", city="Paris"),
                                                                        call("get_weather", city="Rome", unit="c")]},
                    tool_result("22 C", "call_1"), tool_result("25 C", "call_2"),
                    {"role": "assistant", "content": "Both warm."}], [WEATHER]),
    ("roles_repeat", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], None),
    ("one_call", [{"role": "system", "content": "Sys"}, {"role": "user", "content": "Time in Köln?"},
                  {"role": "assistant", "content": "Checking.", "tool_calls": [call("get_time")]},
                  tool_result("{\"time\": \"12:00\"}", "abc123XYZ")], [TIME]),
]


def openai_message(m):
    out = {"role": m["role"], "content": m["content"]}
    if m.get("tool_calls"):
        out["tool_calls"] = [{"type": "function", "function": c} for c in m["tool_calls"]]
    if m.get("tool_call_id"):
        out["tool_call_id"] = m["tool_call_id"]
    return out


def environment():
    # As transformers' _compile_jinja_template sets it up.
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return time.strftime(fmt, time.localtime(NOW))

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def model_template(path):
    import gguf
    reader = gguf.GGUFReader(path)
    field = reader.fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.environ.get("INFERD_MODEL", os.path.expanduser(
        "~/.cache/inferd/models/SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "golden", "chat_templates.json"))
    args = ap.parse_args()

    os.environ["TZ"] = "UTC"
    time.tzset()
    env = environment()
    templates = [("default-model", model_template(args.model))]
    for name in sorted(os.listdir(TEMPLATE_DIR)):
        with open(os.path.join(TEMPLATE_DIR, name), encoding="utf-8") as f:
            templates.append((name, f.read()))

    out = []
    for tname, source in templates:
        names = jinja2.meta.find_undeclared_variables(env.parse(source))
        compiled = env.from_string(source)
        for cname, messages, tools in CASES:
            if "tools" not in names and (tools or any(m.get("tool_calls") for m in messages)):
                continue
            for gen in (True, False):
                # The switch matters where the generation prompt is written.
                for think in [None, True, False] if gen and "enable_thinking" in names else [None]:
                    ctx = {"messages": [openai_message(m) for m in messages], "tools": tools, "documents": None,
                           "add_generation_prompt": gen, "bos_token": BOS, "eos_token": EOS}
                    case = {"template": tname, "conversation": cname, "add_generation_prompt": gen}
                    if think is not None:
                        ctx["enable_thinking"] = case["enable_thinking"] = think
                    try:
                        case["expected"] = compiled.render(**ctx)
                    except jinja2.exceptions.TemplateError as e:
                        case["error"] = str(e)
                    out.append(case)
    # The conversations as inferd's ChatMessage holds them: arguments as JSON text.
    conversations = {}
    for cname, messages, tools in CASES:
        conversations[cname] = {
            "messages": [dict(m, tool_calls=[{"name": c["name"], "arguments": json.dumps(c["arguments"])}
                                             for c in m["tool_calls"]]) if m.get("tool_calls") else m
                         for m in messages],
            "tools": [json.dumps(t) for t in tools or []]}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"now": NOW, "bos_token": BOS, "eos_token": EOS, "conversations": conversations, "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(out)} cases -> {args.out}")


if __name__ == "__main__":
    main()
