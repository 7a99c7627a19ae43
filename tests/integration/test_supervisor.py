"""The supervisor with real faults: a corrupted answer, a wedged step, error lines
on stderr, and memory pressure (replayed from recorded /proc files and real, from
a child that allocates). Each test asserts what the supervisor did, and what the
clients saw: nothing in flight hangs or vanishes."""
import re
import socket
import subprocess
import sys
import threading
import time

import pytest
import requests

from conftest import INFERCTL, default_model, faults_built_in, metric, needs_faults, scaled, wait_until, write_proc

SUPERVISED = ["--model", default_model(), "--health-interval-ms", "100"]


def wait_state(d, states, timeout):
    """Polls /health/ready until its state is one of `states`; returns (state, seconds waited)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        s = d.state()
        if s in states:
            return s, time.monotonic() - t0
        time.sleep(0.02)
    raise TimeoutError(f"never reached {states}; now {d.state()}\n{d.output()[-3000:]}")


def log_samples(d, n):
    """Waits until the log monitor has taken n more samples: what it would see it
    has seen (counted, not timed: a loaded machine samples late)."""
    def taken():
        return metric(d, "inferd_monitor_samples_total", {"monitor": "log"})
    start = taken()
    assert wait_until(lambda: taken() >= start + n, 60), d.output()[-3000:]


def wait_golden(d):
    deadline = time.monotonic() + 30
    while d.get("/health/generate").status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.1)


@needs_faults
def test_probe_mismatch_recovers_and_the_probe_passes_again(start_daemon):
    d = start_daemon(SUPERVISED + ["--probe-interval", "0"])
    wait_golden(d)
    golden = d.get("/health/generate").json()
    assert golden["ok"] and golden["text"]
    assert d.get("/health_generate").json()["text"] == golden["text"]

    assert d.admin_post("/admin/fault", json={"name": "logits.corrupt"}).status_code == 200
    t0 = time.monotonic()
    bad = d.admin_post("/admin/probe", json={})
    assert bad.status_code == 503 and "golden" in bad.json()["reason"]
    _, detect = wait_state(d, {"Recovering", "Warming"}, 10)
    d.admin_post("/admin/fault", json={"name": "logits.corrupt", "armed": False})
    _, _ = wait_state(d, {"Serving"}, 180)
    mttr = time.monotonic() - t0
    ok = d.admin_post("/admin/probe", json={})
    assert ok.status_code == 200 and ok.json()["text"] == golden["text"]
    assert metric(d, "inferd_recoveries_total") == 1
    log = d.output()
    assert "supervisor: recover: probe: answered" in log and "Serving -> Recovering" in log
    # The decision is a record with fields, and the report says what came of it.
    assert "[decision=1 action=recover level=critical monitors=probe] supervisor: recover" in log
    assert "[decision=1 action=recover recovery_seconds=" in log
    report = d.admin_get("/admin/supervisor").json()
    assert report["recoveries_in_window"] == 1 and report["max_recoveries"] == 3
    [rec] = report["decisions"]
    assert rec["action"] == "recover" and rec["monitors"] == ["probe"]
    assert rec["outcome"].startswith("recovered in ")
    assert {m["monitor"] for m in report["monitors"]} >= {"psi", "meminfo", "process", "log", "step_deadline"}
    print(f"probe mismatch: detected in {detect:.2f} s, reopened after {mttr:.1f} s")


@needs_faults
def test_wedged_step_requeues_what_streamed_nothing_and_ends_what_did(start_daemon):
    d = start_daemon(SUPERVISED + ["--step-deadline-floor", "1.5"])
    # A stream that has produced tokens when the step wedges.
    body = {"prompt": "Count: 1, 2, 3,", "max_tokens": 400, "ignore_eos": True, "stream": True}
    stream = requests.post(d.url + "/v1/completions", json=body, stream=True, timeout=300)
    lines = stream.iter_lines()
    chunks = [next(l for l in lines if l) for _ in range(3)]
    assert all(c.startswith(b"data: ") for c in chunks)

    assert d.admin_post("/admin/fault", json={"name": "step.stall", "value": "600000"}).status_code == 200
    t0 = time.monotonic()
    # A request submitted behind the wedge: it has streamed nothing, so it is held and runs after reopen.
    held = {}

    def late():
        held["r"] = requests.post(d.url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 5}, timeout=300)

    waiter = threading.Thread(target=late)
    waiter.start()
    _, detect = wait_state(d, {"Recovering", "Warming"}, 20)
    rest = b"\n".join(l for l in lines if l)
    assert b'"error"' in rest and b"recovery" in rest and rest.endswith(b"data: [DONE]")
    wait_state(d, {"Serving"}, 180)
    mttr = time.monotonic() - t0
    waiter.join(timeout=120)
    assert held["r"].status_code == 200, held["r"].text
    assert held["r"].json()["usage"]["completion_tokens"] == 5
    assert metric(d, "inferd_recoveries_total") == 1
    log = d.output()
    assert "wedge suspected" in log and "requests held to run again" in log
    assert re.search(r"action=recover level=critical monitors=[a-z_,]*step_deadline", log)
    probe = d.admin_post("/admin/probe", json={})
    assert probe.status_code == 200, probe.text
    print(f"wedge: detected {detect:.2f} s after the stall (deadline 1.5 s), reopened after {mttr:.1f} s")


@needs_faults
def test_a_kernel_stuck_in_its_loop_is_cancelled_by_the_recovery(start_daemon):
    # kernel.spin: the next matmul's task loop never ends (real work, no sleep
    # that polls anything). The step deadline sees the wedge; the reset cancels
    # the step between two tasks; the process lives on and reopens.
    d = start_daemon(SUPERVISED + ["--step-deadline-floor", "1.5", "--probe-interval", "0"])
    assert d.admin_post("/admin/fault", json={"name": "kernel.spin"}).status_code == 200
    t0 = time.monotonic()
    # It has streamed nothing when its step is cancelled: held, then run after reopen.
    r = d.post("/v1/completions", json={"prompt": "Hello", "max_tokens": 5}, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 5
    mttr = time.monotonic() - t0
    assert d.proc.poll() is None and d.state() == "Serving"
    assert metric(d, "inferd_recoveries_total") == 1
    log = d.output()
    assert "engine step cancelled by a reset" in log and "requests held to run again" in log
    assert re.search(r"action=recover level=critical monitors=[a-z_,]*step_deadline", log)
    assert d.admin_post("/admin/probe", json={}).status_code == 200
    print(f"kernel stuck in its loop: answered after {mttr:.1f} s (deadline 1.5 s, then the re-warm)")


@needs_faults
def test_when_the_daemon_fails_every_request_in_flight_is_answered(start_daemon):
    # No recovery allowed: the wedge fails the process. Before it exits, the
    # stream that had tokens gets an error event and [DONE], and the request
    # behind it a JSON error; neither connection just drops.
    d = start_daemon(SUPERVISED + ["--step-deadline-floor", "1.5", "--max-recoveries", "0", "--probe-interval", "0"])
    body = {"prompt": "Count: 1, 2, 3,", "max_tokens": 400, "ignore_eos": True, "stream": True}
    stream = requests.post(d.url + "/v1/completions", json=body, stream=True, timeout=300)
    lines = stream.iter_lines()
    assert next(l for l in lines if l).startswith(b"data: ")
    assert d.admin_post("/admin/fault", json={"name": "step.stall", "value": "600000"}).status_code == 200
    waiting = {}

    def late():
        waiting["r"] = requests.post(d.url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 5}, timeout=300)

    waiter = threading.Thread(target=late)
    waiter.start()
    rest = b"\n".join(l for l in lines if l)
    assert b'"error"' in rest and b"inferd failed" in rest and rest.endswith(b"data: [DONE]")
    waiter.join(timeout=120)
    r = waiting["r"]
    assert r.status_code in (500, 503), r.text
    assert "inferd" in r.json()["error"]["message"]
    assert d.wait(timeout=60) == 1


@needs_faults
def test_error_lines_count_only_after_the_baseline_and_shed(start_daemon):
    d = start_daemon(SUPERVISED + ["--probe-interval", "0"],
                     env={"INFERD_FAULTS": "log.inject=[rank0] UCX  ERROR ibv_reg_mr failed: rcache"})
    assert metric(d, "inferd_log_lines_total", {"category": "ucx", "baseline": "before"}) == 1
    assert metric(d, "inferd_log_lines_total", {"category": "ucx", "baseline": "after"}) == 0
    log_samples(d, 5)
    assert d.state() == "Serving"  # a line before the baseline is only counted

    line = "NCCL WARN Call to ibv_reg_mr failed; NCCL error: unhandled system error"
    assert d.admin_post("/admin/fault", json={"name": "log.inject", "value": line}).status_code == 200
    _, detect = wait_state(d, {"Degraded"}, 5)
    r = d.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1})
    assert r.status_code == 503 and r.headers.get("Retry-After") and "shedding" in r.json()["error"]["message"]
    assert metric(d, "inferd_log_lines_total", {"category": "nccl", "baseline": "after"}) >= 1
    wait_state(d, {"Serving"}, 10)  # calm again
    assert line in d.output()  # passed through to the real stderr
    assert metric(d, "inferd_sheds_total") == 1
    shed, unshed = d.admin_get("/admin/supervisor").json()["decisions"]
    assert (shed["action"], shed["level"], shed["monitors"], shed["outcome"]) == ("shed", "shed", ["log"], "state Degraded")
    assert (unshed["action"], unshed["outcome"]) == ("unshed", "state Serving")
    assert "[decision=1 action=shed level=shed monitors=log] supervisor: shed" in d.output()
    status = subprocess.run([str(INFERCTL), "status", "--url", d.url, "--admin-api-key", d.admin_key],
                            capture_output=True, text=True, timeout=30)
    assert "\nlast:     #2 unshed: calm for 8 samples -> state Serving\n" in status.stdout, status.stdout
    print(f"error line: shed {detect:.2f} s after it was written")


# Text a client chooses that the log patterns would match (see health/log_scanner.cpp).
LIBRARY_LOOKALIKE = "NCCL WARN NCCL error UCX  ERROR cudaError CUDA error oom-kill Killed process ibv_x failed"
# A request id cannot hold spaces; these match without them.
LOOKALIKE_ID = "NCCL-error:cudaError:oom-kill:CUBLAS_STATUS_x:ibv_reg_mr-failed:mlx5-error"


def test_client_text_in_the_log_never_reaches_the_log_scanner(start_daemon, tmp_path):
    """The daemon logs text clients choose (request ids, paths); only what
    libraries write to fd 2 is scanned, so that text raises no log signal."""
    cfg = tmp_path / "inferd.toml"
    # 1 s, stretched for a sanitized daemon, whose one-token answer may take longer.
    cfg.write_text(f"[server]\nrequest_timeout_s = {round(scaled(1))}\n")
    d = start_daemon(SUPERVISED + ["--probe-interval", "0", "--log-level", "debug", "--config", str(cfg)])
    hdr = {"X-Request-Id": LOOKALIKE_ID}
    assert d.post("/v1/completions", json={"model": LIBRARY_LOOKALIKE, "prompt": "hi", "max_tokens": 1},
                  headers=hdr).status_code == 404
    assert d.post("/v1/completions", json={"prompt": LIBRARY_LOOKALIKE, "max_tokens": 1},
                  headers=hdr).status_code == 200
    assert d.post("/v1/completions", json={"prompt": "hi", "max_tokens": "cudaError oom-kill"},
                  headers=hdr).status_code == 400
    assert d.get("/" + LIBRARY_LOOKALIKE, headers=hdr).status_code == 404
    with socket.create_connection(("127.0.0.1", d.port), timeout=5) as s:
        s.sendall(f"GET /{LIBRARY_LOOKALIKE} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        assert s.recv(100).startswith(b"HTTP/1.1 400 ")
    # Longer than the request timeout: the daemon logs the request id.
    slow = d.post("/v1/completions", json={"prompt": "Count:", "max_tokens": 900, "ignore_eos": True}, headers=hdr)
    assert slow.status_code == 504
    deadline = time.monotonic() + 5
    while f"http: request {LOOKALIKE_ID} (/v1/completions) timed out" not in d.output():
        assert time.monotonic() < deadline, d.output()[-3000:]
        time.sleep(0.05)
    log_samples(d, 10)
    for category in ("nccl", "ucx", "cuda", "ibverbs", "oom"):
        for baseline in ("before", "after"):
            assert metric(d, "inferd_log_lines_total", {"category": category, "baseline": baseline}) == 0, category
    assert d.state() == "Serving"
    assert metric(d, "inferd_sheds_total") == 0 and metric(d, "inferd_recoveries_total") == 0
    log = next(m for m in d.admin_get("/admin/supervisor").json()["monitors"] if m["monitor"] == "log")
    assert log["level"] == "ok", log
    if faults_built_in():
        # A line a library writes to fd 2 is still seen.
        line = "[rank0] UCX  ERROR ibv_reg_mr failed: rcache"
        assert d.admin_post("/admin/fault", json={"name": "log.inject", "value": line}).status_code == 200
        wait_state(d, {"Degraded"}, 5)
        assert metric(d, "inferd_log_lines_total", {"category": "ucx", "baseline": "after"}) == 1


def test_replayed_memory_and_pressure_traces_shed_and_unshed(start_daemon, tmp_path):
    write_proc(tmp_path, 10_000_000)
    d = start_daemon(SUPERVISED + ["--procfs-root", str(tmp_path), "--probe-interval", "0"])
    # MemAvailable under the shed floor (15% of 16 GB).
    write_proc(tmp_path, 1_500_000)
    wait_state(d, {"Degraded"}, 5)
    assert "MemAvailable" in d.get("/health/ready").json()["activity"]
    write_proc(tmp_path, 10_000_000)
    wait_state(d, {"Serving"}, 10)
    # Memory pressure stall above the shed threshold.
    write_proc(tmp_path, 10_000_000, some_avg10=35.0)
    wait_state(d, {"Degraded"}, 5)
    psi = {"resource": "memory", "kind": "some", "window": "avg10"}
    assert metric(d, "inferd_psi_percent", psi) == 35.0
    assert metric(d, "inferd_psi_percent", {**psi, "resource": "io"}) == 35.0
    assert metric(d, "inferd_mem_available_bytes") == 10_000_000 * 1024
    write_proc(tmp_path, 10_000_000)
    wait_state(d, {"Serving"}, 10)
    assert metric(d, "inferd_sheds_total") == 2 and metric(d, "inferd_recoveries_total") == 0


HOG = r"""
import sys
n = int(sys.argv[1])
blocks = [bytearray(64 << 20) for _ in range(n // (64 << 20))]  # zero-filled: resident
print("ready", flush=True)
sys.stdin.read()
"""


def mem_available():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024


@pytest.mark.serial
def test_real_memory_pressure_sheds_until_released(start_daemon, tmp_path):
    # Floors under what is free now, by more than a sanitized daemon takes itself
    # (ThreadSanitizer's shadow: about 5 GiB), so the daemon starts Serving and a
    # child taking what is left above the shed floor, plus 1 GiB, crosses them.
    avail = mem_available()
    shed = avail - (7 << 30)
    cfg = tmp_path / "health.toml"
    cfg.write_text(f"[health]\nmem_warn_bytes = {avail - (13 << 29)}\nmem_warn_fraction = 0.0\n"
                   f"mem_shed_bytes = {shed}\nmem_shed_fraction = 0.0\n")
    d = start_daemon(SUPERVISED + ["--probe-interval", "0", "--config", str(cfg)])
    assert d.state() == "Serving"
    need = mem_available() - shed + (1 << 30)
    hog = subprocess.Popen([sys.executable, "-c", HOG, str(need)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert hog.stdout.readline().strip() == b"ready"
        _, detect = wait_state(d, {"Degraded"}, 10)
        assert d.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1}).status_code == 503
    finally:
        hog.stdin.close()
        hog.wait(timeout=30)
    wait_state(d, {"Serving"}, 20)
    assert d.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1}).status_code == 200
    print(f"real memory pressure: shed {detect:.2f} s after the child allocated")


@needs_faults
def test_too_many_recoveries_fail_the_process(start_daemon):
    d = start_daemon(SUPERVISED + ["--probe-interval", "0", "--max-recoveries", "1"])
    wait_golden(d)
    assert d.admin_post("/admin/fault", json={"name": "logits.corrupt"}).status_code == 200
    assert d.admin_post("/admin/probe", json={}).status_code == 503
    wait_state(d, {"Serving"}, 180)  # the first recovery; the fault is still armed
    deadline = time.monotonic() + 60
    while d.proc.poll() is None and time.monotonic() < deadline:
        try:
            d.admin_post("/admin/probe", json={})
        except requests.RequestException:
            pass  # it is going down
        time.sleep(0.2)
    assert d.wait(timeout=30) == 1
    assert "recoveries already in the last" in d.output()


def test_too_little_memory_at_start_refuses_to_start(start_daemon, tmp_path):
    write_proc(tmp_path, 2_000_000)  # 2 GB available; the reserve asks for 3 GB
    cfg = tmp_path / "reserve.toml"
    cfg.write_text(f"[health]\nmin_available_bytes = {3_000_000_000}\n")
    d = start_daemon(SUPERVISED + ["--procfs-root", str(tmp_path), "--config", str(cfg)], wait_state=None)
    assert d.wait(timeout=60) == 1
    assert "below [health] min_available_bytes (2861 MiB)" in d.output()


def test_each_monitor_samples_at_its_own_interval(start_daemon, tmp_path):
    write_proc(tmp_path, 10_000_000)
    cfg = tmp_path / "intervals.toml"
    cfg.write_text("[health]\nmeminfo_interval_ms = 2000\nprocess_interval_ms = 1000\n")
    d = start_daemon(SUPERVISED + ["--procfs-root", str(tmp_path), "--probe-interval", "0", "--config", str(cfg)])

    def samples():
        return {m: metric(d, "inferd_monitor_samples_total", {"monitor": m}) for m in ("psi", "meminfo", "process")}
    before, t0 = samples(), time.monotonic()
    time.sleep(4)
    after, secs = samples(), time.monotonic() - t0
    n = {m: after[m] - before[m] for m in after}
    # psi at the common 100 ms; meminfo every 2 s; process every 1 s (bounds allow a loaded machine).
    assert n["psi"] >= 15, n
    assert n["meminfo"] <= secs / 2 + 1, n
    assert 1 <= n["process"] <= secs + 1, n
    # A memory drop is still seen, within its own interval: by the first meminfo
    # sample after it, or the next if one was under way (counted in samples, not
    # seconds, so a loaded machine only makes it slower; one more for the poll).
    meminfo_before = metric(d, "inferd_monitor_samples_total", {"monitor": "meminfo"})
    write_proc(tmp_path, 1_500_000)
    wait_state(d, {"Degraded"}, 60)
    seen_after = metric(d, "inferd_monitor_samples_total", {"monitor": "meminfo"}) - meminfo_before
    assert 1 <= seen_after <= 3, seen_after
