#!/usr/bin/env python3
"""Engine throughput beside llama.cpp, same GGUF, same machine, same run.

  python3 tools/bench_compare.py [--threads 2] [--rounds 2] [--llama-bench PATH] [--inferctl build/tools/inferctl]

Runs `inferctl bench engine` and `llama-bench` alternately (rounds), takes each
side's best round, and prints JSON plus a Markdown table with the ratios:
prefill tok/s at 128 and 512 tokens, decode tok/s at batch 1 (128 tokens from an
empty context, like llama-bench's tg128), and aggregate decode at 8 streams
(llama-batched-bench -npp 1 -ntg 128 -npl 8: eight sequences of one prompt token
each decoding 128 tokens together; its speed_tg is the aggregate). A peer without
llama-batched-bench leaves that row's peer column empty.
"""
import argparse
import json
import os
import subprocess


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    start = out.find("[") if out.lstrip().startswith("[") else out.find("{")
    return json.loads(out[start:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/inferd/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--llama-bench", default=os.path.expanduser("~/peers/llama.cpp/build-cpu/bin/llama-bench"))
    ap.add_argument("--inferctl", default="build/tools/inferctl")
    args = ap.parse_args()
    batched = os.path.join(os.path.dirname(args.llama_bench), "llama-batched-bench")

    ours, peer, peer8 = [], [], []
    for _ in range(args.rounds):
        ours.append(run_json([args.inferctl, "bench", "engine", "--model", args.model, "--threads", str(args.threads),
                              "--n-prompt", "128,512", "--n-gen", "128", "--batch", "8"]))
        peer.append(run_json([args.llama_bench, "-m", args.model, "-t", str(args.threads), "-p", "128,512", "-n", "128",
                              "-r", "3", "-o", "json"]))
        if os.path.exists(batched):
            out = subprocess.run([batched, "-m", args.model, "-t", str(args.threads), "-c", "4096", "-b", "2048",
                                  "-ub", "512", "-npp", "1", "-ntg", "128", "-npl", "8", "--output-format", "jsonl"],
                                 check=True, capture_output=True, text=True).stdout
            peer8 += [json.loads(l)["speed_tg"] for l in out.splitlines() if l.startswith("{")]

    def best_ours(key):
        vals = []
        for o in ours:
            if key == "decode":
                vals.append(o["decode"]["tokens_per_s"])
            elif key == "decode8":
                vals.append(o["decode_batched"]["aggregate_tokens_per_s"])
            else:
                vals += [p["tokens_per_s"] for p in o["prefill"] if p["n_prompt"] == key]
        return max(vals)

    def best_peer(key):
        vals = []
        for rows in peer:
            for r in rows:
                if key == "decode" and r["n_gen"] == 128 and r["n_prompt"] == 0:
                    vals.append(r["avg_ts"])
                elif key != "decode" and r["n_prompt"] == key and r["n_gen"] == 0:
                    vals.append(r["avg_ts"])
        return max(vals) if vals else None

    rows = []
    for key, label in ((128, "prefill 128 (tok/s)"), (512, "prefill 512 (tok/s)"), ("decode", "decode batch 1 (tok/s)")):
        o, p = best_ours(key), best_peer(key)
        rows.append({"metric": label, "inferd": o, "llama.cpp": p, "ratio": o / p if p else None})
    p8 = max(peer8) if peer8 else None
    rows.append({"metric": "decode 8 streams aggregate (tok/s)", "inferd": best_ours("decode8"), "llama.cpp": p8,
                 "ratio": best_ours("decode8") / p8 if p8 else None})
    result = {"threads": args.threads, "rounds": args.rounds, "rows": rows,
              "peer_build": peer[0][0].get("build_commit", "") if peer and peer[0] else ""}
    print(json.dumps(result, indent=1))
    print("\n| metric | inferd | llama.cpp | ratio |\n|---|---|---|---|")
    for r in rows:
        fmt = lambda v: f"{v:.1f}" if isinstance(v, (int, float)) else "—"
        ratio = f"{r['ratio']:.2f}×" if r["ratio"] else "—"
        print(f"| {r['metric']} | {fmt(r['inferd'])} | {fmt(r['llama.cpp'])} | {ratio} |")


if __name__ == "__main__":
    main()
