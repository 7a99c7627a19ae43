#!/usr/bin/env python3
"""Plots the JSON of `inferctl bench single`: per workload, the median decode
tok/s (each trial as a dot) and the median TTFT, side by side, into one PNG;
speculative acceptance, where anything was drafted, is written over the bars.

usage: python3 tools/plot_bench_single.py bench.json out.png
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
    loads = [w for w in run["workloads"] if w.get("median_ttft_s") is not None]
    if not loads:
        print(f"{argv[1]}: no workload has a successful trial", file=sys.stderr)
        return 1
    names = [w["workload"] for w in loads]
    xs = range(len(loads))

    fig, (decode, ttft) = plt.subplots(1, 2, figsize=(10, 4))
    decode.bar(xs, [w["median_decode_tokens_per_s"] or 0 for w in loads], color="tab:blue", alpha=0.6)
    for x, w in zip(xs, loads):
        trials = [t["decode_tokens_per_s"] for t in w["trials"] if t["decode_tokens_per_s"] is not None]
        decode.plot([x] * len(trials), trials, "k.", markersize=4)
        if w.get("acceptance") is not None:
            decode.annotate(f"{100 * w['acceptance']:.0f}% accepted", (x, w["median_decode_tokens_per_s"] or 0),
                            ha="center", va="bottom", fontsize=8)
    decode.set_title("median decode throughput (dots: trials)")
    decode.set_ylabel("tokens/s")
    ttft.bar(xs, [w["median_ttft_s"] for w in loads], color="tab:orange", alpha=0.6)
    ttft.set_title("median time to first token")
    ttft.set_ylabel("seconds")
    for ax in (decode, ttft):
        ax.set_xticks(list(xs), names)
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_ylim(bottom=0)
    model = run.get("model", {}).get("id", "")
    m = run.get("machine", {})
    fig.suptitle(f"{model} — {m.get('cores', '?')} cores, {m.get('cpu', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
