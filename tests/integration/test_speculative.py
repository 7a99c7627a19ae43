"""Speculative decoding (--speculative-config: prompt lookup, a draft model, a draft head): greedy completions
from a daemon with it equal those from one without, token for token, one at a
time and several at once; sampled ones speculate too, constrained ones
(response_format) never; its vLLM counters in /metrics are consistent; the warm-up still covers every shape its traffic
reaches; bad settings are refused."""
import concurrent.futures
import json
import re
import subprocess
import tempfile

import jsonschema
import pytest

from conftest import INFERCTL, INFERD, SRC, default_model, metric

TOOLS = SRC / "tools"
GOLDEN = SRC / "tests" / "golden"

SPEC = json.dumps({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4, "prompt_lookup_min": 2})

PROMPTS = [
    "Count from 1 to 100: 1, 2, 3, 4,",
    "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "Write a short poem about the sea.",
]


def spec_metrics(d):
    """The speculative counters: drafts, draft tokens, accepted tokens, accepted per position."""
    per_pos = {}
    for line in d.get("/metrics").text.splitlines():
        m = re.match(r'vllm:spec_decode_num_accepted_tokens_per_pos_total\{.*position="(\d+)".*\} (\S+)$', line)
        if m:
            per_pos[int(m.group(1))] = float(m.group(2))
    return (metric_any(d, "vllm:spec_decode_num_drafts_total"), metric_any(d, "vllm:spec_decode_num_draft_tokens_total"),
            metric_any(d, "vllm:spec_decode_num_accepted_tokens_total"), [per_pos[i] for i in sorted(per_pos)])


def metric_any(d, name):
    for line in d.get("/metrics").text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def complete(d, prompt, max_tokens=60):
    r = d.post("/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                                        "ignore_eos": True}, timeout=300)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["completion_tokens"] == max_tokens
    return body["choices"][0]["text"]


def test_same_completions_with_and_without_speculation(start_daemon):
    plain = start_daemon(["--model", default_model(), "--no-warmup"])
    want = [complete(plain, p) for p in PROMPTS]
    assert metric_any(plain, "vllm:spec_decode_num_drafts_total") is None  # absent without speculation

    d = start_daemon(["--model", default_model(), "--speculative-config", SPEC], timeout=300)
    assert metric(d, "inferd_warmup_keys_covered") == metric(d, "inferd_warmup_keys_total")
    drafts0, draft_tokens0, accepted0, _ = spec_metrics(d)

    # One at a time: the counting prompt alone must have drafts accepted.
    got = [complete(d, PROMPTS[0])]
    drafts, draft_tokens, accepted, per_pos = spec_metrics(d)
    assert drafts > drafts0 and accepted > accepted0, (drafts, accepted)
    got += [complete(d, p) for p in PROMPTS[1:]]
    assert got == want

    # Several in one batch.
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as ex:
        assert list(ex.map(lambda p: complete(d, p), PROMPTS)) == want

    # Sampled requests speculate too (speculative sampling): same length, streamed or not.
    before = spec_metrics(d)[0]
    for seed in range(2):
        r = d.post("/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 40, "temperature": 0.5, "seed": seed,
                                            "ignore_eos": True}, timeout=300)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 40
    assert spec_metrics(d)[0] > before

    drafts, draft_tokens, accepted, per_pos = spec_metrics(d)
    assert 0 < accepted <= draft_tokens
    assert drafts <= draft_tokens <= 5 * drafts
    assert len(per_pos) == 5 and sum(per_pos) == accepted
    assert all(per_pos[i + 1] <= per_pos[i] for i in range(4)), per_pos
    assert metric(d, "inferd_cold_shapes_total") == 0, [l for l in d.output().splitlines() if "cold shape" in l]


def run_inferd(args):
    return subprocess.run([str(INFERD)] + args, capture_output=True, text=True, timeout=60)


def test_constrained_requests_carry_no_drafts(start_daemon):
    d = start_daemon(["--model", default_model(), "--speculative-config", SPEC, "--no-warmup"])
    before = spec_metrics(d)[:3]
    schema = {"type": "object", "properties": {"numbers": {"type": "array", "items": {"type": "integer"},
                                                           "maxItems": 30}},
              "required": ["numbers"], "additionalProperties": False}
    r = d.post("/v1/completions", json={
        "prompt": PROMPTS[0], "max_tokens": 150, "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema, "strict": True}}},
        timeout=300)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice["text"]
    jsonschema.validate(json.loads(choice["text"]), schema)
    assert spec_metrics(d)[:3] == before
    complete(d, PROMPTS[0])  # the same daemon still speculates for the others
    assert spec_metrics(d)[0] > before[0]


@pytest.mark.parametrize("value,message", [
    ('{"method":"eagle","num_speculative_tokens":3}', 'method "eagle" is not supported'),
    ('{"method":"ngram"}', '"num_speculative_tokens" is required'),
    ('{"method":"ngram","num_speculative_tokens":0}', '"num_speculative_tokens" must be an integer from 1 to 32'),
    ('{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":4,"prompt_lookup_max":2}',
     '"prompt_lookup_max" (2) must be at least "prompt_lookup_min" (4)'),
    ('{"method":"ngram","num_speculative_tokens":3,"draft_model":"x"}', 'unknown field "draft_model"'),
    ('{"method":"draft_model","num_speculative_tokens":3}', 'method "draft_model" needs "model"'),
    ('{"method":"ngram","num_speculative_tokens":3,"model":"x"}', '"model" belongs to methods "draft_model" and "draft_head"'),
    ('{"model":"x","num_speculative_tokens":3,"prompt_lookup_max":2}', '"prompt_lookup_max" belongs to methods "ngram" and "draft_head"'),
    ("ngram", "must be a JSON object"),
])
def test_bad_speculative_config_is_refused_naming_the_flag(value, message):
    r = run_inferd(["--speculative-config", value])
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("inferd: --speculative-config: ") and message in r.stderr, r.stderr


def test_speculation_with_tensor_parallelism_is_refused():
    r = run_inferd(["--speculative-config", SPEC, "--tensor-parallel-size", "2", "--nnodes", "2"])
    assert r.returncode == 2, r.stderr
    assert "--speculative-config: speculative decoding is not supported with tensor_parallel_size > 1" in r.stderr


def test_the_single_request_bench_reports_ttft_decode_and_acceptance(start_daemon):
    d = start_daemon(["--model", default_model(), "--speculative-config", SPEC, "--no-warmup"])
    _, draft_tokens0, accepted0, _ = spec_metrics(d)
    def bench():
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            r = subprocess.run([str(INFERCTL), "bench", "single", "--url", d.url, "--trials", "2", "--max-tokens",
                                "24", "--workloads", "count,prose", "--nonce", "n1", "--out", out.name],
                               capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, r.stderr
            return json.load(open(out.name))
    run = bench()
    _, draft_tokens, accepted, _ = spec_metrics(d)
    assert run["nonce"] == "n1"  # the tag its messages carried: another run given it sends the same prompts
    assert [w["workload"] for w in run["workloads"]] == ["count", "prose"]
    for w in run["workloads"]:
        assert w["ok"] == 2 and w["failed"] == 0 and len(w["trials"]) == 2, w
        assert w["max_tokens"] == 24
        assert 0 < w["median_ttft_s"] < 60 and w["median_decode_tokens_per_s"] > 0, w
        for t in w["trials"]:
            assert 0 < t["completion_tokens"] <= 24 and t["prompt_tokens"] > 10, t
            if t["draft_tokens"]:
                assert t["acceptance"] == t["accepted_tokens"] / t["draft_tokens"]
                # Counter deltas: each draft's accepted tokens sit at its first positions.
                assert 0 < t["drafts"] <= t["draft_tokens"], t
                assert t["mean_acceptance_length"] == 1 + t["accepted_tokens"] / t["drafts"]
                per_pos = t["acceptance_per_position"]
                assert per_pos and all(0 <= a <= 1 for a in per_pos), t
                assert all(a >= b for a, b in zip(per_pos, per_pos[1:])), per_pos  # never more at a later position
                assert abs(sum(per_pos) * t["drafts"] - t["accepted_tokens"]) < 1e-6, t
        if any(t["draft_tokens"] for t in w["trials"]):
            assert w["mean_acceptance_length"] == 1 + w["accepted_tokens"] / w["drafts"], w
    assert "exact" in run["workloads"][0]["trials"][0]  # a count cut at 24 tokens is not the exact answer
    assert run["workloads"][0]["exact_outputs"] == 0
    # The drafts it counted are the daemon's own, trial by trial (the untimed first request aside).
    counted = sum(t["draft_tokens"] for w in run["workloads"] for t in w["trials"])
    assert counted <= draft_tokens - draft_tokens0
    assert sum(t["accepted_tokens"] for w in run["workloads"] for t in w["trials"]) <= accepted - accepted0
    assert counted > 0, "the count and prose prompts drafted nothing"
    # Each trial's output fingerprint: the same prompts (same nonce) give the same greedy text again.
    prints = [[t["output_fnv1a64"] for t in w["trials"]] for w in run["workloads"]]
    assert all(re.fullmatch(r"[0-9a-f]{16}", p) for ws in prints for p in ws), prints
    assert [[t["output_fnv1a64"] for t in w["trials"]] for w in bench()["workloads"]] == prints


def test_the_single_request_bench_refuses_an_unknown_workload():
    r = subprocess.run([str(INFERCTL), "bench", "single", "--workloads", "count,poems"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and "--workloads: unknown workload 'poems'" in r.stderr, r.stderr


def test_a_draft_model_gives_the_same_completions_and_its_shapes_are_warmed(start_daemon, tmp_path):
    """The default model cut to its first 8 blocks drafts for the whole model."""
    pytest.importorskip("gguf")
    draft = tmp_path / "draft.gguf"
    subprocess.run(["python3", str(TOOLS / "truncate_gguf.py"), default_model(), str(draft), "--blocks", "8"],
                   check=True, capture_output=True, timeout=300)
    plain = start_daemon(["--model", default_model(), "--no-warmup"])
    want = [complete(plain, p, 40) for p in PROMPTS]
    spec = json.dumps({"method": "draft_model", "model": str(draft), "num_speculative_tokens": 3})
    d = start_daemon(["--model", default_model(), "--speculative-config", spec], timeout=300)
    # The draft's own forwards were warmed and gated with the target's.
    assert metric(d, "inferd_warmup_keys_covered") == metric(d, "inferd_warmup_keys_total")
    assert "speculative draft model" in d.output()
    assert [complete(d, p, 40) for p in PROMPTS] == want
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as ex:
        assert list(ex.map(lambda p: complete(d, p, 40), PROMPTS)) == want
    drafts, draft_tokens, accepted, per_pos = spec_metrics(d)
    assert drafts > 0 and 0 < accepted <= draft_tokens <= 3 * drafts, (drafts, draft_tokens, accepted)
    assert len(per_pos) == 3 and sum(per_pos) == accepted
    assert metric(d, "inferd_cold_shapes_total") == 0, [l for l in d.output().splitlines() if "cold shape" in l]


def test_a_draft_model_of_other_shapes_has_its_keys_warmed_and_gated(start_daemon, tmp_path):
    """A random two-block draft of width 256 (the target's is 576): its kernels'
    shape keys are the target's plus its own, all touched before the gate opens,
    and none is first used by traffic; its drafts are nearly all wrong, and the
    output is still the target's own."""
    pytest.importorskip("gguf")
    draft = tmp_path / "tiny.gguf"
    subprocess.run(["python3", str(TOOLS / "make_random_gguf.py"), "--donor", default_model(), "--shape", "tiny",
                    "--type", "q8_0", str(draft)], check=True, capture_output=True, timeout=300)
    plain = start_daemon(["--model", default_model()], timeout=300)
    want = [complete(plain, p, 24) for p in PROMPTS[:2]]
    spec = json.dumps({"method": "draft_model", "model": str(draft), "num_speculative_tokens": 2})
    d = start_daemon(["--model", default_model(), "--speculative-config", spec], timeout=300)
    total = metric(d, "inferd_warmup_keys_total")
    assert total > metric(plain, "inferd_warmup_keys_total")
    assert metric(d, "inferd_warmup_keys_covered") == total
    assert [complete(d, p, 24) for p in PROMPTS[:2]] == want
    assert spec_metrics(d)[0] > 0
    assert metric(d, "inferd_cold_shapes_total") == 0, [l for l in d.output().splitlines() if "cold shape" in l]


def test_a_draft_model_of_another_vocabulary_is_refused_naming_it():
    other = GOLDEN / "spm-tiny.gguf"
    spec = json.dumps({"method": "draft_model", "model": str(other), "num_speculative_tokens": 3})
    r = subprocess.run([str(INFERD), "--model", default_model(), "--no-warmup", "--speculative-config", spec],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert f"speculative draft model {other}: its tokenizer has" in r.stderr, r.stderr[-2000:]


def make_head(model, path, hidden=64):
    """An untrained draft head for `model` (tools/train_draft_head.py --untrained)."""
    subprocess.run(["python3", str(TOOLS / "train_draft_head.py"), "--model", str(model), "--out", str(path),
                    "--untrained", "--hidden", str(hidden)], check=True, capture_output=True, timeout=300)
    return path


def test_a_draft_head_gives_the_same_completions_and_its_shapes_are_warmed(start_daemon, tmp_path):
    """A head reading the target's hidden state: its kernels' shape keys join
    the target's and are all touched before the gate opens; none is first used
    by traffic; the output is the target's own, alone and concurrently."""
    pytest.importorskip("gguf")
    head = make_head(default_model(), tmp_path / "head.gguf")
    plain = start_daemon(["--model", default_model()], timeout=300)
    want = [complete(plain, p, 24) for p in PROMPTS]
    spec = json.dumps({"method": "draft_head", "model": str(head), "num_speculative_tokens": 3})
    d = start_daemon(["--model", default_model(), "--speculative-config", spec], timeout=300)
    total = metric(d, "inferd_warmup_keys_total")
    assert total > metric(plain, "inferd_warmup_keys_total")
    assert metric(d, "inferd_warmup_keys_covered") == total
    assert [complete(d, p, 24) for p in PROMPTS] == want
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as ex:
        assert list(ex.map(lambda p: complete(d, p, 24), PROMPTS)) == want
    drafts, draft_tokens, accepted, per_pos = spec_metrics(d)
    assert drafts > 0 and accepted <= draft_tokens <= 3 * drafts, (drafts, draft_tokens, accepted)
    assert len(per_pos) == 3 and sum(per_pos) == accepted
    assert metric(d, "inferd_cold_shapes_total") == 0, [l for l in d.output().splitlines() if "cold shape" in l]


def test_a_draft_head_for_another_model_is_refused_naming_it(tmp_path):
    pytest.importorskip("gguf")
    head = make_head(GOLDEN / "spm-tiny.gguf", tmp_path / "other-head.gguf", hidden=8)
    spec = json.dumps({"method": "draft_head", "model": str(head), "num_speculative_tokens": 3})
    r = subprocess.run([str(INFERD), "--model", default_model(), "--no-warmup", "--speculative-config", spec],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert f"speculative draft head {head}: it is for a model of width" in r.stderr, r.stderr[-2000:]
