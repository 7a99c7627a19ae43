#!/usr/bin/env python3
"""Plots the JSON of `inferctl bench serve`: aggregate output tok/s and TTFT
(p50 and p99) against concurrency, side by side, into one PNG.

usage: python3 tools/plot_bench_serve.py bench.json out.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        run = json.load(f)
    levels = [lv for lv in run["levels"] if lv.get("ttft_s")]
    if not levels:
        print(f"{argv[1]}: no level has a successful request", file=sys.stderr)
        return 1
    conc = [lv["concurrency"] for lv in levels]

    fig, (tput, ttft) = plt.subplots(1, 2, figsize=(10, 4))
    tput.plot(conc, [lv["output_tokens_per_s"] for lv in levels], marker="o")
    tput.set_title("aggregate output throughput")
    tput.set_ylabel("output tokens/s")
    ttft.plot(conc, [lv["ttft_s"]["p50"] for lv in levels], marker="o", label="p50")
    ttft.plot(conc, [lv["ttft_s"]["p99"] for lv in levels], marker="o", label="p99")
    ttft.set_title("time to first token")
    ttft.set_ylabel("seconds")
    ttft.legend()
    for ax in (tput, ttft):
        ax.set_xscale("log", base=2)
        ax.set_xticks(conc, [str(c) for c in conc])
        ax.set_xlabel("concurrency")
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    model = run.get("model", {}).get("id", "")
    m = run.get("machine", {})
    fig.suptitle(f"{model} — {m.get('cores', '?')} cores, {m.get('cpu', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
