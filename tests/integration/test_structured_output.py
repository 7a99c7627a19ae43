"""Structured output: response_format json_object and json_schema, enforced by
constrained decoding, through the official `openai` client, streaming and not.
Every output is validated with the `jsonschema` package; schemas the server
cannot enforce get a 400 naming the field.
"""
import concurrent.futures
import json

import jsonschema
import openai
import pytest
import requests

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 40},
        "age": {"type": "integer"},
        "email": {"anyOf": [{"type": "string", "maxLength": 60}, {"type": "null"}]},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["admin", "user", "guest"]},
                 "minItems": 1, "maxItems": 3},
        "address": {"$ref": "#/$defs/Address"},
    },
    "required": ["name", "age", "email", "tags", "address"],
    "additionalProperties": False,
    "$defs": {
        "Address": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}, "zip": {"type": ["integer", "null"]},
                           "verified": {"type": "boolean"}},
            "required": ["city", "zip", "verified"],
            "additionalProperties": False,
        }
    },
}

PROMPTS = [
    "Describe a fictional person as JSON.",
    "Give me a customer record for Maria from Lisbon.",
    "Invent a user account for a bakery owner in Oslo.",
    "Return a JSON profile of a retired teacher.",
]


@pytest.fixture(scope="module")
def client(serving_daemon):
    return openai.OpenAI(base_url=serving_daemon.url + "/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def model_name(serving_daemon):
    return serving_daemon.get("/v1/models").json()["data"][0]["id"]


def person_format(strict=True):
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": strict}}


def generate(client, model, prompt, stream, **kw):
    """(text, finish_reason) of one chat completion."""
    kw.setdefault("max_tokens", 400)
    args = dict(model=model, messages=[{"role": "user", "content": prompt}], **kw)
    if not stream:
        r = client.chat.completions.create(**args)
        return r.choices[0].message.content, r.choices[0].finish_reason
    text, finish = "", None
    for chunk in client.chat.completions.create(stream=True, **args):
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    return text, finish


def test_json_schema_outputs_validate_streaming_and_not(client, model_name):
    # 16 requests, four at a time (batched), greedy and sampled, streaming and not.
    jobs = []
    for i in range(16):
        sampling = {"temperature": 0.0} if i % 4 < 2 else {"temperature": 0.8, "seed": i}
        jobs.append((PROMPTS[i % len(PROMPTS)], i % 2 == 1, sampling, i % 8 < 6))
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(
            lambda j: generate(client, model_name, j[0], j[1], response_format=person_format(j[3]), **j[2]), jobs))
    for (prompt, stream, sampling, strict), (text, finish) in zip(jobs, results):
        assert finish == "stop", (prompt, stream, sampling, text)
        value = json.loads(text)
        jsonschema.validate(value, PERSON)
        if strict:  # strict: properties in declared order
            assert list(value) == list(PERSON["properties"]), text


def test_json_object_is_any_object(client, model_name):
    for stream in (False, True):
        text, finish = generate(client, model_name, "List three fruits and their colours as JSON.", stream,
                                response_format={"type": "json_object"}, temperature=0.0)
        assert finish == "stop", text
        assert isinstance(json.loads(text), dict), text


def test_completions_and_n_choices_follow_the_schema(serving_daemon, client, model_name):
    # Completions take response_format too; each of n choices has its own grammar state.
    r = client.completions.create(model=model_name, prompt="A person record in JSON: ", max_tokens=300,
                                  temperature=0.8, seed=7, n=2, extra_body={"response_format": person_format()})
    assert len(r.choices) == 2
    for c in r.choices:
        assert c.finish_reason == "stop", c.text
        jsonschema.validate(json.loads(c.text), PERSON)


def test_recursive_schema(client, model_name):
    tree = {"$ref": "#/$defs/topic", "$defs": {"topic": {
        "type": "object",
        "properties": {"title": {"type": "string", "maxLength": 30},
                       "subtopics": {"type": "array", "items": {"$ref": "#/$defs/topic"}, "maxItems": 2}},
        "required": ["title", "subtopics"], "additionalProperties": False}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "topic", "schema": tree, "strict": True}}
    # Nothing bounds the nesting but the model: on some CPUs' rounding it nests
    # "cooking" past 600 tokens, so each prompt's text is checked where it ends,
    # and most must end.
    ended = 0
    prompts = ["Outline the topic of cooking as a tree.", "A small tree of topics about dogs.",
               "Give a two-level outline of the topic of music."]
    for prompt in prompts:
        for stream in (False, True):
            text, finish = generate(client, model_name, prompt, stream,
                                    response_format=fmt, temperature=0.0, max_tokens=600)
            assert finish in ("stop", "length"), text
            if finish == "stop":
                ended += 1
                jsonschema.validate(json.loads(text), tree)
            else:
                assert text.lstrip().startswith("{"), text  # cut off inside the grammar
    assert ended >= 4, ended


def test_max_tokens_still_ends_a_constrained_output(client, model_name):
    text, finish = generate(client, model_name, PROMPTS[0], False, response_format=person_format(),
                            temperature=0.0, max_tokens=5)
    assert finish == "length"
    assert text.startswith("{"), text


@pytest.mark.parametrize("schema,param,keyword", [
    ({"type": "object", "properties": {"x": {"type": "string", "pattern": "^a+$"}}},
     "response_format.json_schema.schema.properties.x.pattern", "pattern"),
    ({"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}},
     "response_format.json_schema.schema.properties.n.minimum", "minimum"),
    ({"type": "object", "properties": {"u": {"anyOf": [{"type": "object"}, {"type": "object"}]}}},
     "response_format.json_schema.schema.properties.u.anyOf", "anyOf"),
])
def test_unsupported_schema_is_a_400_naming_the_field(serving_daemon, client, model_name, schema, param, keyword):
    body = {"model": model_name, "messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}}
    r = requests.post(serving_daemon.url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param
    assert keyword in err["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_name, messages=body["messages"],
                                       response_format=body["response_format"])
    assert param in str(e.value)
