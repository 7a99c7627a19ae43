"""A Hugging Face checkpoint directory served by the real daemon: the tiny random
Llama of tests/golden/hf-tiny (tools/make_hf_golden.py), named by --model or by
the configuration file's [model] path, answers completions and chat completions
through the `openai` client; a checkpoint inferd cannot run is refused at load
with the file and key named, a chat template it cannot render with the line and
construct. Two tensor-parallel ranks on the checkpoint give the
single rank's greedy text. A directory with a SentencePiece-style tokenizer.json
(tests/golden/hf-spm-tiny, tools/make_hf_spm_fixture.py) tokenizes as the
`tokenizers` library does and generates transformers' greedy tokens."""
import json
import shutil
import subprocess

import openai
import pytest

from conftest import INFERD, SRC, Daemon, free_port, two_rank_group

TINY = SRC / "tests" / "golden" / "hf-tiny"
# The checkpoint's trained context is 256 tokens.
SHAPES = ["--max-model-len", "256", "--max-num-batched-tokens", "128", "--max-num-seqs", "4"]


def client(d):
    return openai.OpenAI(base_url=d.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_serves_completion_and_chat(start_daemon):
    d = start_daemon(["--model", str(TINY)] + SHAPES)
    c = client(d)
    assert [m.id for m in c.models.list().data] == ["hf-tiny"]
    r = c.completions.create(model="hf-tiny", prompt="The quick brown fox", max_tokens=8, temperature=0)
    assert r.usage.completion_tokens == 8
    assert r.usage.prompt_tokens == 4  # "The", " quick", " brown", " fox"
    assert r.choices[0].finish_reason == "length"
    again = c.completions.create(model="hf-tiny", prompt="The quick brown fox", max_tokens=8, temperature=0)
    assert again.choices[0].text == r.choices[0].text  # greedy is deterministic
    chat = c.chat.completions.create(model="hf-tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=6,
                                     temperature=0)
    assert chat.choices[0].message.role == "assistant"
    assert chat.usage.completion_tokens >= 1
    # ChatML from chat_template.jinja: system turn added, then user, then the assistant's header.
    assert chat.usage.prompt_tokens > 10


def test_sentencepiece_tokenizer_json(start_daemon):
    spm = SRC / "tests" / "golden" / "hf-spm-tiny"
    golden = json.loads((SRC / "tests" / "golden" / "hf_spm_tiny.json").read_text())
    d = start_daemon(["--model", str(spm)] + SHAPES)
    for case in golden["tokenize"]:
        r = d.post("/tokenize", json={"prompt": case["text"], "add_special_tokens": True})
        assert r.status_code == 200, r.text
        assert r.json()["tokens"] == case["ids"], case["text"]
    for case in golden["cases"]:  # the prompt's ids include the BOS, which the daemon adds itself
        r = client(d).completions.create(model="hf-spm-tiny", prompt=case["prompt"], max_tokens=len(case["greedy"]),
                                         temperature=0, extra_body={"ignore_eos": True})
        assert r.usage.prompt_tokens == len(case["ids"])
        want = d.post("/detokenize", json={"tokens": case["greedy"]}).json()["prompt"]
        assert r.choices[0].text == want, case["prompt"]


def test_config_file_model_path(start_daemon, tmp_path):
    cfg = tmp_path / "inferd.toml"
    cfg.write_text(f'[model]\npath = "{TINY}/"\n')
    d = start_daemon(["--config", str(cfg), "--no-warmup"] + SHAPES)
    c = client(d)
    assert [m.id for m in c.models.list().data] == ["hf-tiny"]
    r = c.completions.create(model="hf-tiny", prompt="Hello", max_tokens=3, temperature=0)
    assert r.usage.completion_tokens == 3


def test_unsupported_checkpoint_is_refused(tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(TINY, bad)
    cfg = (bad / "config.json").read_text().replace('"LlamaForCausalLM"', '"GPT2LMHeadModel"')
    (bad / "config.json").write_text(cfg)
    r = subprocess.run([str(INFERD), "--host", "127.0.0.1", "--port", str(free_port()), "--model", str(bad), "--no-warmup"]
                       + SHAPES, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "config.json" in out and "'architectures'" in out and "GPT2LMHeadModel" in out, out[-4000:]


def test_template_with_an_unsupported_construct_is_refused(tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(TINY, bad)
    (bad / "chat_template.jinja").write_text("{% for m in messages %}\n{{ m.content | wordwrap(10) }}{% endfor %}")
    r = subprocess.run([str(INFERD), "--host", "127.0.0.1", "--port", str(free_port()), "--model", str(bad), "--no-warmup"]
                       + SHAPES, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "tokenizer.chat_template line 2: filter 'wordwrap' is not supported" in out and str(bad) in out, out[-4000:]


def test_tensor_parallel_ranks_match_one():
    prompts = ["The quick brown fox", "Hello, world"]
    one = Daemon(["--model", str(TINY), "--no-warmup", "--threads", "1"] + SHAPES, wait_state="Serving")
    try:
        want = [client(one).completions.create(model="hf-tiny", prompt=p, max_tokens=8,
                                               temperature=0).choices[0].text for p in prompts]
    finally:
        one.stop()
    with two_rank_group(["--model", str(TINY), "--no-warmup", "--threads", "1"] + SHAPES) as head:
        got = [client(head).completions.create(model="hf-tiny", prompt=p, max_tokens=8,
                                               temperature=0).choices[0].text for p in prompts]
    assert got == want
