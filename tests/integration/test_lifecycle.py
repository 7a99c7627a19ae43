"""The daemon's start-up, shutdown and configuration errors, seen from outside."""
import os
import signal
import subprocess
import threading
import time

import pytest

import conftest
from conftest import (INFERD, default_model, faults_built_in, free_port, metric, needs_faults, wait_until,
                      write_config)


def run_inferd(args, env=None, timeout=30):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([str(INFERD)] + list(args), capture_output=True, text=True, timeout=timeout, env=full_env)


def test_help_and_version():
    r = run_inferd(["--help"])
    assert r.returncode == 0
    assert "--max-num-batched-tokens" in r.stdout and "--config FILE" in r.stdout
    assert "--admin-api-key-file TEXT" in r.stdout and "--admin-port N" in r.stdout
    r = run_inferd(["--version"])
    assert r.returncode == 0
    assert r.stdout.startswith("inferd ")
    assert ("fault points built in" in r.stdout) == faults_built_in()


def test_a_daemon_that_misses_its_start_timeout_is_not_left_running(monkeypatch):
    # The harness: a start that times out gives the caller nothing to stop, so it
    # stops the daemon itself (a slow build, e.g. a sanitizer's, left them running).
    procs = []
    real_popen = subprocess.Popen

    def popen(*a, **kw):
        procs.append(real_popen(*a, **kw))
        return procs[-1]

    monkeypatch.setattr(subprocess, "Popen", popen)
    try:
        with pytest.raises(TimeoutError):
            conftest.Daemon(["--model", default_model()], wait_state="Serving", timeout=0.2)
        assert len(procs) == 1
        assert procs[0].poll() is not None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_config_error_exits_2_with_one_line():
    path = write_config("[server]\nport = 8000\n[engine]\nmax_num_seqs = 0\n")
    try:
        r = run_inferd(["--config", path])
    finally:
        os.unlink(path)
    assert r.returncode == 2
    assert r.stderr == f"inferd: {path}:4: [engine] max_num_seqs: must be between 1 and 4096, got 0\n"


def test_bad_log_pattern_exits_2_naming_file_line_and_key():
    path = write_config("[health]\nenable = true\nlog_patterns = \"\"\"\ngpu warn Xid [0-9]+\ndisk critical I/O error (\n\"\"\"\n")
    try:
        r = run_inferd(["--config", path])
    finally:
        os.unlink(path)
    assert r.returncode == 2, r.stderr
    assert r.stderr == (f"inferd: {path}:3: [health] log_patterns: line 2 'disk critical I/O error (': "
                        "log pattern 'I/O error (' (disk): missing closing parenthesis\n")


def test_bad_flag_exits_2_naming_it():
    r = run_inferd(["--max-num-seqs", "many"])
    assert r.returncode == 2
    assert r.stderr == "inferd: --max-num-seqs: expected an integer, got 'many'\n"
    r = run_inferd(["--no-such-flag"])
    assert r.returncode == 2
    assert r.stderr == "inferd: --no-such-flag: unknown flag (see --help)\n"


def test_wedged_load_ends_at_load_timeout():
    """A load that hangs (fault point load.stall) fails at [engine] load_timeout_s, exit 1."""
    port = free_port()
    start = time.monotonic()
    r = run_inferd(["--host", "127.0.0.1", "--port", str(port), "--load-timeout", "2", "--no-warmup"],
                   env={"INFERD_FAULTS": "load.stall=600000"}, timeout=120)
    elapsed = time.monotonic() - start
    assert r.returncode == 1, r.stderr
    assert "fault point load.stall: the load hangs for 600000 ms" in r.stderr
    assert "the model load did not finish within 2 s ([engine] load_timeout_s); giving up" in r.stderr
    assert "Loading -> Failed" in r.stderr
    assert elapsed < 60, elapsed


@needs_faults
def test_sigterm_during_a_stuck_load_stops_without_waiting_for_it(start_daemon):
    """SIGTERM while a load hangs (load.stall): the daemon stops (exit 0) after a
    bounded wait for its start-up work instead of joining a load that never returns."""
    d = start_daemon(["--no-warmup"], env={"INFERD_FAULTS": "load.stall=600000"}, wait_state=None)
    deadline = time.monotonic() + 60
    while "fault point load.stall" not in d.output() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert d.state() == "Loading"
    d.signal(signal.SIGTERM)
    assert d.wait(timeout=60) == 0
    out = d.output()
    assert "start-up work still running (Stopped): not waiting for it" in out


def test_missing_model_fails_naming_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "model.gguf"
    port = free_port()
    r = run_inferd(["--host", "127.0.0.1", "--port", str(port), "--model", str(missing)])
    assert r.returncode == 1
    assert f"{missing}: offset 0: cannot open: No such file or directory" in r.stderr
    assert "Loading -> Failed" in r.stderr


def test_sigterm_drains_and_exits_0(start_daemon):
    d = start_daemon([])
    assert d.get("/health/live").status_code == 200
    d.signal(signal.SIGTERM)
    assert d.wait(timeout=15) == 0
    out = d.output()
    assert "Serving -> Draining: SIGTERM" in out
    assert "Draining -> Stopped: drained" in out


def test_sigint_stops_too(start_daemon):
    d = start_daemon([])
    d.signal(signal.SIGINT)
    assert d.wait(timeout=15) == 0
    assert "Serving -> Draining: SIGINT" in d.output()


def test_drain_waits_for_a_request_in_flight(start_daemon):
    """A generation running when SIGTERM arrives finishes before the process exits."""
    # Supervision off: its generation probe would also count as running, and a
    # SIGTERM timed by it could come before this request was sent. (So could
    # `first` while the gauges still counted it: waited out below.)
    cfg = write_config("[server]\ndrain_timeout_s = 60\n[health]\nenable = false\n")
    try:
        d = start_daemon(["--config", cfg])
        model = d.get("/v1/models").json()["data"][0]["id"]
        first = d.post("/v1/completions", json={"model": model, "prompt": "Hi", "max_tokens": 1})
        if first.status_code in (404, 503):
            pytest.skip(f"no generation to keep a request in flight ({first.status_code})")
        result = {}
        held = {"model_name": model}

        def queued():
            return metric(d, "vllm:num_requests_running", held) + metric(d, "vllm:num_requests_waiting", held)

        # The gauges are published once a step ends: `first`'s answer can leave
        # before its step has recounted the waiting requests, so they may still
        # count it. Wait until they do not, or they could pass for the next one.
        assert wait_until(lambda: queued() == 0, 60)

        def generate():
            result["r"] = d.post("/v1/completions", json={"model": model, "prompt": "Once upon a time",
                                                          "max_tokens": 200, "ignore_eos": True}, timeout=120)

        t = threading.Thread(target=generate)
        t.start()
        # SIGTERM once the engine holds the request (a fixed sleep could end
        # before a loaded machine sent it).
        assert wait_until(lambda: "r" in result or queued() > 0, 60)
        assert "r" not in result, "the generation ended before SIGTERM"
        d.signal(signal.SIGTERM)
        t.join(timeout=120)
        assert d.wait(timeout=60) == 0
        assert result["r"].status_code == 200
        assert result["r"].json()["usage"]["completion_tokens"] == 200
        assert "Draining -> Stopped: drained" in d.output()
    finally:
        os.unlink(cfg)


def test_second_start_on_a_busy_port_fails_clearly(start_daemon):
    first = start_daemon([])
    r = run_inferd(["--host", "127.0.0.1", "--port", str(first.port)])
    assert r.returncode == 1
    assert f"127.0.0.1:{first.port}" in r.stderr and "Address already in use" in r.stderr
    assert "Starting -> Failed" in r.stderr
    assert first.get("/health/live").status_code == 200


def test_sighup_reloads_the_log_level_only(start_daemon, tmp_path):
    cfg = tmp_path / "inferd.toml"
    cfg.write_text('[log]\nlevel = "info"\n')
    d = start_daemon(["--config", str(cfg)])
    cfg.write_text('[log]\nlevel = "debug"\n[engine]\nblock_size = 32\n')
    d.signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "SIGHUP: log level debug" not in d.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    out = d.output()
    assert "SIGHUP: log level debug" in out
    assert "only [log] level reloads" in out
    cfg.write_text("[log]\nlevel = 3\n")
    d.signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "keeping the running configuration" not in d.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert f"{cfg}:2: [log] level: expected a string, got an integer" in d.output()
    assert d.get("/health/live").status_code == 200


@needs_faults
def test_fault_points_from_env_and_admin_route(start_daemon):
    d = start_daemon([], env={"INFERD_FAULTS": "test.one=5,test.two"})
    assert d.admin_get("/admin/fault").json() == {"armed": {"test.one": "5", "test.two": ""}}
    r = d.admin_post("/admin/fault", json={"name": "test.three", "value": 7})
    assert r.status_code == 200
    assert r.json() == {"name": "test.three", "armed": True, "value": "7"}
    assert d.admin_post("/admin/fault", json={"name": "test.one", "armed": False}).status_code == 200
    assert d.admin_get("/admin/fault").json() == {"armed": {"test.three": "7", "test.two": ""}}
    bad = d.admin_post("/admin/fault", json={"value": 1})
    assert bad.status_code == 400
    assert "name" in bad.json()["error"]["message"]
    assert d.admin_post("/admin/fault", json={"name": "x", "armed": "no"}).status_code == 400


@needs_faults
def test_bad_fault_spec_exits_2():
    r = run_inferd(["--port", str(free_port())], env={"INFERD_FAULTS": "=1"})
    assert r.returncode == 2
    assert r.stderr == "inferd: INFERD_FAULTS: fault item '=1' has no name\n"


@pytest.mark.skipif(faults_built_in(), reason="checks a build without fault points (-Dfaults=false)")
def test_a_build_without_fault_points_refuses_them(start_daemon):
    r = run_inferd(["--port", str(free_port())], env={"INFERD_FAULTS": "heartbeat.stall"})
    assert r.returncode == 2
    assert r.stderr == ("inferd: INFERD_FAULTS is set, but this build has no fault points; "
                        "configure with -Dfaults=true\n")
    assert "no fault points" in run_inferd(["--version"]).stdout
    d = start_daemon([])
    assert d.admin_get("/admin/fault").status_code == 404
    assert d.admin_post("/admin/fault", json={"name": "heartbeat.stall"}).status_code == 404
