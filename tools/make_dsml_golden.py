#!/usr/bin/env python3
"""Writes tests/golden/dsml_outputs.json: DeepSeek's DSML tool calls and
DeepSeek-V4's thinking split as vLLM reads them, the reference
daemon/dsml_tool_parser.cpp and the deepseek_v4 reasoning format
(daemon/reasoning_parser.cpp) are checked against.

Each case is a model output and a parser: `deepseek_v4` with chat_template_kwargs
{"thinking": true|false} (reasoning and tool calls, one parser in vLLM), or
`deepseek_v32` (tool calls only). vLLM's answer is recorded as reasoning,
content and calls (name, arguments as a JSON value).

The cases are well-formed outputs, where inferd means to agree with vLLM. Where
inferd differs on purpose it is not recorded here but tested by hand in
tests/unit/test_output_parsers.cpp: an unfinished or malformed block is
content (vLLM emits what it parsed so far), text after a block is content
(vLLM drops it), and content keeps no whitespace next to a block (vLLM keeps
it: the test compares content with the ends trimmed).

Needs vLLM's Python sources and the packages its parser modules import, not its
GPU stack:
    pip download vllm==0.34.0 --no-deps -d /tmp/vllm && unzip -q /tmp/vllm/*.whl -d /tmp/vllm/src
    pip install --user xgrammar psutil pyzmq aiohttp fastapi pillow pybase64 cachetools \
        prometheus_client openai_harmony cbor2 msgspec uvloop py-cpuinfo partial_json_parser
(torch, transformers and pydantic must import too.)

Usage: VLLM_SRC=/tmp/vllm/src tools/make_dsml_golden.py [out path]
"""
import json
import os
import sys

sys.path.insert(0, os.environ.get("VLLM_SRC", "/tmp/vllm/src"))

from vllm.parser.deepseek_v32 import DeepSeekV32Parser  # noqa: E402
from vllm.parser.deepseek_v4 import DeepSeekV4Parser  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "golden",
                                                         "dsml_outputs.json")


class NoVocab:
    """The parsers find tags in text; without a vocabulary they never look for ids."""

    def get_vocab(self):
        return {}


D = "｜DSML｜"


def param(name, value, string):
    return f'<{D}parameter name="{name}" string="{string}">{value}</{D}parameter>'


def invoke(name, *params):
    return f'<{D}invoke name="{name}">\n' + "\n".join(params) + f"\n</{D}invoke>"


def block(*invokes, wrapper="tool_calls"):
    return f"<{D}{wrapper}>\n" + "\n".join(invokes) + f"\n</{D}{wrapper}>"


WEATHER = invoke("get_weather", param("location", "杭州", "true"), param("date", "2024-01-16", "true"))
TYPED = invoke("set", param("n", "5", "false"), param("x", "2.5", "false"), param("ok", "true", "false"),
               param("tags", '["a", "b"]', "false"), param("opt", '{"k": [1, {"z": null}]}', "false"),
               param("none", "null", "false"))
ODD = invoke("echo", param("text", 'line one\nline "two" <b> & \\ end', "true"), param("num_as_text", "42", "true"),
             param("bad_json", "not json", "false"), param("empty", "", "true"))
NO_ARGS = f'<{D}invoke name="ping">\n</{D}invoke>'
V4_CASES = [
    # Thinking on (the default): the prompt ends with <think>.
    (True, "Let me think.\n</think>\n\nThe answer is 4."),
    (True, "<think>Opened again.</think>Four."),
    (True, "Still thinking, never closed"),
    (True, "Checking the weather.</think>\n\n" + block(WEATHER)),
    (True, "I need a tool.\n\n" + block(WEATHER)),  # the block ends the reasoning by itself
    (True, "plan</think>Calling two.\n\n" + block(WEATHER, TYPED)),
    (True, "</think>" + block(ODD)),
    (True, "</think>" + block(NO_ARGS)),
    # Thinking off: the prompt ends with </think>.
    (False, "Plain answer, no tags."),
    (False, "<think>short</think>Answer."),
    (False, block(WEATHER)),
    (False, "Sure.\n\n" + block(TYPED, ODD)),
    (False, "Text with a stray </thi and <｜DSML｜ that are not tags."),
]
V32_CASES = [
    "No calls here.",
    "Calling.\n\n" + block(WEATHER, NO_ARGS, wrapper="function_calls"),
    block(TYPED, wrapper="function_calls"),
]


def run(parser, text):
    reasoning, content, info = parser._single_pass_parse(text, [])
    calls = [{"name": c.function.name, "arguments": json.loads(c.function.arguments)} for c in info.tool_calls]
    return {"reasoning": reasoning or "", "content": content or "", "calls": calls}


cases = []
for thinking, text in V4_CASES:
    p = DeepSeekV4Parser(NoVocab(), None, chat_template_kwargs={"thinking": thinking})
    cases.append({"parser": "deepseek_v4", "thinking": thinking, "output": text, **run(p, text)})
for text in V32_CASES:
    cases.append({"parser": "deepseek_v32", "thinking": False, "output": text,
                  **run(DeepSeekV32Parser(NoVocab(), None), text)})

with open(OUT, "w", encoding="utf-8") as f:
    json.dump({"reference": "vllm 0.34.0, vllm/parser/deepseek_v4.py and deepseek_v32.py", "cases": cases}, f,
              ensure_ascii=False, indent=1)
    f.write("\n")
print(f"{len(cases)} cases -> {OUT}")
