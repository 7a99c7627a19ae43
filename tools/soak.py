#!/usr/bin/env python3
"""Soak: the supervisor's false positives under load. Starts inferd with the
probe every few seconds, drives a mix of concurrent requests for --seconds, and
prints JSON: requests done and failed, and every supervisor action counted
(sheds, recoveries, cold shapes, probe failures), all of which must be 0.

  python3 tools/soak.py --build build --seconds 600 > soak.json
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time

import requests


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(url):
    out = {}
    for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--probe-interval", default="5")
    ap.add_argument("inferd_args", nargs="*", help="extra inferd flags (after --)")
    a = ap.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile(prefix="soak-", suffix=".log", delete=False)
    cmd = [os.path.join(a.build, "daemon", "inferd"), "--host", "127.0.0.1", "--port", str(port),
           "--probe-interval", a.probe_interval] + a.inferd_args
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 600:
        try:
            if requests.get(url + "/health/ready", timeout=2).status_code == 200:
                break
        except requests.RequestException:
            pass
        if proc.poll() is not None:
            sys.exit(f"inferd exited: see {log.name}")
        time.sleep(0.2)
    warm_s = time.monotonic() - t0
    max_len = requests.post(url + "/tokenize", json={"prompt": "x"}, timeout=10).json()["max_model_len"]
    rng = random.Random(7)

    def one(i):
        n = rng.choice([4, 30, 200, 600, max_len // 2])
        body = {"prompt": [100 + (j * 31 + i) % 9000 for j in range(n)], "max_tokens": rng.choice([1, 16, 64, 200]),
                "temperature": rng.choice([0, 0.8]), "stream": rng.random() < 0.5}
        r = requests.post(url + "/v1/completions", json=body, timeout=600)
        return r.status_code

    done, failed, codes = 0, 0, {}
    end = time.monotonic() + a.seconds
    with concurrent.futures.ThreadPoolExecutor(a.concurrency) as ex:
        futures, i = set(), 0
        while time.monotonic() < end or futures:
            while time.monotonic() < end and len(futures) < a.concurrency:
                futures.add(ex.submit(one, i))
                i += 1
            finished, futures = concurrent.futures.wait(futures, timeout=1, return_when="FIRST_COMPLETED")
            for f in finished:
                code = f.result() if not f.exception() else -1
                codes[code] = codes.get(code, 0) + 1
                done += code == 200
                failed += code != 200
    m = metrics(url)
    text = open(log.name, errors="replace").read()
    result = {
        "seconds": a.seconds, "concurrency": a.concurrency, "warmup_s": round(warm_s, 1),
        "requests_ok": done, "requests_failed": failed, "status_codes": {str(k): v for k, v in codes.items()},
        "sheds": m.get("inferd_sheds_total", 0), "recoveries": m.get("inferd_recoveries_total", 0),
        "cold_shapes": m.get("inferd_cold_shapes_total", 0),
        "probe_failures": len(re.findall(r"generation probe failed", text)),
        "supervisor_actions": re.findall(r"supervisor: (?:shed|recover|fail|unshed): .*", text),
    }
    proc.terminate()
    proc.wait(timeout=60)
    os.unlink(log.name)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
