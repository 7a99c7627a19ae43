"""Fixtures that start the real inferd binary on a free loopback port."""
import contextlib
import functools
import os
import pathlib
import re
import resource
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import requests

SRC = pathlib.Path(os.environ.get("INFERD_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BUILD = pathlib.Path(os.environ.get("INFERD_BUILD_DIR", SRC / "build"))
sys.path.append(str(SRC / "tools"))
import soak  # noqa: E402  (tools/soak.py: its plain-socket GET)
INFERD = BUILD / "daemon" / "inferd"
INFERCTL = BUILD / "tools" / "inferctl"


def default_model():
    env = os.environ.get("INFERD_MODEL")
    if env:
        return env
    cache = os.environ.get("INFERD_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "inferd")
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


# INFERD_TEST_TIME_SCALE stretches the helpers' time bounds below (waits for a
# state, request timeouts), for a daemon built with sanitizers, which runs
# several times slower (docs/OPERATIONS.md, "Sanitizers"). Bounds a test sets
# itself are its own.
TIME_SCALE = max(1.0, float(os.environ.get("INFERD_TEST_TIME_SCALE", "1")))


def scaled(seconds):
    return seconds * TIME_SCALE


def write_config(text):
    """A TOML file holding `text`; its path (the caller removes it)."""
    f = tempfile.NamedTemporaryFile("w", prefix="inferd-", suffix=".toml", delete=False)
    f.write(text)
    f.close()
    return f.name


def scaled_deadlines_config():
    """With INFERD_TEST_TIME_SCALE, a config file that stretches the daemon's own
    deadlines by the same factor (a warm-up phase, a request), for daemons
    started without a --config of their test's own; None without the scale."""
    if TIME_SCALE == 1:
        return None
    return write_config(f"[server]\nrequest_timeout_s = {round(scaled(600))}\n"
                        f"[warmup]\nphase_timeout_s = {scaled(300)}\n")


def wait_until(predicate, timeout):
    """Polls `predicate` until it holds or `timeout` seconds pass; its last answer.
    Tests wait for what they need to have happened, never a fixed time."""
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def metric(d, name, labels=None):
    """The value of one sample of d's /metrics with exactly these labels, or None."""
    want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
    for line in d.get("/metrics").text.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return None


def write_proc(root, available_kb, some_avg10=0.0):
    """A replayed procfs under `root` for --procfs-root: meminfo with this
    MemAvailable (of 16 GB) and pressure files with this some avg10."""
    (root / "meminfo").write_text(
        f"MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:   {available_kb} kB\n"
        "SwapTotal:             0 kB\nSwapFree:              0 kB\n")
    (root / "pressure").mkdir(exist_ok=True)
    line = f"some avg10={some_avg10:.2f} avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    for name in ("memory", "io"):
        (root / "pressure" / name).write_text(line)
    (root / "pressure" / "cpu").write_text(line.splitlines()[0] + "\n")


@functools.lru_cache(maxsize=None)
def faults_built_in():
    """Whether this build has fault points (meson -Dfaults=true), as --version says."""
    out = subprocess.run([str(INFERD), "--version"], capture_output=True, text=True, timeout=30).stdout
    return "fault points built in" in out


# Tests that arm fault points (INFERD_FAULTS, /admin/fault) run only in builds
# that have them, as `tools/dev.sh test` configures; elsewhere they are skipped.
needs_faults = pytest.mark.skipif(not faults_built_in(), reason="this build has no fault points (-Dfaults=true)")


# In a sanitizer build (meson -Db_sanitize=...) a report ends the process with
# status 66 (tools/sanitizers/options.cpp). A daemon a test expected to fail, or
# one stopped by the test, can hide that status: its log is read for reports.
SANITIZER_REPORT = re.compile(r"(ERROR|WARNING|SUMMARY): \w*Sanitizer|: runtime error: ")


def sanitizer_report(text):
    """The sanitizer report in `text` (from its first line on), or None."""
    m = SANITIZER_REPORT.search(text)
    return text[text.rfind("\n", 0, m.start()) + 1:] if m else None


def admin_key_file(key):
    """A file holding `key`, as an operator would write it (owner-only, newline at the end)."""
    f = tempfile.NamedTemporaryFile("w", prefix="inferd-admin-", suffix=".key", delete=False)
    os.chmod(f.name, 0o600)
    f.write(key + "\n")
    f.close()
    return f.name


def raise_fd_limit():
    """The soft RLIMIT_NOFILE up to the hard one (a daemon started later inherits it); the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def raw_get(port, path, timeout=10):
    """One GET on a new connection over a plain socket, as a load balancer's
    probe makes it (tools/soak.py's): (status, the whole response, seconds it took)."""
    code, data, _, seconds = soak.raw_get(port, path, timeout)
    return code, data, seconds


_ports_given = set()

# Under pytest-xdist (`-n N`, as meson's `integration` test runs) each worker
# takes only the ports p with p / 2 of its own residue modulo N (Linux offers
# bind() even ports), so two workers never hand out the same port before
# either daemon has bound it.
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


@contextlib.contextmanager
def two_rank_group(args):
    """A head and a headless worker forming a tensor-parallel group of two on
    loopback, each started with `args`; yields the head once it serves."""
    group = ["--tensor-parallel-size", "2", "--nnodes", "2", "--master-addr", "127.0.0.1",
             "--master-port", str(free_port(2))]
    worker = Daemon(list(args) + group + ["--node-rank", "1", "--headless"])
    try:
        head = Daemon(list(args) + group + ["--node-rank", "0"], wait_state="Serving", timeout=180)
        try:
            yield head
        finally:
            head.stop()
    finally:
        worker.stop()


def rendered_prompt(d, **body):
    """The chat prompt's text for this request body, as the model sees it (/tokenize, then /detokenize)."""
    t = d.post("/tokenize", json=body)
    assert t.status_code == 200, t.text
    return d.post("/detokenize", json={"tokens": t.json()["tokens"]}).json()["prompt"]


def random_model(out, weight_type, arch="llama"):
    """A tiny seeded random GGUF of `arch` and `weight_type` at `out`, with the
    default model's tokenizer (tools/make_random_gguf.py; needs the gguf package)."""
    subprocess.run([sys.executable, str(SRC / "tools" / "make_random_gguf.py"), "--donor", default_model(),
                    "--shape", "tiny", "--type", weight_type, "--arch", arch, str(out)], check=True, timeout=300)
    return out


def generate_on(model, isa, max_tokens=12):
    """`inferctl generate` of a fixed prompt, greedy, on the CPU kernel table
    `isa` (INFERD_CPU_ISA): the lines of text it prints, not its log."""
    env = dict(os.environ, INFERD_CPU_ISA=isa)
    r = subprocess.run([str(INFERCTL), "generate", "--model", str(model), "--prompt", "The capital of France is",
                        "--max-tokens", str(max_tokens), "--ignore-eos", "--threads", "2", "--max-model-len", "256"],
                       env=env, capture_output=True, text=True, timeout=scaled(300))
    assert r.returncode == 0, r.stderr
    assert f"(cpu-{isa})" in r.stdout + r.stderr  # the engine's log names the table it runs
    return [line for line in r.stdout.splitlines() if not line.startswith("[")]


def cpu_has(isa):
    """Whether this CPU runs the kernel table `isa` (avx2, avx512)."""
    flags = open("/proc/cpuinfo").read().split()
    need = {"avx2": ["avx2", "fma", "f16c"], "avx512": ["avx512f", "avx512bw", "avx512vl", "avx512_vnni"]}
    return all(f in flags for f in need[isa])


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "serial: changes what the whole machine sees (its free memory) or bounds a latency; "
        "meson's `integration_serial` runs these alone, after the tests that run two at a time")


def free_port(count=1):
    """A loopback port free now and not handed out before in this run (the
    kernel may offer a port again once its probe socket closes, before the
    daemon it was meant for has bound it); with count, the ports after it too."""
    for _ in range(1000):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ports = range(port, port + count)
        if port // 2 % _WORKERS != _WORKER or any(p in _ports_given for p in ports):
            continue
        try:
            for p in ports[1:]:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        _ports_given.update(ports)
        return port
    raise RuntimeError("no fresh free port")


# Shapes small enough that the warm-up every start runs takes seconds, not half a
# minute, and the least-work warm-up, which touches every shape key as the full
# one does (the warm-up's own tests ask for full); a test's own flags come later
# and win. Tests of the default configuration pass small_shapes=False.
SMALL_SHAPES = ["--max-model-len", "1024", "--max-num-batched-tokens", "256", "--max-num-seqs", "16",
                "--warmup-depth", "least"]


class Daemon:
    """One inferd process: its port, its stderr file, and helpers to talk to it.
    With admin_key (the default) it gets an admin key of its own through
    --admin-api-key-file, which admin_get/admin_post send."""

    def __init__(self, args, env=None, wait_state=None, timeout=120, small_shapes=True, admin_key=True):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="inferd-", suffix=".log", delete=False)
        full_env = dict(os.environ)
        full_env.update(env or {})
        cmd = [str(INFERD), "--host", "127.0.0.1", "--port", str(self.port)]
        self.admin_key = self.admin_key_file = None
        if admin_key:
            self.admin_key = "adm-" + secrets.token_hex(16)
            self.admin_key_file = admin_key_file(self.admin_key)
            cmd += ["--admin-api-key-file", self.admin_key_file]
        self.scaled_config = None if "--config" in args else scaled_deadlines_config()
        if self.scaled_config:
            cmd += ["--config", self.scaled_config]
        cmd += (SMALL_SHAPES if small_shapes else []) + list(args)
        self.cmd = cmd  # as started, for tests that start it again themselves
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=full_env)
        if wait_state is not None:
            try:
                self.wait_for(wait_state, timeout)
            except BaseException:
                # The caller gets no Daemon to stop: never leave this one running.
                self.stop()
                raise

    def get(self, path, **kw):
        kw.setdefault("timeout", scaled(10))
        return requests.get(self.url + path, **kw)

    def post(self, path, **kw):
        kw.setdefault("timeout", scaled(60))
        return requests.post(self.url + path, **kw)

    def admin_headers(self):
        return {"Authorization": f"Bearer {self.admin_key}"}

    def admin_get(self, path, **kw):
        kw["headers"] = {**self.admin_headers(), **kw.get("headers", {})}
        return self.get(path, **kw)

    def admin_post(self, path, **kw):
        kw["headers"] = {**self.admin_headers(), **kw.get("headers", {})}
        return self.post(path, **kw)

    def state(self):
        try:
            return self.get("/health/ready", timeout=2).json().get("state")
        except (requests.RequestException, ValueError):
            return None

    def wait_for(self, state, timeout=120):
        """Waits until /health/ready reports `state` ("live" waits for /health/live only)."""
        timeout = scaled(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"inferd exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if state == "live":
                    if self.get("/health/live", timeout=2).status_code == 200:
                        return
                elif self.state() == state:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"inferd did not reach {state} in {timeout}s:\n{self.output()}")

    def output(self):
        self.log.flush()
        return pathlib.Path(self.log.name).read_text(errors="replace")

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=60):
        return self.proc.wait(timeout=scaled(timeout))

    def stop(self):
        """Stops the daemon and cleans up; fails the test if it wrote a sanitizer report."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=scaled(30))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        report = sanitizer_report(self.output())
        self.log.close()
        os.unlink(self.log.name)
        if self.admin_key_file:
            os.unlink(self.admin_key_file)
        if self.scaled_config:
            os.unlink(self.scaled_config)
        if report:
            pytest.fail(f"inferd (exit {self.proc.returncode}) wrote a sanitizer report:\n{report[-20000:]}",
                        pytrace=False)


@pytest.fixture
def start_daemon():
    """Factory: start_daemon(args, env=None, wait_state='Serving', small_shapes=True, admin_key=True)
    -> Daemon; all stopped at teardown."""
    started = []

    def _start(args=(), env=None, wait_state="Serving", timeout=180, small_shapes=True, admin_key=True):
        d = Daemon(args, env=env, wait_state=wait_state, timeout=timeout, small_shapes=small_shapes,
                   admin_key=admin_key)
        started.append(d)
        return d

    yield _start
    for d in started:
        d.stop()


@pytest.fixture(scope="module")
def serving_daemon():
    """One daemon on the default model shared by a module's tests."""
    d = Daemon(["--model", default_model()], wait_state="Serving", timeout=300)
    yield d
    d.stop()
