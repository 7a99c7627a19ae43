#!/usr/bin/env python3
"""Tensor parallel on CPU ranks against a single rank, in one run on this machine:
starts inferd as one rank with all the threads, then as a group of N ranks
(one process each, the threads shared out), runs `inferctl bench serve` against
each, and reads the head's collective time from /metrics. JSON on stdout.

  tools/bench_tp.py [--build build] [--model PATH] [--ranks 2] [--threads 2]
                    [--concurrency 1,4] [--max-tokens 64]
"""
import argparse
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SRC = pathlib.Path(__file__).resolve().parents[1]
SHAPES = ["--max-model-len", "1024", "--max-num-batched-tokens", "256", "--max-num-seqs", "16"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def wait_serving(url, procs, timeout=900):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            sys.exit("inferd exited during start-up")
        try:
            if json.loads(get(url + "/health/ready")).get("state") == "Serving":
                return
        except Exception:
            pass
        time.sleep(0.5)
    sys.exit("inferd did not start")


def metric(text, name):
    m = re.search(rf"^{name}(?:{{}})? ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def run(build, model, ranks, threads, args):
    port, master = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    base = [str(build / "daemon" / "inferd"), "--model", model, "--threads", str(threads)] + SHAPES
    group = ["--tensor-parallel-size", str(ranks), "--nnodes", str(ranks), "--master-port", str(master)]
    procs, logs = [], []
    for rank in range(ranks - 1, -1, -1):  # workers first, then the head
        cmd = base + (["--port", str(port)] if rank == 0 else ["--port", str(free_port())])
        if ranks > 1:
            cmd += group + ["--node-rank", str(rank)] + (["--headless"] if rank else [])
        log = tempfile.TemporaryFile()
        logs.append(log)
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
    try:
        wait_serving(url, procs)
        before = get(url + "/metrics")
        out = subprocess.run([str(build / "tools" / "inferctl"), "bench", "serve", "--url", url, "--concurrency",
                              args.concurrency, "--max-tokens", str(args.max_tokens)],
                             capture_output=True, text=True, check=True).stdout
        after = get(url + "/metrics")
        result = {"ranks": ranks, "threads_per_rank": threads, "bench": json.loads(out)}
        if ranks > 1:
            secs = metric(after, "inferd_tp_collective_seconds_total") - metric(before, "inferd_tp_collective_seconds_total")
            calls = metric(after, "inferd_tp_collectives_total") - metric(before, "inferd_tp_collectives_total")
            result["collective_seconds"] = secs
            result["collectives"] = calls
            result["collective_mean_us"] = secs / calls * 1e6 if calls else None
        return result
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(SRC / "build"))
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/inferd/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="threads in all, shared out among the ranks")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    build = pathlib.Path(args.build)
    results = [run(build, args.model, 1, args.threads, args),
               run(build, args.model, args.ranks, max(1, args.threads // args.ranks), args)]
    json.dump({"machine": os.uname().nodename, "cpus": os.cpu_count(), "model": args.model, "runs": results},
              sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
