#!/usr/bin/env python3
"""Soak: drives a real inferd with a mix of clients for --seconds and checks it
came out the way it went in. Prints JSON with every figure and exits 1 if any
check fails:

  - no unexpected 5xx, and every request ended in a completion or its expected
    4xx (each client call has a deadline; one that hits it is a hang);
  - the supervisor took no action (sheds, recoveries, probe failures, cold shapes);
  - RSS at the end within --rss-growth-pct of RSS at Serving;
  - open fds back within a small margin of the count at Serving;
  - KV-cache usage back to 0;
  - /health/live and /health/ready answered within --health-latency-ms throughout,
    on the main listener and on the admin listener (a separate process polls
    them every 200 ms, each on a new connection).

The mix: streamed and whole completions and chat completions, prompts from a few
tokens to --max-prompt-tokens (512; at most half the window), 1 to 200 generated
tokens; clients that hang up mid-stream; bad requests (invalid JSON, wrong
types, unknown model); a slowloris client that must be closed by the idle
timeout; a client that never reads its stream; and --idle-connections
connections held open (reopened when the idle timeout closes them), fewer if
the fd limit is lower.

  python3 tools/soak.py --build build --seconds 600 > soak.json
"""
import argparse
import json
import multiprocessing
import os
import random
import re
import resource
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time

import requests

SMALL_SHAPES = ["--max-model-len", "1024", "--max-num-batched-tokens", "256", "--max-num-seqs", "16"]
FD_MARGIN = 8  # fds the daemon may open lazily (a log file, an epoll) between Serving and the end


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(url):
    out = {}
    for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            name = name.split("{")[0]  # summed over labels (vllm:* carry model_name)
            out[name] = out.get(name, 0) + float(value)
    return out


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def raise_fd_limit():
    """The soft RLIMIT_NOFILE up to the hard one; the daemon, started later, inherits it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def raw_get(port, path, timeout=5):
    """One GET on a new connection, as a load balancer's probe makes it: the status
    code, the whole response, the time (monotonic) the connection was open, and
    the seconds the whole request took. Plain sockets, so the figures are the
    daemon's, not an HTTP library's. The integration tests use it too."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        connected = time.monotonic()
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    return int(data.split(b" ", 2)[1]), data, connected, time.monotonic() - start


def health_get(port, path):
    """The status code of a health probe, and the time its connection was open."""
    code, _, connected, _ = raw_get(port, path)
    return code, connected


def poll_health(ports, stop, out):
    """Both health routes on each listener ({"main": port, "admin": port}). In its
    own process, so the client threads' GIL does not inflate the figures."""
    paths = ("/health/live", "/health/ready")
    worst = {listener: {path: 0.0 for path in paths} for listener in ports}
    polls, failures, slowest = 0, [], []
    t_start = time.monotonic()
    while not stop.is_set():
        for listener, port in ports.items():
            for path in paths:
                t = time.monotonic()
                connected = t
                try:
                    code, connected = health_get(port, path)
                except (OSError, ValueError, IndexError) as e:
                    code = type(e).__name__
                dt = time.monotonic() - t
                worst[listener][path] = max(worst[listener][path], dt)
                # when (s into the run), where, ms until connected, ms in all
                slowest.append([round(t - t_start, 1), f"{listener} {path}", round((connected - t) * 1000, 1),
                                round(dt * 1000, 1)])
                slowest = sorted(slowest, key=lambda x: -x[3])[:10]
                polls += 1
                if code != 200:
                    failures.append(f"{listener} {path}: {code}")
        stop.wait(0.2)
    ms = {listener: {k: round(v * 1000, 1) for k, v in w.items()} for listener, w in worst.items()}
    out.send({"polls": polls, "max_ms": ms["main"], "admin_max_ms": ms["admin"], "slowest": slowest,
              "failures": failures[:20], "failure_count": len(failures)})


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.examples = []

    def add(self, key, example=None):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            if example and len(self.examples) < 20:
                self.examples.append(example)


class Soak:
    def __init__(self, a, url, port, max_len, model_name):
        self.a, self.url, self.port, self.max_len, self.model = a, url, port, max_len, model_name
        self.tally = Tally()
        self.end = 0.0
        self.stop = threading.Event()

    # --- ordinary clients -------------------------------------------------------

    def body(self, rng, chat, stream):
        n = rng.choice([1, 4, 30, 200, min(self.max_len // 2, self.a.max_prompt_tokens)])
        body = {"max_tokens": rng.randint(1, 200), "temperature": rng.choice([0, 0.8]), "stream": stream}
        if chat:
            # About a token a word; half of n keeps the template's tokens inside half the window.
            words = " ".join(rng.choice(["the", "cat", "sat", "on", "a", "mat", "today"]) for _ in range(max(1, n // 2)))
            body["messages"] = [{"role": "user", "content": words}]
        else:
            body["prompt"] = [100 + rng.randrange(9000) for _ in range(n)]
        return body

    def valid(self, rng, disconnect=False):
        chat = rng.random() < 0.5
        stream = disconnect or rng.random() < 0.5
        path = "/v1/chat/completions" if chat else "/v1/completions"
        kind = ("chat" if chat else "completion") + ("_stream" if stream else "") + ("_disconnect" if disconnect else "")
        deadline = time.monotonic() + self.a.request_timeout
        try:
            r = requests.post(self.url + path, json=self.body(rng, chat, stream), stream=stream,
                              timeout=(10, self.a.request_timeout))
        except requests.RequestException as e:
            return self.tally.add("hang_or_error", f"{kind}: {type(e).__name__}")
        with r:
            if r.status_code >= 500:
                return self.tally.add("unexpected_5xx", f"{kind}: {r.status_code} {r.text[:200]}")
            if r.status_code != 200:
                return self.tally.add("unexpected_4xx", f"{kind}: {r.status_code} {r.text[:200]}")
            if not stream:
                ok = bool(r.json().get("choices"))
                return self.tally.add("ok" if ok else "incomplete", None if ok else f"{kind}: {r.text[:200]}")
            lines = 0
            try:
                for line in r.iter_lines():
                    if time.monotonic() > deadline:
                        return self.tally.add("hang_or_error", f"{kind}: stream past its deadline")
                    if not line:
                        continue
                    lines += 1
                    if disconnect and lines >= 2:
                        return self.tally.add("disconnected")  # closing r hangs up mid-stream
                    if line == b"data: [DONE]":
                        return self.tally.add("ok")
                    if line.startswith(b"data: ") and b'"error"' in line[:20]:
                        return self.tally.add("stream_error", f"{kind}: {line[:200]!r}")
            except requests.RequestException as e:
                return self.tally.add("hang_or_error", f"{kind}: {type(e).__name__} mid-stream")
            # A stream shorter than two events (max_tokens 1) ends before the hang-up.
            self.tally.add("incomplete" if not disconnect else "disconnected",
                           None if disconnect else f"{kind}: stream ended without [DONE]")

    def bad(self, rng):
        which = rng.choice(["invalid_json", "wrong_type", "unknown_model"])
        path = "/v1/completions"
        headers = {"Content-Type": "application/json"}
        if which == "invalid_json":
            data, want = b'{"prompt": "hi", "max_tokens": ', 400
        elif which == "wrong_type":
            data, want = json.dumps({"prompt": "hi", "max_tokens": "ten"}).encode(), 400
        else:
            path = "/v1/chat/completions"
            data = json.dumps({"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}).encode()
            want = 404
        try:
            r = requests.post(self.url + path, data=data, headers=headers, timeout=(10, self.a.request_timeout))
        except requests.RequestException as e:
            return self.tally.add("hang_or_error", f"bad {which}: {type(e).__name__}")
        if r.status_code >= 500:
            return self.tally.add("unexpected_5xx", f"bad {which}: {r.status_code} {r.text[:200]}")
        ok = r.status_code == want and "error" in r.json()
        self.tally.add("bad_request_answered" if ok else "bad_request_wrong_answer",
                       None if ok else f"bad {which}: {r.status_code} {r.text[:200]}")

    def client(self, i):
        rng = random.Random(i)
        # Client 0 starts with a bad request: a short run on a slow machine
        # (a request or two a client) still checks how one is answered.
        first = i == 0
        while time.monotonic() < self.end:
            x = rng.random()
            if x < 0.10 or first:
                first = False
                self.bad(rng)
            elif x < 0.20:
                self.valid(rng, disconnect=True)
            else:
                self.valid(rng)

    # --- the misbehaving ones ---------------------------------------------------

    def slowloris(self, out):
        """Headers a byte at a time, never finished: the idle timeout must close it."""
        closed_after = []
        while time.monotonic() < self.end:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            t0 = time.monotonic()
            head = b"POST /v1/completions HTTP/1.1\r\nHost: soak\r\nX-Slow: "
            i = 0
            try:
                while time.monotonic() - t0 < self.a.idle_timeout + 15:
                    s.sendall(head[i:i + 1] if i < len(head) else b"a")
                    i += 1
                    time.sleep(0.2)
            except OSError:
                closed_after.append(time.monotonic() - t0)
            else:
                closed_after.append(None)  # held past the idle timeout: a failure
            s.close()
        out["slowloris"] = {"connections": len(closed_after),
                            "held_past_idle_timeout": sum(c is None for c in closed_after),
                            "closed_after_s": [round(c, 1) for c in closed_after if c is not None]}

    def never_reads(self, out):
        """Asks for a long stream and never reads it; hangs up after the idle timeout."""
        n = 0
        while time.monotonic() < self.end:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
            s.settimeout(10)
            s.connect(("127.0.0.1", self.port))
            body = json.dumps({"prompt": "Tell me a long story.", "max_tokens": 200, "stream": True}).encode()
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            self.stop.wait(min(self.a.idle_timeout + 2, max(0, self.end - time.monotonic())))
            s.close()
            n += 1
        out["never_reads"] = {"connections": n}

    def idle(self, n, out):
        """n connections that send nothing, reopened as the idle timeout closes them."""
        sel = selectors.DefaultSelector()
        opened, failures, peak = 0, 0, 0

        def open_one():
            nonlocal opened, failures
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            except OSError:
                failures += 1
                return
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
            opened += 1

        for _ in range(n):
            open_one()
        out["idle_open_at_start"] = len(sel.get_map())
        while time.monotonic() < self.end:
            peak = max(peak, len(sel.get_map()))
            for key, _ in sel.select(timeout=0.5):
                sel.unregister(key.fileobj)
                key.fileobj.close()
                if time.monotonic() < self.end:
                    open_one()
        for key in list(sel.get_map().values()):
            key.fileobj.close()
        sel.close()
        out["idle"] = {"requested": n, "opened": opened, "connect_failures": failures, "peak_open": peak}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--max-prompt-tokens", type=int, default=512,
                    help="the longest prompt (and at most half the window): 64 clients asking for 4096-token "
                         "prompts are more prefill than two cores finish within --request-timeout")
    ap.add_argument("--idle-connections", type=int, default=10000)
    ap.add_argument("--idle-timeout", type=int, default=60, help="the daemon's [server] idle_timeout_s")
    ap.add_argument("--request-timeout", type=float, default=300, help="a client call past this is a hang")
    ap.add_argument("--health-latency-ms", type=float, default=100)
    ap.add_argument("--rss-growth-pct", type=float, default=1.0)
    ap.add_argument("--probe-interval", default="5")
    ap.add_argument("--small-shapes", action="store_true", help="a 1024-token window, 16 sequences")
    ap.add_argument("--port", type=int, default=0,
                    help="the daemon's port, the admin port the next one (default: free ones the system offers)")
    ap.add_argument("inferd_args", nargs="*", help="extra inferd flags (after --)")
    a = ap.parse_args()

    fd_limit = raise_fd_limit()
    # Room for the clients (two sockets each at most), the misbehaving ones, the
    # health poller and the daemon's own files: the rest may be idle connections.
    reserve = 2 * a.clients + 256
    idle_n = max(0, min(a.idle_connections, fd_limit - reserve))
    notes = []
    if idle_n < a.idle_connections:
        notes.append(f"idle connections scaled down from {a.idle_connections} to {idle_n}: RLIMIT_NOFILE is {fd_limit}")

    cfg = tempfile.NamedTemporaryFile("w", prefix="soak-", suffix=".toml", delete=False)
    cfg.write(f"[server]\nidle_timeout_s = {a.idle_timeout}\n")
    cfg.close()
    # A port free when probed may be taken before the daemon binds it (a test
    # beside this one, a client's ephemeral port): then it starts again on others.
    for attempt in range(5):
        port, admin_port = (a.port, a.port + 1) if a.port and attempt == 0 else (free_port(), free_port())
        url = f"http://127.0.0.1:{port}"
        log = tempfile.NamedTemporaryFile(prefix="soak-", suffix=".log", delete=False)
        cmd = [os.path.join(a.build, "daemon", "inferd"), "--config", cfg.name, "--host", "127.0.0.1", "--port",
               str(port), "--probe-interval", a.probe_interval, "--max-connections", str(idle_n + reserve),
               "--admin-port", str(admin_port)]
        cmd += (SMALL_SHAPES if a.small_shapes else []) + a.inferd_args
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 600:
            try:
                if requests.get(url + "/health/ready", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        else:
            proc.kill()
            sys.exit(f"inferd not Serving after 600 s: see {log.name}")
        if proc.poll() is None:
            break
        if "Address already in use" not in open(log.name).read() or attempt == 4:
            sys.exit(f"inferd exited: see {log.name}")
    warm_s = time.monotonic() - t0
    info = requests.post(url + "/tokenize", json={"prompt": "x"}, timeout=10).json()
    model = requests.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
    rss_start, fds_start = rss_kib(proc.pid), fd_count(proc.pid)

    # The poller forks before any thread starts.
    ctx = multiprocessing.get_context("fork")
    health_stop = ctx.Event()
    health_rx, health_tx = ctx.Pipe(duplex=False)
    poller = ctx.Process(target=poll_health, args=({"main": port, "admin": admin_port}, health_stop, health_tx))
    poller.start()

    soak = Soak(a, url, port, info["max_model_len"], model)
    soak.end = time.monotonic() + a.seconds
    side = {}
    threads = [threading.Thread(target=soak.idle, args=(idle_n, side)),
               threading.Thread(target=soak.slowloris, args=(side,)),
               threading.Thread(target=soak.never_reads, args=(side,))]
    threads += [threading.Thread(target=soak.client, args=(i,)) for i in range(a.clients)]
    for t in threads:
        t.start()
    # Past the end, a client finishes its call in flight; its own deadline bounds that.
    for t in threads:
        t.join(timeout=max(0, soak.end - time.monotonic()) + a.request_timeout + a.idle_timeout + 30)
    stuck_threads = sum(t.is_alive() for t in threads)
    soak.stop.set()

    # Settle: the engine drains, the closed sockets leave the daemon.
    settle_t0 = time.monotonic()
    while time.monotonic() - settle_t0 < 60:
        m = metrics(url)
        if m.get("vllm:kv_cache_usage_perc", 0) == 0 and fd_count(proc.pid) <= fds_start + FD_MARGIN:
            break
        time.sleep(0.5)
    time.sleep(2)
    health_stop.set()
    health = health_rx.recv() if health_rx.poll(30) else {"failures": ["poller did not report"], "max_ms": {}}
    poller.join(timeout=10)
    m = metrics(url)
    rss_end, fds_end = rss_kib(proc.pid), fd_count(proc.pid)
    text = open(log.name, errors="replace").read()

    counts = soak.tally.counts
    slow = side.get("slowloris", {})
    result = {
        "command": " ".join(sys.argv), "seconds": a.seconds, "clients": a.clients, "warmup_s": round(warm_s, 1),
        "fd_limit": fd_limit, "idle_connections": idle_n, "idle_timeout_s": a.idle_timeout, "notes": notes,
        "max_model_len": info["max_model_len"], "requests": counts, "examples": soak.tally.examples,
        **{k: v for k, v in side.items() if k != "slowloris"}, "slowloris": slow,
        "health": health, "rss_kib": {"serving": rss_start, "end": rss_end,
                                       "growth_pct": round(100 * (rss_end - rss_start) / rss_start, 2)},
        "fds": {"serving": fds_start, "end": fds_end},
        "kv_cache_usage_end": m.get("vllm:kv_cache_usage_perc"),
        "sheds": m.get("inferd_sheds_total", 0), "recoveries": m.get("inferd_recoveries_total", 0),
        "cold_shapes": m.get("inferd_cold_shapes_total", 0),
        "probe_failures": len(re.findall(r"generation probe failed", text)),
        "supervisor_actions": re.findall(r"supervisor: (?:shed|recover|fail|unshed): .*", text)[:20],
        "stuck_threads": stuck_threads,
    }
    checks = {
        "no_unexpected_5xx": counts.get("unexpected_5xx", 0) == 0,
        "every_request_ended": all(counts.get(k, 0) == 0 for k in
                                   ("hang_or_error", "incomplete", "unexpected_4xx", "stream_error",
                                    "bad_request_wrong_answer")) and stuck_threads == 0,
        "requests_served": counts.get("ok", 0) > 0 and counts.get("bad_request_answered", 0) > 0,
        "slowloris_closed_by_idle_timeout": slow.get("connections", 0) > 0 and slow.get("held_past_idle_timeout") == 0,
        "idle_connections_held": side.get("idle", {}).get("connect_failures", 1) == 0
                                 and side.get("idle_open_at_start") == idle_n,
        "rss_growth": result["rss_kib"]["growth_pct"] <= a.rss_growth_pct,
        "fds_back": fds_end <= fds_start + FD_MARGIN,
        "kv_back_to_0": result["kv_cache_usage_end"] == 0,
        "health_latency": bool(health.get("max_ms")) and max(health["max_ms"].values()) <= a.health_latency_ms,
        "health_latency_admin": bool(health.get("admin_max_ms"))
                                and max(health["admin_max_ms"].values()) <= a.health_latency_ms,
        "health_always_ok": health.get("failure_count", 1) == 0,
        "no_supervisor_action": result["sheds"] == 0 and result["recoveries"] == 0 and result["cold_shapes"] == 0
                                and result["probe_failures"] == 0 and not result["supervisor_actions"],
    }
    result["checks"] = checks
    result["passed"] = all(checks.values())
    proc.terminate()
    proc.wait(timeout=60)
    if result["passed"]:
        os.unlink(log.name)
    else:
        result["daemon_log"] = log.name
    os.unlink(cfg.name)
    print(json.dumps(result, indent=1))
    sys.exit(0 if result["passed"] else 1)


if __name__ == "__main__":
    main()
