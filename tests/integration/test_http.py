"""The HTTP front door of the real daemon: routes, error codes, limits, timeouts,
concurrency and `inferctl status`."""
import concurrent.futures
import json
import os
import re
import socket
import subprocess
import tempfile
import time

import pytest
import requests

from conftest import INFERCTL, Daemon, default_model, free_port

MAX_BODY = 65536
IDLE_TIMEOUT_S = 1


@pytest.fixture(scope="module")
def daemon():
    """A serving daemon with a small body limit and a short idle timeout."""
    cfg = tempfile.NamedTemporaryFile("w", prefix="inferd-http-", suffix=".toml", delete=False)
    cfg.write(f"[server]\nmax_body_bytes = {MAX_BODY}\nidle_timeout_s = {IDLE_TIMEOUT_S}\nio_threads = 2\n")
    cfg.close()
    d = Daemon(["--config", cfg.name], wait_state="Serving", timeout=300)
    yield d
    d.stop()
    os.unlink(cfg.name)


def raw_exchange(port, data, timeout=5.0):
    """Sends raw bytes and returns everything the server sends until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                break
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)


def assert_openai_error(r, status):
    assert r.status_code == status
    assert r.headers["Content-Type"] == "application/json"
    err = r.json()["error"]
    assert err["code"] == status
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and err["type"]
    return err


def test_live_and_ready(daemon):
    r = daemon.get("/health/live")
    assert r.status_code == 200
    assert r.json()["status"] == "alive"
    r = daemon.get("/health/ready")
    assert r.status_code == 200
    body = r.json()
    assert body["state"] == "Serving"
    assert "activity" in body and body["phase"] == body["activity"]


def test_metrics(daemon):
    daemon.get("/health/ready")
    r = daemon.get("/metrics")
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = r.text
    assert '\ninferd_state{state="Serving"} 1\n' in text
    assert '\ninferd_state{state="Loading"} 0\n' in text
    assert '\ninferd_state_transitions_total{from="Warming",to="Serving"} 1\n' in text
    assert "# TYPE inferd_http_requests_total counter" in text
    assert "# TYPE inferd_http_request_duration_seconds histogram" in text
    assert re.search(r'\ninferd_uptime_seconds [0-9.e+-]+\n', text)
    m = re.search(r'\ninferd_http_requests_total\{route="/health/ready",method="GET",code="200"\} (\d+)\n', text)
    assert m and int(m.group(1)) >= 1
    assert 'inferd_http_request_duration_seconds_bucket{route="/health/ready",le="+Inf"}' in text
    # Every sample line is "name{labels} value" or "name value".
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert re.fullmatch(r'[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? \S+', line), line


def test_models(daemon):
    r = daemon.get("/v1/models")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list"
    assert len(body["data"]) == 1
    m = body["data"][0]
    assert m["object"] == "model"
    assert m["owned_by"] == "inferd"
    assert isinstance(m["id"], str) and m["id"]
    assert isinstance(m["created"], int)
    assert isinstance(m["max_model_len"], int)
    assert "root" in m


def test_request_ids(daemon):
    assert daemon.get("/health/live", headers={"X-Request-Id": "trace-42"}).headers["X-Request-Id"] == "trace-42"
    a = daemon.get("/health/live").headers["X-Request-Id"]
    b = daemon.get("/health/live").headers["X-Request-Id"]
    assert a and b and a != b


def test_unknown_path_is_404(daemon):
    err = assert_openai_error(daemon.get("/no/such/thing"), 404)
    assert "/no/such/thing" in err["message"]


def test_wrong_method_is_405_with_allow(daemon):
    r = daemon.post("/health/ready", data="{}")
    assert_openai_error(r, 405)
    assert r.headers["Allow"] == "GET"


def test_malformed_http_is_400(daemon):
    reply = raw_exchange(daemon.port, b"THIS IS NOT HTTP\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400 ")
    assert b'"code":400' in reply
    # The daemon is unharmed.
    assert daemon.get("/health/live").status_code == 200


def test_malformed_json_is_400(daemon):
    r = daemon.post("/v1/completions", data='{"model": ', headers={"Content-Type": "application/json"})
    err = assert_openai_error(r, 400)
    assert "not valid JSON" in err["message"]


def test_oversized_body_is_413(daemon):
    r = daemon.post("/v1/completions", data=b"x" * (MAX_BODY + 1))
    err = assert_openai_error(r, 413)
    assert str(MAX_BODY) in err["message"]
    # Announced but never sent: answered at once.
    reply = raw_exchange(daemon.port, b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 999999999\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 413 ")


def test_keep_alive_reuses_the_connection(daemon):
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=5) as s:
        f = s.makefile("rb")
        # Not a health route first: a new connection's first health request is
        # answered by the accept thread and closed (HTTP.md, Health probes).
        for path in (b"/v1/models", b"/health/live", b"/health/ready"):
            s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: t\r\n\r\n")
            status = f.readline()
            assert status.startswith(b"HTTP/1.1 200 ")
            length = 0
            while (line := f.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                assert name.lower() != "connection" or value.strip() != "close"
                if name.lower() == "content-length":
                    length = int(value)
            assert len(f.read(length)) == length


def test_concurrent_clients(daemon):
    def client(i):
        with requests.Session() as s:
            for _ in range(10):
                r = s.get(daemon.url + "/health/ready", headers={"X-Request-Id": f"c{i}"}, timeout=10)
                if r.status_code != 200 or r.headers["X-Request-Id"] != f"c{i}":
                    return False
        return True

    with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(client, range(32)))
    assert all(results)


def test_slowloris_is_closed_after_idle_timeout(daemon):
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=IDLE_TIMEOUT_S + 5) as s:
        s.sendall(b"GET /health/live HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        t0 = time.monotonic()
        # Others are served while it hangs.
        assert daemon.get("/health/live", timeout=2).status_code == 200
        try:
            assert s.recv(4096) == b""
        except ConnectionResetError:
            pass
        elapsed = time.monotonic() - t0
    assert IDLE_TIMEOUT_S * 0.8 <= elapsed < IDLE_TIMEOUT_S + 3


def test_inferctl_status(daemon):
    r = subprocess.run([str(INFERCTL), "status", "--url", daemon.url, "--admin-api-key", daemon.admin_key],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^state: +Serving$", r.stdout, re.M)
    assert re.search(r"^activity: +\S", r.stdout, re.M)
    assert re.search(r"^ready: +yes$", r.stdout, re.M)
    assert re.search(r"^uptime: +[0-9]", r.stdout, re.M)
    assert re.search(r"^health: +.*; recoveries 0 of 3 in 600 s$", r.stdout, re.M)


def test_inferctl_status_unreachable():
    url = f"http://127.0.0.1:{free_port()}"
    r = subprocess.run([str(INFERCTL), "status", "--url", url], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert f"cannot reach {url}: Connection refused" in r.stderr


def test_inferctl_help():
    r = subprocess.run([str(INFERCTL), "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    assert "status" in r.stdout
    r = subprocess.run([str(INFERCTL), "no-such-command"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "unknown command 'no-such-command'" in r.stderr


def test_busy_port_fails_with_a_clear_message(daemon):
    r = subprocess.run([str(daemon.proc.args[0]), "--host", "127.0.0.1", "--port", str(daemon.port)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert f"cannot listen on 127.0.0.1:{daemon.port}: Address already in use" in r.stderr


def test_inferctl_bench_engine_writes_json_and_refuses_unknown_flags():
    r = subprocess.run([str(INFERCTL), "bench", "engine", "--model", default_model(), "--threads", "1",
                        "--n-prompt", "8,16", "--n-gen", "4", "--n-depth", "32", "--batch", "2", "--repetitions", "1",
                        "--drafts", "1,3"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [p["n_prompt"] for p in out["prefill"]] == [8, 16] and all(p["tokens_per_s"] > 0 for p in out["prefill"])
    assert out["decode"]["n_depth"] == 32 and out["decode"]["tokens_per_s"] > 0
    assert out["decode_batched"]["batch"] == 2 and out["decode_batched"]["aggregate_tokens_per_s"] > 0
    assert [v["drafts"] for v in out["verify"]] == [1, 3]
    assert all(v["step_ms"] > 0 and v["cost_vs_decode"] > 0 for v in out["verify"])
    bad = subprocess.run([str(INFERCTL), "bench", "engine", "--n-promt", "8"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unknown flag --n-promt" in bad.stderr
