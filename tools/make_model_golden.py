#!/usr/bin/env python3
"""Writes tests/golden/model.json: reference log-probabilities and greedy
continuations of the default model computed by llama.cpp (its llama-server, built
from the llama.cpp source that the llama-cpp-python PyPI package vendors, by
`llamacpp-peer.sh cpu`), the independent reference inferd's forward pass is
checked against.

  python3 tools/make_model_golden.py --server-bin ~/peers/llama.cpp/build-cpu/bin/llama-server

For each prompt it records the prompt's token ids (llama.cpp's tokenizer, special
tokens parsed), the top-10 log-probabilities of the next token after the 1st and
the 10th prompt token, and 64 greedy tokens (temperature 0). Flash attention is
off: the plain path (F16 K/V, F32 softmax) is the one inferd's CPU kernels follow.
"""
import argparse
import json
import os
import socket
import subprocess
import time
import urllib.request

PROMPTS = [
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village at the edge of the forest, there lived",
    "1, 2, 3, 4, 5, 6, 7, 8,",
]
TOPK = 10
GEN = 64


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    default_model = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                 "inferd", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--model", default=os.environ.get("INFERD_MODEL", default_model))
    ap.add_argument("--server-bin", default=os.path.expanduser("~/peers/llama.cpp/build-cpu/bin/llama-server"))
    ap.add_argument("--out", default="tests/golden/model.json")
    args = ap.parse_args()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = subprocess.Popen([args.server_bin, "-m", args.model, "-c", "1024", "-t", "2", "-np", "1", "-fa", "off",
                            "--host", "127.0.0.1", "--port", str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(base + "/health", timeout=1)
                break
            except Exception:
                time.sleep(0.1)
        cases = []
        for text in PROMPTS:
            ids = post(base + "/tokenize", {"content": text, "add_special": False, "parse_special": True})["tokens"]
            assert len(ids) >= 10, text
            top = {}
            for pos in (0, 9):
                r = post(base + "/completion", {"prompt": ids[: pos + 1], "n_predict": 1, "temperature": 0,
                                                "n_probs": TOPK, "cache_prompt": False, "post_sampling_probs": False})
                top[str(pos)] = [[p["id"], p["logprob"]] for p in r["completion_probabilities"][0]["top_logprobs"]]
            r = post(base + "/completion", {"prompt": ids, "n_predict": GEN, "temperature": 0, "ignore_eos": True,
                                            "n_probs": 1, "cache_prompt": False, "post_sampling_probs": False})
            greedy = [p["id"] for p in r["completion_probabilities"]]
            cases.append({"prompt": text, "ids": ids, "top_logprobs": top, "greedy": greedy,
                          "greedy_text": r["content"]})
        with open(args.out, "w") as f:
            json.dump({"reference": "llama.cpp llama-server (llama-cpp-python 0.3.36 vendored source), "
                                    "temperature 0", "model": os.path.basename(args.model), "cases": cases}, f, indent=1)
        print(f"wrote {args.out}: {len(cases)} cases")
    finally:
        srv.terminate()
        srv.wait()


if __name__ == "__main__":
    main()
