"""The warm-up gate: the endpoint opens only after all four phases passed and every
reachable shape key was touched; a failing phase keeps it closed and is retried;
traffic after opening finds no cold shapes."""
import concurrent.futures
import re
import subprocess
import time

import openai
import pytest
import requests

from conftest import INFERCTL, default_model, metric, needs_faults, scaled


# The warm-up's own tests run the full plan; the test helpers' small shapes ask for least.
FULL = ["--warmup-depth", "full"]


def wait_until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise TimeoutError(what)


def test_endpoint_opens_only_after_every_phase(start_daemon):
    d = start_daemon(["--model", default_model()] + FULL, wait_state="live")
    phases, refused = set(), 0
    deadline = time.monotonic() + scaled(180)
    while time.monotonic() < deadline:
        r = d.get("/health/ready")
        body = r.json()
        if body["state"] == "Serving":
            break
        assert r.status_code == 503
        if body["state"] == "Warming" and body["activity"].startswith("warming "):
            phases.add(body["activity"].split()[2])
            g = d.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1})
            if g.status_code == 200 and d.state() == "Serving":
                break  # the gate opened between the two requests
            assert g.status_code == 503 and g.headers.get("Retry-After")
            assert "Warming" in g.json()["error"]["message"]
            refused += 1
        time.sleep(0.05)
    assert d.state() == "Serving"
    assert refused > 0 and phases, "never saw the warm-up in progress"
    assert phases <= {"ramped", "burst", "concurrent-long", "sustained"}
    total = metric(d, "inferd_warmup_keys_total")
    assert total and total > 50
    assert metric(d, "inferd_warmup_keys_covered") == total
    assert metric(d, "inferd_warmup_runs_total", {"result": "passed"}) == 1
    for phase in ("ramped", "burst", "concurrent-long", "sustained"):
        assert metric(d, "inferd_warmup_phase_seconds", {"phase": phase}) > 0
    log = d.output()
    assert "warm-up passed" in log and "Warming -> Serving" in log and "warm-up plan (full work)" in log
    report = d.admin_get("/admin/warmup").json()
    assert report["last_run"]["passed"] and report["unreached"] == []
    assert [p["name"] for p in report["last_run"]["phases"]] == ["ramped", "burst", "concurrent-long", "sustained"]


def test_least_depth_start_touches_every_key(start_daemon):
    """--warmup-depth least: the recovery's plan at start-up, the same gate."""
    d = start_daemon(["--model", default_model(), "--warmup-depth", "least"])
    total = metric(d, "inferd_warmup_keys_total")
    assert total and total > 50 and metric(d, "inferd_warmup_keys_covered") == total
    assert metric(d, "inferd_warmup_runs_total", {"result": "passed"}) == 1
    assert "warm-up plan (least work)" in d.output() and "warm-up plan (full work)" not in d.output()
    for phase in ("ramped", "burst", "concurrent-long", "sustained"):
        assert metric(d, "inferd_warmup_phase_seconds", {"phase": phase}) > 0
    assert d.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}).status_code == 200
    assert metric(d, "inferd_cold_shapes_total") == 0


@needs_faults
def test_a_failing_phase_keeps_the_endpoint_closed_and_is_retried(start_daemon):
    d = start_daemon(["--model", default_model(), "--warmup-retries", "50"] + FULL,
                     env={"INFERD_FAULTS": "warmup.fail=burst"}, wait_state="live")
    wait_until(lambda: "retry" in d.get("/health/ready").json()["activity"], 120, "no failed warm-up attempt")
    r = d.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    assert r.status_code == 503 and r.headers.get("Retry-After")
    assert "burst" in r.json()["error"]["message"]
    assert d.get("/health/ready").json()["state"] == "Warming"
    # Heal the fault: the next attempt passes and the endpoint opens.
    assert d.admin_post("/admin/fault", json={"name": "warmup.fail", "armed": False}).status_code == 200
    d.wait_for("Serving", 180)
    assert metric(d, "inferd_warmup_runs_total", {"result": "failed"}) >= 1
    assert metric(d, "inferd_warmup_runs_total", {"result": "passed"}) == 1
    assert "phase 2 burst failed: failed by fault point warmup.fail" in d.output()
    assert d.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1}).status_code == 200


@needs_faults
def test_retries_spent_fail_start_up(start_daemon):
    d = start_daemon(["--model", default_model(), "--warmup-retries", "0"] + FULL,
                     env={"INFERD_FAULTS": "warmup.fail=sustained"}, wait_state=None)
    assert d.wait(timeout=120) == 1
    log = d.output()
    assert "warm-up failed after 1 attempts: phase 4 sustained failed" in log
    assert "-> Failed" in log


def test_operator_rerun_closes_and_reopens(start_daemon):
    d = start_daemon(["--model", default_model()] + FULL)
    r = subprocess.run([str(INFERCTL), "warmup", "--url", d.url, "--admin-api-key", d.admin_key, "--timeout",
                        str(round(scaled(180)))], capture_output=True, text=True, timeout=scaled(200))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "serving again" in r.stdout and "warming 4/4 sustained" in d.output()
    assert metric(d, "inferd_warmup_runs_total", {"result": "passed"}) == 2
    assert "Serving -> Recovering" in d.output() and "Recovering -> Warming" in d.output()
    # A second request while one runs is refused.
    assert d.admin_post("/admin/warmup", json={}).status_code == 202
    assert d.admin_post("/admin/warmup", json={}).status_code == 409
    d.wait_for("Serving", 180)
    assert metric(d, "inferd_cold_shapes_total") == 0


def test_plan_printed_offline():
    r = subprocess.run([str(INFERCTL), "warmup", "--plan", "--model", default_model(), "--max-model-len", "2048",
                        "--max-num-batched-tokens", "512", "--max-num-seqs", "8", "--keys"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "1. ramped" in r.stdout and "4. sustained" in r.stdout
    n = int(re.search(r"reachable shape keys: (\d+)", r.stdout).group(1))
    assert n > 50 and "plan covers all of them" in r.stdout
    assert "step.decode[b=8]" in r.stdout and "attention.f16.ctx[kvh=3,d=64,ctx=2048]" in r.stdout
    assert "plan (full work)" in r.stdout
    least = subprocess.run([str(INFERCTL), "warmup", "--plan", "--model", default_model(), "--max-model-len", "2048",
                            "--max-num-batched-tokens", "512", "--max-num-seqs", "8", "--warmup-depth", "least"],
                           capture_output=True, text=True, timeout=60)
    assert least.returncode == 0 and "plan (least work)" in least.stdout and "plan covers all of them" in least.stdout
    bad = subprocess.run([str(INFERCTL), "warmup", "--plan", "--max-num-seqs", "zero"], capture_output=True, text=True)
    assert bad.returncode != 0 and "--max-num-seqs" in bad.stderr


def mixed_traffic(d, rounds=3):
    """Chat and completions, streamed and not, short and long, one to many at a time."""
    client = openai.OpenAI(base_url=d.url + "/v1", api_key="unused", max_retries=0, timeout=600)
    model = d.get("/v1/models").json()["data"][0]["id"]
    max_len = d.post("/tokenize", json={"prompt": "x"}).json()["max_model_len"]
    words = "the quick brown fox jumps over the lazy dog while seven wizards quietly judge boxing matches ".split()

    def text(n):
        return " ".join(words[i % len(words)] + str(i % 7) for i in range(n))

    def ids(n, salt):
        return [100 + (j * 7 + salt * 13) % 4000 for j in range(n)]

    def one(i):
        kind = i % 4
        if kind == 0:
            r = client.completions.create(model=model, prompt=ids(5 + 37 * i % (max_len // 2), i), max_tokens=1 + i % 9,
                                          temperature=0)
            return r.usage.completion_tokens
        if kind == 1:
            stream = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": text(3 + 11 * i)}], max_tokens=12,
                stream=True, stream_options={"include_usage": True}, temperature=0.7, seed=i)
            return [c.usage for c in stream if c.usage][0].completion_tokens
        if kind == 2:
            r = client.completions.create(model=model, prompt=ids(max_len // 3 + 17 * i, i), max_tokens=3, n=2,
                                          temperature=1.0)
            return r.usage.completion_tokens
        # Long context: most of the model's window.
        r = requests.post(d.url + "/v1/completions", json={"prompt": ids(max_len - 40 - i, i), "max_tokens": 30,
                                                           "ignore_eos": True}, timeout=600)
        assert r.status_code == 200, r.text
        return r.json()["usage"]["completion_tokens"]

    for width in (1, 3, 8):
        with concurrent.futures.ThreadPoolExecutor(width) as ex:
            assert all(n > 0 for n in ex.map(one, range(width * rounds)))


def test_default_config_mixed_traffic_finds_no_cold_shapes(start_daemon):
    d = start_daemon(["--model", default_model()], small_shapes=False, timeout=300)
    assert metric(d, "inferd_warmup_keys_covered") == metric(d, "inferd_warmup_keys_total")
    print(f"default-config warm-up: {metric(d, 'inferd_warmup_seconds'):.1f} s")
    try:
        mixed_traffic(d, rounds=1)
    except Exception:
        print(d.output()[-6000:])
        raise
    assert metric(d, "inferd_cold_shapes_total") == 0, \
        [l for l in d.output().splitlines() if "cold shape" in l]


def test_without_warm_up_traffic_meets_cold_shapes(start_daemon):
    d = start_daemon(["--model", default_model(), "--no-warmup"])
    assert "warm-up disabled" in d.output()
    mixed_traffic(d, rounds=1)
    assert metric(d, "inferd_cold_shapes_total") > 0
    assert "cold shape: " in d.output()
