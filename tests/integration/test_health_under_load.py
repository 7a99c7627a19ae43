"""The health routes on the main listener, beside 10,000 open connections (idle
ones, and slow ones trickling their headers) that the idle timeout then closes
together, and a generation load, against the real daemon: each probe, a new
connection as a load balancer makes it, is answered within HEALTH_BOUND_S. And
at the open-connection limit the daemon refuses clearly, still answers health
probes, and gives every descriptor back."""
import multiprocessing
import os
import socket
import tempfile
import threading
import time

import pytest
import requests

from conftest import default_model, fd_count, raise_fd_limit, raw_get

CONNECTIONS = 10_000
SLOW = 1_000  # of CONNECTIONS, the ones that trickle a header byte now and then
# Measured beside `stress-ng --cpu 2` on a 2-core machine also running other
# builds (load average 10 to 14): at most 218 ms once the connections were open
# (most runs under 75 ms); before health probes were triaged on the accept
# thread, 300 ms to 1.4 s. The bound leaves room for a fully loaded machine's
# scheduling; a probe queued behind the I/O threads' work shows as seconds.
# docs/PERFORMANCE.md, "Health latency".
HEALTH_BOUND_S = 0.5
IDLE_TIMEOUT_S = 12


def probe_loop(port, stop, out):
    """Both health routes every 100 ms until `stop`. In a process of its own, so
    the load threads' GIL does not count in the figures."""
    samples = []
    while not stop.is_set():
        for path in ("/health/live", "/health/ready"):
            t = time.monotonic()
            try:
                code, _, seconds = raw_get(port, path)
            except (OSError, ValueError, IndexError) as e:
                code, seconds = type(e).__name__, time.monotonic() - t
            samples.append((t, path, code, seconds))
        stop.wait(0.1)
    out.send(samples)


def generate(url, stop, counts):
    """Streams completions back to back until `stop`."""
    body = {"prompt": "Once upon a time", "max_tokens": 48, "stream": True, "temperature": 0}
    while not stop.is_set():
        with requests.post(url + "/v1/completions", json=body, stream=True, timeout=(10, 120)) as r:
            ok = r.status_code == 200 and any(line == b"data: [DONE]" for line in r.iter_lines())
        counts["ok" if ok else "failed"] = counts.get("ok" if ok else "failed", 0) + 1


def trickle(socks, stop):
    """A header byte on each slow connection in turn, each about once a second."""
    head = b"GET /health/live HTTP/1.1\r\nHost: t\r\nX-Slow: "
    sent = 0
    while not stop.is_set():
        for s in socks:
            try:
                s.send(head[sent:sent + 1] if sent < len(head) else b"a")
            except OSError:
                pass
        sent += 1
        stop.wait(1.0)


# Alone (meson's integration_serial): its bound is a latency, which another
# test's daemon warming up beside it would add to.
@pytest.mark.serial
def test_main_listener_health_answers_fast_beside_10k_connections_and_generation(start_daemon):
    if raise_fd_limit() < CONNECTIONS + 500:
        pytest.skip(f"RLIMIT_NOFILE allows fewer than {CONNECTIONS + 500} descriptors")
    # The probes span the worst moments for the I/O threads: the 10,000
    # connections opening at once, held open (the slow ones trickling), and all
    # closed together by the idle timeout, with generations streaming throughout.
    cfg = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    cfg.write(f"[server]\nidle_timeout_s = {IDLE_TIMEOUT_S}\n")
    cfg.close()
    d = start_daemon(["--config", cfg.name, "--model", default_model(), "--no-warmup",
                      "--max-connections", str(CONNECTIONS + 200)])
    os.unlink(cfg.name)
    pid = d.proc.pid
    fds0 = fd_count(pid)

    # The prober forks before any thread or connection of the test exists.
    ctx = multiprocessing.get_context("fork")
    stop_probe = ctx.Event()
    rx, tx = ctx.Pipe(duplex=False)
    prober = ctx.Process(target=probe_loop, args=(d.port, stop_probe, tx))
    prober.start()

    socks = []
    stop = threading.Event()
    counts = {}
    threads = [threading.Thread(target=generate, args=(d.url, stop, counts)) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        t_open = time.monotonic()
        for _ in range(CONNECTIONS):
            socks.append(socket.create_connection(("127.0.0.1", d.port), timeout=10))
        for s in socks:
            s.setblocking(False)
        threads.append(threading.Thread(target=trickle, args=(socks[:SLOW], stop)))
        threads[-1].start()
        # Accepted: from here on the connections are open, then closed together.
        held, t_held = 0, None
        while time.monotonic() - t_open < IDLE_TIMEOUT_S - 1:
            held = max(held, fd_count(pid) - fds0)
            if held >= CONNECTIONS and t_held is None:
                t_held = time.monotonic()
            time.sleep(0.2)
        # Past the idle timeout: every connection closed by the daemon.
        while time.monotonic() - t_open < IDLE_TIMEOUT_S + 8:
            time.sleep(0.5)
        left = fd_count(pid) - fds0
    finally:
        stop_probe.set()
        samples = rx.recv() if rx.poll(30) else []
        prober.join(timeout=10)
        stop.set()
        for t in threads:
            t.join(timeout=150)
        for s in socks:
            s.close()

    assert held >= CONNECTIONS and t_held, f"the daemon held at most {held} of the {CONNECTIONS} connections"

    def slowest(phase):
        return [(round(t - t_open, 2), path, code, round(seconds, 3))
                for t, path, code, seconds in sorted(phase, key=lambda x: -x[3])[:5]]

    # While the test opens the connections the accept thread takes them in
    # order, a probe's among them: that phase is reported, not bounded.
    opening = [x for x in samples if x[0] < t_held]
    samples = [x for x in samples if x[0] >= t_held]
    worst = slowest(samples)
    figures = (f"{held} connections held, accepted {t_held - t_open:.1f} s after the first, {left} left after the "
               f"idle timeout; {len(samples)} probes since, slowest (s after the first connection, route, status, "
               f"seconds): {worst}; while opening: {slowest(opening)}; generations {counts}")
    print(figures)
    assert samples, figures
    assert left < 20, figures  # the streams' connections, and slack
    assert all(code == 200 for _, _, code, _ in samples), figures
    assert counts.get("ok", 0) > 0 and counts.get("failed", 0) == 0, figures
    assert worst[0][3] <= HEALTH_BOUND_S, figures


def test_connections_over_the_limit_are_refused_clearly_and_leave_nothing_behind(start_daemon):
    limit = 200
    d = start_daemon(["--no-warmup", "--max-connections", str(limit)])
    pid = d.proc.pid
    fds0 = fd_count(pid)
    held = [socket.create_connection(("127.0.0.1", d.port), timeout=10) for _ in range(limit)]
    try:
        # The silent connections count once the accept thread has handed them
        # to the I/O threads (after 250 ms): until then a request may be served.
        deadline = time.monotonic() + 30
        while raw_get(d.port, "/v1/models")[0] != 503 and time.monotonic() < deadline:
            time.sleep(0.1)
        # Each connection beyond the limit gets its answer at once, whatever it sends.
        refused = []
        for _ in range(50):
            code, data, seconds = raw_get(d.port, "/v1/models")
            refused.append((code, seconds))
            assert code == 503, data
            assert b"Retry-After: 1" in data and b"too many open connections" in data, data
        assert max(s for _, s in refused) < 5, refused
        # A health probe is still answered: a liveness check must not fail
        # because clients took every connection.
        for path in ("/health/live", "/health/ready"):
            code, data, _ = raw_get(d.port, path)
            assert code == 200 and b"Connection: close" in data, data
        assert d.proc.poll() is None
    finally:
        for s in held:
            s.close()
    # Below the limit again: served, and every descriptor given back.
    deadline = time.monotonic() + 30
    while fd_count(pid) > fds0 + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert fd_count(pid) <= fds0 + 2, f"{fd_count(pid)} descriptors open, {fds0} before"
    assert d.get("/v1/models").status_code == 200
    refusals = [line for line in d.get("/metrics").text.splitlines()
                if line.startswith("inferd_http_connections_refused_total ")]
    assert refusals and float(refusals[0].split()[-1]) >= 51, refusals
