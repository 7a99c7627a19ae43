#!/usr/bin/env python3
"""Writes tests/golden/model_f32.json: the default model in float32 as PyTorch and
transformers compute it (transformers loads the GGUF and dequantizes every weight
to float32), the reference for inferd's exact-precision path (F32 weights,
activations and KV cache).

  python3 tools/make_f32_golden.py   # needs torch, transformers and gguf

Prompts are those of tests/golden/model.json (the same token ids). For each it
records the top-10 log-probabilities after the 1st and 10th prompt tokens and 64
greedy tokens (argmax, no early stop).
"""
import argparse
import json
import os
import tempfile

import torch
from transformers import AutoModelForCausalLM

TOPK = 10
GEN = 64


def main():
    ap = argparse.ArgumentParser()
    default_model = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                 "inferd", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--model", default=os.environ.get("INFERD_MODEL", default_model))
    ap.add_argument("--prompts", default="tests/golden/model.json")
    ap.add_argument("--out", default="tests/golden/model_f32.json")
    args = ap.parse_args()

    torch.set_num_threads(2)
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(args.model), gguf_file=os.path.basename(args.model),
                                                 torch_dtype=torch.float32)
    model.eval()
    cases = []
    for case in json.load(open(args.prompts))["cases"]:
        ids = case["ids"]
        with torch.no_grad():
            out = model(torch.tensor([ids]), use_cache=True)
            lp = torch.log_softmax(out.logits[0].double(), dim=-1)
            top = {}
            for pos in (0, 9):
                v, i = torch.topk(lp[pos], TOPK)
                top[str(pos)] = [[int(t), float(x)] for t, x in zip(i, v)]
            greedy, past = [], out.past_key_values
            nxt = int(torch.argmax(out.logits[0, -1]))
            for _ in range(GEN):
                greedy.append(nxt)
                o = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
                past = o.past_key_values
                nxt = int(torch.argmax(o.logits[0, -1]))
        cases.append({"prompt": case["prompt"], "ids": ids, "top_logprobs": top, "greedy": greedy})
    import transformers
    with open(args.out, "w") as f:
        json.dump({"reference": f"transformers {transformers.__version__}, torch {torch.__version__}, float32",
                   "model": os.path.basename(args.model), "cases": cases}, f, indent=1)
    print(f"wrote {args.out}: {len(cases)} cases")


if __name__ == "__main__":
    main()
