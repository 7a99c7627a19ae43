"""The gpu monitor against a fake NVML (tests/nvml/fake_nvml.cpp, loaded through
INFERD_NVML_LIBRARY) that plays a script: the engine runs on the CPU and
[health] gpu_devices = "0" makes the monitor watch the fake's GPU 0. The test
moves the script on by creating files: normal, then a thermal slowdown (warn:
metrics and the report say so, nothing is done), then Xid 79 (critical: the
supervisor recovers, as for any critical signal)."""
import subprocess
import time

from conftest import BUILD, INFERCTL, default_model, metric

FAKE_NVML = BUILD / "tests" / "libfake_nvml.so"
ARGS = ["--model", default_model(), "--health-interval-ms", "100", "--probe-interval", "0"]


def wait_until(check, what, d, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise TimeoutError(f"never saw {what}\n{d.output()[-3000:]}")


def gpu_monitor(d):
    return next(m for m in d.admin_get("/admin/supervisor").json()["monitors"] if m["monitor"] == "gpu")


def start(start_daemon, tmp_path, script):
    (tmp_path / "nvml.txt").write_text(script)
    cfg = tmp_path / "inferd.toml"
    cfg.write_text('[health]\ngpu_devices = "0"\ngpu_interval_ms = 100\n')
    return start_daemon(ARGS + ["--config", str(cfg)],
                        env={"INFERD_NVML_LIBRARY": str(FAKE_NVML),
                             "INFERD_FAKE_NVML_SCRIPT": str(tmp_path / "nvml.txt")})


def test_thermal_slowdown_warns_and_xid_79_recovers(start_daemon, tmp_path):
    throttle, xid = tmp_path / "throttle", tmp_path / "xid"
    d = start(start_daemon, tmp_path,
              f"mem_used=2147483648 mem_total=85899345920 temp=45 until={throttle}\n"
              f"temp=93 reasons=0x40 until={xid}\n"
              "temp=70 reasons=0 xid=79\n")
    gpu0 = {"gpu": "0"}
    wait_until(lambda: metric(d, "inferd_gpu_temperature_celsius", gpu0) == 45, "the first reading", d)
    assert metric(d, "inferd_gpu_up", gpu0) == 1
    assert metric(d, "inferd_gpu_memory_used_bytes", gpu0) == 2 * 2**30
    assert metric(d, "inferd_gpu_memory_total_bytes", gpu0) == 80 * 2**30
    assert metric(d, "inferd_gpu_ecc_errors", {"gpu": "0", "type": "uncorrected"}) == 0
    assert metric(d, "inferd_monitor_level", {"monitor": "gpu"}) == 0
    assert gpu_monitor(d) == {"monitor": "gpu", "level": "ok", "reason": "gpu0: 2048 of 81920 MiB used, 45 C"}
    assert "gpu monitor: watching CUDA device 0 through " + str(FAKE_NVML) in d.output()

    throttle.touch()
    slowed = {"gpu": "0", "reason": "hw_thermal_slowdown"}
    wait_until(lambda: metric(d, "inferd_gpu_clock_event_reason", slowed) == 1, "the slowdown", d)
    wait_until(lambda: gpu_monitor(d)["level"] == "warn", "the gpu monitor warn", d)
    assert gpu_monitor(d)["reason"] == "gpu0: clocks slowed: hw_thermal_slowdown"
    assert metric(d, "inferd_monitor_level", {"monitor": "gpu"}) == 1
    status = subprocess.run([str(INFERCTL), "status", "--url", d.url, "--admin-api-key", d.admin_key],
                            capture_output=True, text=True, timeout=30)
    assert "gpu warn (gpu0: clocks slowed: hw_thermal_slowdown)" in status.stdout, status.stdout
    # A warning only: nothing decided, still serving.
    assert d.admin_get("/admin/supervisor").json()["decisions"] == []
    assert d.state() == "Serving"

    xid.touch()
    wait_until(lambda: metric(d, "inferd_recoveries_total") == 1, "a recovery", d, timeout=60)
    wait_until(lambda: d.state() == "Serving", "Serving again", d, timeout=180)
    assert metric(d, "inferd_gpu_xid_events_total", {"gpu": "0", "xid": "79"}) == 1
    [rec] = d.admin_get("/admin/supervisor").json()["decisions"]
    assert (rec["action"], rec["level"], rec["monitors"]) == ("recover", "critical", ["gpu"])
    assert rec["reason"] == "gpu: gpu0: Xid 79 (GPU has fallen off the bus)"
    assert rec["outcome"].startswith("recovered in ")
    log = d.output()
    assert "gpu monitor: CUDA device 0: Xid 79 (GPU has fallen off the bus)" in log
    assert "action=recover level=critical monitors=gpu] supervisor: recover" in log
    # The recovery's rebaseline ends the signal: the fake's GPU is fine again.
    wait_until(lambda: gpu_monitor(d)["level"] == "ok", "the gpu monitor ok after the recovery", d)
    assert d.post("/v1/completions", json={"prompt": "Hello", "max_tokens": 3}).status_code == 200


def test_without_nvml_the_monitor_says_it_is_inactive(start_daemon, tmp_path):
    cfg = tmp_path / "inferd.toml"
    cfg.write_text('[health]\ngpu_devices = "0"\n')
    d = start_daemon(ARGS + ["--config", str(cfg)], env={"INFERD_NVML_LIBRARY": str(tmp_path / "no-such-nvml.so")})
    wait_until(lambda: any(m["monitor"] == "gpu" for m in d.admin_get("/admin/supervisor").json()["monitors"]),
               "the gpu monitor in the report", d)
    mon = gpu_monitor(d)
    assert mon["level"] == "ok" and mon["reason"].startswith("inactive: NVML not loaded: cannot load ")
    assert metric(d, "inferd_gpu_up", {"gpu": "0"}) is None
    assert d.state() == "Serving"


def test_the_cpu_engine_without_gpu_devices_has_no_gpu_monitor(start_daemon):
    d = start_daemon(ARGS)
    monitors = {m["monitor"] for m in d.admin_get("/admin/supervisor").json()["monitors"]}
    assert "gpu" not in monitors and "meminfo" in monitors


def test_a_gpu_that_stays_lost_recovers_once_then_fails_the_process(start_daemon, tmp_path):
    """A recovery cannot bring a GPU back: the signal stays critical after it, and
    the next decision, past the recovery budget, fails the process (exit 1) so
    that systemd restarts it."""
    lose = tmp_path / "lose"
    (tmp_path / "nvml.txt").write_text(f"until={lose}\nlost=1\n")
    cfg = tmp_path / "inferd.toml"
    cfg.write_text('[health]\ngpu_devices = "0"\ngpu_interval_ms = 100\n')
    d = start_daemon(ARGS + ["--config", str(cfg), "--max-recoveries", "1"],
                     env={"INFERD_NVML_LIBRARY": str(FAKE_NVML),
                          "INFERD_FAKE_NVML_SCRIPT": str(tmp_path / "nvml.txt")})
    wait_until(lambda: metric(d, "inferd_gpu_up", {"gpu": "0"}) == 1, "the first reading", d)
    lose.touch()
    assert d.wait(timeout=240) == 1
    log = d.output()
    assert "action=recover level=critical monitors=gpu] supervisor: recover: gpu: gpu0: lost (GPU is lost" in log
    assert "action=fail level=critical monitors=gpu]" in log and "(and 1 recoveries already in the last" in log
