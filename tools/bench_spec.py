#!/usr/bin/env python3
"""Decode speed of one greedy completion through running daemons, as speculative
decoding changes it: streams /v1/completions and reports the tokens after the
first over the time after the first (decode tok/s), median and best of --rounds
per daemon, with each daemon's speculative counters when it has them. Several
--url are asked in turn, one request at a time, so on a shared machine they
meet the same load.

  tools/bench_spec.py --url http://127.0.0.1:8123 --url http://127.0.0.1:8124 \
      --prompt "Count from 1 to 300: 1, 2, 3," --max-tokens 256 --rounds 5
"""
import argparse
import json
import re
import statistics
import time
import urllib.request


def stream(url, prompt, max_tokens):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    first = last = None
    tokens = 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                last = time.monotonic()
                first = first or last
    return tokens, first, last


def counters(url):
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out = {}
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        m = re.search(rf"^vllm:spec_decode_{name}_total(?:{{[^}}]*}})? (\S+)$", text, re.M)
        if m:
            out[name] = float(m.group(1))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", action="append", help="a daemon (repeat to compare; default http://127.0.0.1:8000)")
    ap.add_argument("--prompt", default="Count from 1 to 300: 1, 2, 3,")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    urls = a.url or ["http://127.0.0.1:8000"]
    before = {u: counters(u) for u in urls}
    rates = {u: [] for u in urls}
    for i in range(a.rounds):
        for u in urls:
            tokens, first, last = stream(u, a.prompt, a.max_tokens)
            rates[u].append((tokens - 1) / (last - first) if last and first and last > first else 0.0)
    for u in urls:
        r = rates[u]
        line = f"{u}: decode tok/s median {statistics.median(r):.1f}, best {max(r):.1f} ({', '.join(f'{x:.1f}' for x in r)})"
        after = counters(u)
        if after:
            d = {k: after[k] - before[u].get(k, 0) for k in after}
            line += (f"; drafts {d.get('num_drafts', 0):.0f}, draft tokens {d.get('num_draft_tokens', 0):.0f}, "
                     f"accepted {d.get('num_accepted_tokens', 0):.0f}")
        print(line)


if __name__ == "__main__":
    main()
