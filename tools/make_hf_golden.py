#!/usr/bin/env python3
"""Makes the Hugging Face checkpoint fixture and its goldens from transformers.

    tools/make_hf_golden.py [--out tests/golden/hf-tiny] [--golden tests/golden/hf_tiny.json]

1. tools/make_hf_checkpoint.py writes the `tiny` BF16 checkpoint (seed 0) to
   --out; tokenizer.json is rewritten without indentation (same content, a
   third of the bytes).
2. transformers loads it in float32 and, for each prompt, records the prompt's
   token ids, the logits at every prompt position for a fixed set of probe ids
   (plus each position's argmax and logsumexp), and 16 greedy tokens.

tests/unit/test_hf_checkpoint.cpp compares inferd's CPU backend against these.
Needs torch, transformers, safetensors (pip); the tests do not.
"""
import argparse
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROMPTS = [
    "The quick brown fox jumps over the lazy dog. 12345",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
]
N_GREEDY = 16


def golden_cases(model, tok, prompts):
    """transformers' answers for each prompt: its ids, the logits at every
    position for a fixed set of probe ids (plus each position's argmax and
    logsumexp), and N_GREEDY greedy tokens. Returns (probes, cases)."""
    import torch

    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(1)
    probes = sorted(set(range(8)) | set(torch.randint(0, vocab, (56,), generator=gen).tolist()))
    cases = []
    with torch.no_grad():
        for text in prompts:
            ids = tok(text, add_special_tokens=True)["input_ids"]
            logits = model(torch.tensor([ids])).logits[0].float()
            greedy = model.generate(torch.tensor([ids]), max_new_tokens=N_GREEDY, min_new_tokens=N_GREEDY,
                                    do_sample=False, eos_token_id=None, pad_token_id=0)[0][len(ids):].tolist()
            cases.append({
                "prompt": text,
                "ids": ids,
                "argmax": logits.argmax(-1).tolist(),
                "logsumexp": [round(float(x), 6) for x in torch.logsumexp(logits, -1)],
                "probe_logits": [[round(float(row[p]), 6) for p in probes] for row in logits],
                "greedy": greedy,
            })
    return probes, cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "tests/golden/hf-tiny"))
    ap.add_argument("--golden", default=str(ROOT / "tests/golden/hf_tiny.json"))
    args = ap.parse_args()
    out = pathlib.Path(args.out)

    subprocess.run([sys.executable, str(ROOT / "tools/make_hf_checkpoint.py"), str(out),
                    "--shape", "tiny", "--dtype", "bf16", "--seed", "0"], check=True)
    tj = out / "tokenizer.json"
    tj.write_text(json.dumps(json.loads(tj.read_text()), ensure_ascii=False, separators=(",", ":")))

    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(out)
    model = LlamaForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    probes, cases = golden_cases(model, tok, PROMPTS)
    golden = {
        "about": "tools/make_hf_golden.py: transformers LlamaForCausalLM in float32 on tests/golden/hf-tiny",
        "vocab": model.config.vocab_size,
        "probes": probes,
        "cases": cases,
    }
    pathlib.Path(args.golden).write_text(json.dumps(golden, indent=1) + "\n")
    print(f"{args.golden}: {len(cases)} prompts")


if __name__ == "__main__":
    main()
