"""Admission control: with --max-num-seqs 1 --max-waiting 1 one request runs, one
waits, and any further request is refused at once with 429, Retry-After and an
OpenAI-shaped error instead of queueing; the admitted ones still complete.

Requests are long (ignore_eos, LONG tokens) so the first is still running when
the others arrive, even on a slow 2-core machine.
"""
import concurrent.futures
import threading
import time

import openai
import pytest
import requests

from conftest import Daemon, default_model

LONG = 384


@pytest.fixture(scope="module")
def daemon():
    # No warm-up: its concurrent phase submits more requests than this queue admits.
    d = Daemon(["--model", default_model(), "--max-num-seqs", "1", "--max-waiting", "1", "--no-warmup"],
               wait_state="Serving", timeout=300)
    yield d
    d.stop()


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def body(i, max_tokens=LONG, **kw):
    return {"prompt": f"Story {i}: once upon a time", "max_tokens": max_tokens, "ignore_eos": True,
            "temperature": 0.0, **kw}


def gauge(daemon, name):
    for line in daemon.get("/metrics").text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def wait_idle(daemon, timeout=30):
    """Waits until nothing runs or waits in the engine."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gauge(daemon, "vllm:num_requests_running") == 0 and gauge(daemon, "vllm:num_requests_waiting") == 0:
            return
        time.sleep(0.05)
    raise TimeoutError("the engine did not become idle")


def assert_refused(status, headers, payload):
    assert status == 429
    assert int(headers["Retry-After"]) >= 1
    err = payload["error"]
    assert err["code"] == 429
    assert err["type"] == "rate_limit_error"
    assert "busy" in err["message"]
    assert err["param"] is None


def test_a_burst_beyond_the_queue_is_refused_with_429(daemon):
    wait_idle(daemon)
    n = 6
    barrier = threading.Barrier(n)

    def fire(i):
        barrier.wait(timeout=30)
        return daemon.post("/v1/completions", json=body(i), timeout=120)

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        replies = list(pool.map(fire, range(n)))

    assert {r.status_code for r in replies} <= {200, 429}, [r.text for r in replies]
    admitted = [r for r in replies if r.status_code == 200]
    refused = [r for r in replies if r.status_code == 429]
    # One runs and one waits; arrivals spread over several engine steps may
    # slip one more in (the waiting count is refreshed per step), never all.
    assert admitted
    assert len(refused) >= n - 3
    for r in refused:
        assert r.headers["Content-Type"].startswith("application/json")
        assert_refused(r.status_code, r.headers, r.json())
    for r in admitted:
        out = r.json()
        assert out["choices"][0]["finish_reason"] == "length"
        assert out["usage"]["completion_tokens"] == LONG

    # Once they are done the queue is empty again and a request is admitted.
    wait_idle(daemon)
    r = daemon.post("/v1/completions", json=body(99, max_tokens=4), timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 4


def test_the_openai_client_sees_a_rate_limit_error_while_streams_complete(daemon, client):
    wait_idle(daemon)
    model = daemon.get("/v1/models").json()["data"][0]["id"]

    def create(i, max_tokens=LONG, **kw):
        b = body(i, max_tokens)
        return client.completions.create(model=model, prompt=b["prompt"], max_tokens=max_tokens, temperature=0.0,
                                         extra_body={"ignore_eos": True}, **kw)

    def stream(i):
        return create(i, stream=True, stream_options={"include_usage": True})

    running = stream(1)
    chunks = iter(running)
    first = next(chunks)  # the first token: this one is running, not waiting
    waiting = stream(2)   # the stream's head comes on admission, before its first token
    # The engine refreshes its count of waiting requests once per step, and the
    # running stream gets one chunk per step: after three more, that count
    # includes the second request.
    for _ in range(3):
        next(chunks)

    with pytest.raises(openai.RateLimitError) as refused:
        create(3, max_tokens=4)
    e = refused.value
    assert_refused(e.status_code, e.response.headers, e.response.json())

    def usage_of(chunk_iter):
        usage = None
        for c in chunk_iter:
            if c.usage is not None:
                usage = c.usage
        return usage

    assert first.choices
    assert usage_of(chunks).completion_tokens == LONG
    assert usage_of(iter(waiting)).completion_tokens == LONG

    wait_idle(daemon)
    r = create(4, max_tokens=4)
    assert r.usage.completion_tokens == 4
