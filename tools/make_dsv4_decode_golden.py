#!/usr/bin/env python3
"""Writes tests/golden/dsv4_decode.bin: greedy generation through the tiny
DeepSeek-V4 checkpoint (tests/golden/dsv4-tiny) as transformers'
DeepseekV4ForCausalLM.generate computes it with its cache (use_cache=True:
the prompt's prefill, then one token a step through DeepseekV4CSACache /
DeepseekV4HCACache and the sliding-window layers), in float32, on the model
tools/make_dsv4_forward_golden.py builds (same weights, same indexer ties).

Two cases cross every boundary the state carries over (window 16, ratio-4
and ratio-128 windows):
- case a: a 5-token prompt, 140 tokens generated: the window fills and slides,
  every ratio-4 entry and the ratio-128 entry (closed by position 127) are
  pooled during decoding;
- case b: a 130-token prompt, 8 tokens generated: the prompt closes the
  ratio-128 window and leaves a partly filled ratio-4 window in the state.

Records per case X (format of make_dsv4_quant_golden.py): X_prompt i32 [P];
X_tokens i32 [N] the greedy tokens; X_logits f32 [N, vocab], step i's logits
(the prompt's last position, then each generated token's), as generate
returns them before any processor; X_full f32 [N, vocab] the same positions'
logits from one forward of prompt + tokens without the cache, so the golden
itself shows how far transformers' cache path is from its full forward.

Usage: tools/make_dsv4_decode_golden.py [out path]. Needs what
make_dsv4_forward_golden.py needs (run with transformers 5.25.0, torch 2.15).
"""
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_dsv4_forward_golden import ROOT, SEED, build_model  # noqa: E402
from make_dsv4_quant_golden import write_records  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "tests/golden/dsv4_decode.bin")
CASES = {"a": (5, 140), "b": (130, 8)}  # prompt length, tokens generated


def main():
    model, cfg = build_model()
    # No stop token: every case runs its full length.
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = cfg["bos_token_id"]
    g = torch.Generator().manual_seed(SEED + 1)
    records = []
    for name, (prompt_len, steps) in CASES.items():
        prompt = torch.randint(2, cfg["vocab_size"], (1, prompt_len), generator=g)
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                                 use_cache=True, output_logits=True, return_dict_in_generate=True)
            tokens = out.sequences[0, prompt_len:]
            assert tokens.shape[0] == steps
            logits = torch.cat([s.float() for s in out.logits])
            assert torch.equal(logits.argmax(-1), tokens), "greedy tokens are not the logits' argmax"
            full = model(out.sequences[:, :-1], use_cache=False).logits[0, prompt_len - 1:].float()
        print(f"case {name}: cache vs full forward max |diff| {(logits - full).abs().max().item():.3g}, "
              f"largest |logit| {full.abs().max().item():.3g}")
        records += [(f"{name}_prompt", prompt[0].to(torch.int32)), (f"{name}_tokens", tokens.to(torch.int32)),
                    (f"{name}_logits", logits), (f"{name}_full", full)]
    write_records(OUT, records)


if __name__ == "__main__":
    main()
