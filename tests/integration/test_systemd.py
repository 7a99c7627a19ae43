"""systemd integration: the sd_notify conversation over a real AF_UNIX datagram
socket this test owns, journald detection, and the unit files."""
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest
import requests

from conftest import BUILD, INFERCTL, INFERD, SMALL_SHAPES, SRC, free_port, needs_faults

WATCHDOG_USEC = 500_000


class NotifySocket:
    """A NOTIFY_SOCKET that records every datagram with its arrival time."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="inferd-notify-")
        self.path = os.path.join(self.dir, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.1)
        self.messages = []  # (monotonic time, line)
        self.lock = threading.Lock()
        self.done = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        while not self.done:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            self._take(data)

    def _take(self, data):
        now = time.monotonic()
        with self.lock:
            self.messages.extend((now, line) for line in data.decode().splitlines() if line)

    def lines(self):
        with self.lock:
            return [m for _, m in self.messages]

    def final_lines(self):
        """Every line, once the sender has exited: what it sent is queued on the
        socket, so the reader stops and the rest is taken here (the reader thread
        may not have run yet on a loaded machine)."""
        self.done = True
        self.thread.join()
        self.sock.setblocking(False)
        while True:
            try:
                self._take(self.sock.recv(4096))
            except OSError:  # BlockingIOError: nothing more queued
                return self.lines()

    def since(self, t):
        with self.lock:
            return [m for ts, m in self.messages if ts >= t]

    def wait_for(self, line, timeout=30, since=0.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if line in self.since(since):
                return
            time.sleep(0.02)
        raise TimeoutError(f"no {line!r} on the notify socket; got {self.lines()}")

    def close(self):
        self.done = True
        self.thread.join()
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def notify_socket():
    s = NotifySocket()
    yield s
    s.close()


def start(args, env, log, wrapper_pid_env=False):
    """Starts inferd on a free port; with wrapper_pid_env, WATCHDOG_PID is set to
    inferd's own pid by a shell that then execs it (so the pid stays the same)."""
    port = free_port()
    full_env = dict(os.environ)
    full_env.update(env)
    cmd = [str(INFERD), "--host", "127.0.0.1", "--port", str(port)] + SMALL_SHAPES + list(args)
    if wrapper_pid_env:
        cmd = ["/bin/sh", "-c", 'WATCHDOG_PID=$$ exec "$@"', "sh"] + cmd
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env)
    return proc, f"http://127.0.0.1:{port}"


def stop(proc):
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def collapse(lines):
    """Runs of identical lines become one, so periodic messages compare as one."""
    out = []
    for line in lines:
        if not out or out[-1] != line:
            out.append(line)
    return out


@needs_faults
def test_notify_sequence_and_watchdog_follow_the_heartbeat(notify_socket, tmp_path):
    log = open(tmp_path / "inferd.log", "w+")
    env = {"NOTIFY_SOCKET": notify_socket.path, "WATCHDOG_USEC": str(WATCHDOG_USEC)}
    # The glue alone: with the supervisor on, the stall below would also start a recovery.
    admin_port = free_port()
    admin = f"http://127.0.0.1:{admin_port}"  # the admin listener: no key needed
    proc, url = start(["--no-supervise", "--admin-port", str(admin_port)], env, log, wrapper_pid_env=True)
    try:
        notify_socket.wait_for("READY=1", timeout=120)
        notify_socket.wait_for("WATCHDOG=1", timeout=5)
        # Pings come at half the watchdog interval.
        t0 = time.monotonic()
        time.sleep(1.0)
        assert 2 <= notify_socket.since(t0).count("WATCHDOG=1") <= 6

        # A stalled step heartbeat stops the pings...
        r = requests.post(admin + "/admin/fault", json={"name": "heartbeat.stall"}, timeout=5)
        assert r.status_code == 200
        armed = time.monotonic()
        time.sleep(1.5)
        assert "WATCHDOG=1" not in notify_socket.since(armed + 0.4)
        # ...and they resume once it is healthy again.
        r = requests.post(admin + "/admin/fault", json={"name": "heartbeat.stall", "armed": False}, timeout=5)
        assert r.status_code == 200
        notify_socket.wait_for("WATCHDOG=1", timeout=2, since=time.monotonic())

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)

    seq = collapse(notify_socket.final_lines())
    # Activities inside Loading and Warming (STATUS=Warming: <activity>) and repeated
    # extensions may come between the fixed points; everything else is exact.
    fixed = [m for m in seq if not re.fullmatch(r"STATUS=(Loading|Warming): .*", m)]
    extend = [m for m in fixed if m.startswith("EXTEND_TIMEOUT_USEC=")]
    assert extend and all(int(m.split("=")[1]) >= 10_000_000 for m in extend)
    fixed = collapse(["EXTEND_TIMEOUT_USEC" if m.startswith("EXTEND_TIMEOUT_USEC=") else m for m in fixed])
    assert fixed == [
        "STATUS=Starting",
        "STATUS=Loading", "EXTEND_TIMEOUT_USEC",
        "STATUS=Warming", "EXTEND_TIMEOUT_USEC",
        "STATUS=Serving", "READY=1",
        "WATCHDOG=1",
        "STATUS=Draining", "STOPPING=1",
        "STATUS=Stopped",
    ], log.read()


LOADING = re.compile(r"STATUS=Loading: (\w+) (\d+)% \((\d+)/(\d+) MiB, (\d+)/(\d+) tensors\)")


def test_loading_reports_progress(notify_socket, tmp_path):
    """While Loading, STATUS= carries the load's progress, at most once per 10 %
    step and stage; afterwards /metrics and `inferctl status` tell how it went."""
    log = open(tmp_path / "inferd.log", "w+")
    proc, url = start([], {"NOTIFY_SOCKET": notify_socket.path}, log)
    try:
        notify_socket.wait_for("READY=1", timeout=120)
        status = [m for m in notify_socket.lines() if m.startswith("STATUS=")]
        warming = next(i for i, m in enumerate(status) if m.startswith("STATUS=Warming"))
        loading = [LOADING.fullmatch(m) for m in status[:warming] if m.startswith("STATUS=Loading: ")]
        assert loading and all(loading), (status, log.read())
        stages = [m[1] for m in loading]
        percents = [int(m[2]) for m in loading]
        weights = [p for s, p in zip(stages, percents) if s == "weights"]
        assert stages == ["weights"] * len(weights) + ["tokenizer", "kv_cache"], status
        assert weights[0] == 0 and weights[-1] == 100, status
        # Strictly increasing, one message per 10 % step at most.
        assert len({p // 10 for p in weights}) == len(weights) <= 11, status
        assert weights == sorted(weights) and percents[-1] == 100, status
        last = loading[-1]
        assert last[3] == last[4] and last[5] == last[6], status

        text = requests.get(url + "/metrics", timeout=10).text
        values = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
        assert float(values["inferd_load_progress"]) == 1
        assert float(values["inferd_load_bytes"]) == float(values["inferd_model_weights_bytes"]) > 0
        assert abs(float(values["inferd_load_bytes"]) / 2**20 - int(last[4])) <= 1
        assert 0 < float(values["inferd_load_seconds"]) < 120

        r = subprocess.run([str(INFERCTL), "status", "--url", url], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert re.search(rf"^load: +{last[4]} MiB in [0-9.]+s$", r.stdout, re.M), r.stdout
    finally:
        stop(proc)


def test_watchdog_pid_of_another_process_means_no_pings(notify_socket, tmp_path):
    log = open(tmp_path / "inferd.log", "w+")
    env = {"NOTIFY_SOCKET": notify_socket.path, "WATCHDOG_USEC": str(WATCHDOG_USEC), "WATCHDOG_PID": "1"}
    proc, _ = start([], env, log)
    try:
        notify_socket.wait_for("READY=1", timeout=120)
        time.sleep(0.8)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)
    lines = notify_socket.final_lines()
    assert "WATCHDOG=1" not in lines
    assert lines[-2:] == ["STOPPING=1", "STATUS=Stopped"]


def test_failed_start_reports_status(notify_socket, tmp_path):
    log = open(tmp_path / "inferd.log", "w+")
    missing = tmp_path / "missing.gguf"
    proc, _ = start(["--model", str(missing)], {"NOTIFY_SOCKET": notify_socket.path}, log)
    assert proc.wait(timeout=30) == 1
    lines = notify_socket.final_lines()
    assert "READY=1" not in lines
    assert lines[-1] == f"STATUS=Failed: {missing}: offset 0: cannot open: No such file or directory"


def test_a_headless_worker_says_it_is_joining_its_head_and_is_not_ready_without_one(notify_socket, tmp_path):
    """A worker rank whose head is not up yet stays Loading, says in STATUS whom it
    is joining, never says READY, and stops cleanly on SIGTERM."""
    log_path = tmp_path / "inferd.log"
    port = free_port()
    with open(log_path, "w+") as log:
        proc, _ = start(["--headless", "--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank", "1",
                         "--master-port", str(port)], {"NOTIFY_SOCKET": notify_socket.path}, log)
        status = f"STATUS=Loading: joining the head at 127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while status not in notify_socket.lines() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert status in notify_socket.lines()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert "READY=1" not in notify_socket.final_lines()


def test_logs_go_to_the_journal_when_stderr_is_the_journal_stream(tmp_path):
    """With JOURNAL_STREAM naming its stderr, inferd sends records to journald
    (structured); when journald is unreachable they fall back to stderr with the
    "<priority>" prefix journald's stream reader understands. JOURNAL_STREAM
    naming another file keeps the plain stderr format."""
    def run(journal_stream):
        log_path = tmp_path / f"{journal_stream}.log"
        with open(log_path, "w") as log:
            st = os.fstat(log.fileno())
            stream = f"{st.st_dev}:{st.st_ino}" if journal_stream == "match" else f"{st.st_dev}:{st.st_ino + 1}"
            proc, url = start(["--model", str(tmp_path / "none.gguf")], {"JOURNAL_STREAM": stream}, log)
            assert proc.wait(timeout=30) == 1
        return log_path.read_text()

    plain = run("other")
    assert re.search(r"^\[[-0-9 :.]+\] \[error\] lifecycle: Loading -> Failed: \S*none.gguf: offset 0: cannot open", plain, re.M)
    journal = run("match")
    assert not re.search(r"^\[[-0-9 :.]+\] \[", journal, re.M)
    if journal:  # no journald here: the fallback keeps the priority
        assert re.search(r"^<3>lifecycle: Loading -> Failed: \S*none.gguf: offset 0: cannot open", journal, re.M)
        assert re.search(r"^<6>", journal, re.M)


def test_meson_install_puts_a_hardened_unit_that_points_at_what_it_installed(tmp_path):
    """`meson install` (into a DESTDIR) lays out the binaries, the unit, the example
    configuration and the docs; the unit names the installed paths, passes
    `systemd-analyze verify` and scores as hardened in `systemd-analyze security`."""
    dest = tmp_path / "root"
    r = subprocess.run(["meson", "install", "-C", str(BUILD), "--no-rebuild", "--destdir", str(dest)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    info = {o["name"]: o["value"] for o in json.loads(subprocess.run(
        ["meson", "introspect", "--buildoptions", str(BUILD)], capture_output=True, text=True, timeout=60).stdout)}
    prefix = pathlib.PurePosixPath(info["prefix"])

    def installed(*parts):
        return dest / pathlib.PurePosixPath(prefix, *parts).relative_to("/")

    bindir, sysconfdir = installed(info["bindir"]), pathlib.PurePosixPath(prefix, info["sysconfdir"])
    assert os.access(bindir / "inferd", os.X_OK) and os.access(bindir / "inferctl", os.X_OK)
    config = dest / sysconfdir.relative_to("/") / "inferd" / "inferd.toml"
    assert config.read_text() == (SRC / "etc" / "inferd.toml").read_text()
    assert (installed(info["datadir"], "doc", "inferd") / "OPERATIONS.md").is_file()
    unit = installed("lib", "systemd", "system", "inferd.service")
    text = unit.read_text()
    exec_start = f"ExecStart={pathlib.PurePosixPath(prefix, info['bindir'])}/inferd --config {sysconfdir}/inferd/inferd.toml"
    assert exec_start + "\n" in text and not re.search(r"@[a-z]+@", text)
    assert "DynamicUser=yes" in text and "\nUser=" not in text
    # The worker rank's unit: the same hardening, its own configuration.
    worker = installed("lib", "systemd", "system", "inferd-worker.service").read_text()
    assert f"--config {sysconfdir}/inferd/worker.toml\n" in worker and not re.search(r"@[a-z]+@", worker)
    assert worker.replace("worker.toml", "inferd.toml").count("\n") == text.count("\n")
    assert (dest / sysconfdir.relative_to("/") / "inferd" / "worker.toml").read_text() == (SRC / "etc" / "worker.toml").read_text()

    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    # verify checks that ExecStart's binary exists: point it at the installed one.
    checked = tmp_path / "inferd.service"
    checked.write_text(text.replace(f"{pathlib.PurePosixPath(prefix, info['bindir'])}/inferd", str(bindir / "inferd")))
    r = subprocess.run([tool, "verify", str(checked)], capture_output=True, text=True, timeout=60)
    complaints = [l for l in (r.stdout + r.stderr).splitlines() if "inferd.service" in l]
    assert r.returncode == 0 and not complaints, r.stdout + r.stderr
    # Exposure 0.0 (locked down) to 10.0 (exposed); the report is in docs/OPERATIONS.md.
    r = subprocess.run([tool, "security", "--offline=true", str(checked)], capture_output=True, text=True, timeout=60)
    level = re.search(r"Overall exposure level for inferd.service: ([0-9.]+)", r.stdout)
    assert level and float(level.group(1)) <= 3.0, r.stdout
