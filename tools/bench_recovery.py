#!/usr/bin/env python3
"""Recovery time against cold start, in one process: starts the daemon, times it
to Serving, arms the `logits.corrupt` fault point, runs the generation probe
(which fails and makes the supervisor recover), disarms it, and times the fault
to Serving again. One JSON object on stdout: both times, their ratio, whether the
probe passes afterwards, and each warm-up's phase seconds and key coverage from
the daemon's log. Needs a build with fault points (`tools/dev.sh test`'s build/).

  tools/bench_recovery.py --build build [--config etc/inferd.toml] [-- extra inferd flags]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

DEFAULT_MODEL = os.path.join(os.environ.get("INFERD_CACHE", os.path.expanduser("~/.cache/inferd")),
                             "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def call(url, body=None, timeout=5):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:  # /health/ready answers 503 with its state while not ready
        try:
            return e.code, json.loads(e.read() or b"{}")
        except ValueError:
            return e.code, {}
    except OSError:
        return None, {}


def wait_state(base, states, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if call(base + "/health/ready")[1].get("state") in states:
            return
        time.sleep(0.05)
    sys.exit(f"bench_recovery: no state in {sorted(states)} after {timeout} s")


def warmups(log_text):
    """Each 'warm-up passed' line: its phases' seconds and the keys it covered."""
    out = []
    for line in log_text.splitlines():
        if "warm-up passed:" not in line:
            continue
        phases = {m[0]: float(m[1]) for m in re.findall(r"([a-z-]+) \d+/\d+ requests in ([\d.]+) s", line)}
        keys = re.search(r"keys (\d+)/(\d+)", line)
        out.append({"phases_s": phases, "keys_covered": int(keys[1]), "keys_total": int(keys[2])})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--config", default="etc/inferd.toml")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--port", type=int, default=18231)
    ap.add_argument("--timeout", type=float, default=600, help="seconds allowed for each wait for Serving")
    ap.add_argument("extra", nargs="*", help="more inferd flags (after --)")
    a = ap.parse_args()
    base, admin = f"http://127.0.0.1:{a.port}", f"http://127.0.0.1:{a.port + 1}"
    with tempfile.TemporaryFile("w+") as log:
        t0 = time.monotonic()
        daemon = subprocess.Popen([os.path.join(a.build, "daemon", "inferd"), "--config", a.config, "--model", a.model,
                                   "--port", str(a.port), "--admin-port", str(a.port + 1), "--probe-interval", "0",
                                   *a.extra], stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_state(base, {"Serving"}, a.timeout)
            cold = time.monotonic() - t0
            # The probe's first answer after Serving is its golden text; the fault must come after it.
            deadline = time.monotonic() + 60
            while call(base + "/health/generate", timeout=60)[0] != 200 and time.monotonic() < deadline:
                time.sleep(0.1)
            if call(admin + "/admin/fault", {"name": "logits.corrupt"})[0] != 200:
                sys.exit("bench_recovery: /admin/fault refused: a build without fault points?")
            t1 = time.monotonic()
            call(admin + "/admin/probe", {}, timeout=60)
            wait_state(base, {"Recovering", "Warming"}, 30)
            call(admin + "/admin/fault", {"name": "logits.corrupt", "armed": False})
            wait_state(base, {"Serving"}, a.timeout)
            recovery = time.monotonic() - t1
            probe = call(admin + "/admin/probe", {}, timeout=60)[0]
        finally:
            daemon.terminate()
            daemon.wait()
        log.seek(0)
        text = log.read()
    print(json.dumps({"cold_start_s": round(cold, 2), "recovery_s": round(recovery, 2),
                      "ratio": round(recovery / cold, 3), "probe_after": probe,
                      "load_average": os.getloadavg()[0], "warmups": warmups(text)}))
    return 0 if probe == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
