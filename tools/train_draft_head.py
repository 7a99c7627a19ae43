"""Trains a draft head for a model (engine/spec/draft_head_proposer.hpp) and
writes it as a GGUF file for --speculative-config '{"method":"draft_head",...}'.

The head predicts the model's next feature (the final hidden state its output
head reads) from the current feature and the next token's embedding:

    z = W [f[t] ; embed(x[t+1])] + b
    f[t+1] ~= z + W_down (silu(W_gate z) * W_up z),    draft = argmax(output . f[t+1])

and drafts further by feeding its own prediction back. The data are the
model's own greedy continuations of the instructions in
tools/draft_head_prompts.py, which `inferctl draft-head-data` writes with
their features (one set per --seeds entry, kept in --work and used again).
W and b start from ridge regression; then everything is fitted with numpy
(Adam) to the cross-entropy of the model's next token over the head's draft
vocabulary (the tokens the data hold), plus a pull of the predicted feature
towards the real one. A tenth of the instructions is held out; the acceptance
the head would get on them, per draft position and family, is printed and
stored in the file. Matrices are written in F16, with the draft ids.

    python3 tools/train_draft_head.py --model M.gguf --out head.gguf [--inferctl build/tools/inferctl]
"""
import argparse
import json
import os
import subprocess
import sys
import zlib

import numpy as np
from gguf import GGUFReader, GGUFWriter
from gguf.quants import dequantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import draft_head_prompts  # noqa: E402


def embedding(model_path):
    """The model's token embedding (float32 [vocab, dim]), its output head
    (the embedding itself where they are tied: the same array), and the
    checksum of the embedding's stored bytes."""
    r = GGUFReader(model_path)
    t = {x.name: x for x in r.tensors}
    emb = t["token_embd.weight"]
    def f32(x):
        return dequantize(x.data, x.tensor_type).reshape(int(x.shape[1]), int(x.shape[0])).astype(np.float32)
    crc = zlib.crc32(np.ascontiguousarray(emb.data).view(np.uint8).tobytes())
    emb_f32 = f32(emb)
    return emb_f32, f32(t["output.weight"]) if "output.weight" in t else emb_f32, crc


def load(prefix, dim):
    feats = np.fromfile(prefix + ".features", dtype=np.float32).reshape(-1, dim)
    meta = np.fromfile(prefix + ".tokens", dtype=np.int32).reshape(-1, 3)
    order = np.lexsort((meta[:, 1], meta[:, 0]))  # a batch's sequences come interleaved
    return feats[order], meta[order]


def pairs(meta, reach):
    """Rows i with i+1 .. i+reach in the same sequence at the following positions."""
    ok = np.ones(len(meta) - reach, dtype=bool)
    for j in range(1, reach + 1):
        ok &= (meta[j:len(meta) - reach + j, 0] == meta[:len(meta) - reach, 0])
        ok &= (meta[j:len(meta) - reach + j, 1] == meta[:len(meta) - reach, 1] + j)
    return np.nonzero(ok)[0]


def ridge(X, Y, lam):
    A = np.hstack([X, np.ones((len(X), 1), np.float32)]).astype(np.float64)
    G = A.T @ A
    G[np.diag_indices_from(G)] += lam * len(A)
    Wb = np.linalg.solve(G, A.T @ Y.astype(np.float64))
    return Wb[:-1].T.astype(np.float32), Wb[-1].astype(np.float32)  # W [dim, 2 dim], b [dim]


def silu(x):
    return x / (1 + np.exp(-np.clip(x, -60, 60)))


class Head:
    """z = W [f ; e] + b;  h = z + down(silu(gate z) * up z);  draft = argmax(output . h)"""

    def __init__(self, W, b, hidden, rng):
        dim = W.shape[0]
        self.p = {"W": W, "b": b,
                  "gate": (rng.standard_normal((hidden, dim)) * 0.02).astype(np.float32),
                  "up": (rng.standard_normal((hidden, dim)) * 0.02).astype(np.float32),
                  "down": np.zeros((dim, hidden), np.float32)}

    def forward(self, f, e):
        p = self.p
        x = np.hstack([f, e])
        z = x @ p["W"].T + p["b"]
        a, g = z @ p["gate"].T, z @ p["up"].T
        s = silu(a)
        u = s * g
        return z + u @ p["down"].T, (x, z, a, g, s, u)

    def backward(self, dh, cache, grads):
        p = self.p
        x, z, a, g, s, u = cache
        grads["down"] += dh.T @ u
        du = dh @ p["down"]
        ds, dg = du * g, du * s
        sig = 1 / (1 + np.exp(-np.clip(a, -60, 60)))
        da = ds * (sig * (1 + a * (1 - sig)))
        grads["gate"] += da.T @ z
        grads["up"] += dg.T @ z
        dz = dh + da @ p["gate"] + dg @ p["up"]
        grads["W"] += dz.T @ x
        grads["b"] += dz.sum(0)
        return (dz @ p["W"])[:, :z.shape[1]]  # the gradient of the input feature


def train(head, emb, out, feats, meta, starts, sub, args, rng):
    """Cross-entropy on the model's own next tokens over `unroll` chained steps
    (each step reads the feature the previous one predicted, as drafting does),
    plus a pull of each predicted feature towards the model's real one. The
    softmax runs over the head's vocabulary `sub`, the tokens the data holds."""
    remap = np.full(emb.shape[0], -1, np.int64)
    remap[sub] = np.arange(len(sub))
    out_sub = out[sub]
    adam_m = {k: np.zeros_like(v) for k, v in head.p.items()}
    adam_v = {k: np.zeros_like(v) for k, v in head.p.items()}
    B, n, U = args.batch, 0, args.unroll
    for epoch in range(args.epochs):
        perm = rng.permutation(starts)
        total = 0.0
        for i in range(0, len(perm) - B + 1, B):
            j = perm[i:i + B]
            f, caches, dhs = feats[j], [], []
            for k in range(U):
                h, cache = head.forward(f, emb[meta[j + 1 + k, 2]])
                logits = h @ out_sub.T
                logits -= logits.max(1, keepdims=True)
                prob = np.exp(logits)
                prob /= prob.sum(1, keepdims=True)
                y = remap[meta[j + 2 + k, 2]]
                total += -np.log(prob[np.arange(B), y] + 1e-9).mean() / U
                prob[np.arange(B), y] -= 1
                dhs.append(prob @ out_sub / (B * U) + args.pull * 2 * (h - feats[j + 1 + k]) / (B * U))
                caches.append(cache)
                f = h
            grads = {k: np.zeros_like(v) for k, v in head.p.items()}
            carry = 0
            for k in reversed(range(U)):
                carry = head.backward(dhs[k] + carry, caches[k], grads)
            n += 1
            for k, p in head.p.items():
                adam_m[k] = 0.9 * adam_m[k] + 0.1 * grads[k]
                adam_v[k] = 0.999 * adam_v[k] + 0.001 * grads[k] ** 2
                p -= args.lr * (adam_m[k] / (1 - 0.9 ** n)) / (np.sqrt(adam_v[k] / (1 - 0.999 ** n)) + 1e-8)
        print(f"epoch {epoch}: loss {total / max(1, len(perm) // B):.4f}", file=sys.stderr, flush=True)


def acceptance(head, emb, out, feats, meta, starts, k, sub):
    """Per draft position, the share of starts whose first j drafts (the best
    of the head's vocabulary `sub`) all equal the model's own greedy tokens
    (what greedy verification accepts)."""
    out = out[sub]
    f = feats[starts]
    tok = meta[starts + 1, 2]  # the token the model produced after f
    alive = np.ones(len(starts), dtype=bool)
    rates = []
    for j in range(k):
        f, _ = head.forward(f, emb[tok])
        draft = sub[np.argmax(f @ out.T, axis=1)]
        alive &= draft == meta[starts + 2 + j, 2]
        rates.append(round(float(alive.mean()), 4))
        tok = draft
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--inferctl", default="build/tools/inferctl")
    ap.add_argument("--work", default="/tmp/draft-head", help="the data; a set already there is used again")
    ap.add_argument("--seeds", default="1,2", help="one set of instructions per seed")
    ap.add_argument("--prompts", type=int, default=480, help="instructions per set")
    ap.add_argument("--max-tokens", type=int, default=320)
    ap.add_argument("--hidden", type=int, default=1536)
    ap.add_argument("--unroll", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--pull", type=float, default=0.2)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--untrained", action="store_true",
                    help="write the head untrained (its feature map the identity plus noise): for tests")
    a = ap.parse_args()

    emb, out, crc = embedding(a.model)
    dim = emb.shape[1]
    rng = np.random.default_rng(0)
    if a.untrained:
        W = np.hstack([np.eye(dim), np.zeros((dim, dim))]).astype(np.float32)
        W += (rng.standard_normal(W.shape) * 0.01).astype(np.float32)
        sub = np.arange(0, emb.shape[0], 7, dtype=np.int32)  # every seventh token
        write_head(a.out, a.model, emb.shape[0], crc, Head(W, np.zeros(dim, np.float32), a.hidden, rng), sub,
                   {"untrained": True})
        return
    os.makedirs(a.work, exist_ok=True)
    sets = []
    for seed in (int(x) for x in a.seeds.split(",")):
        prefix = os.path.join(a.work, f"data-{seed}")
        if not os.path.exists(prefix + ".tokens"):
            prompts = os.path.join(a.work, f"prompts-{seed}.txt")
            with open(prompts, "w") as f:
                f.write("\n".join(draft_head_prompts.prompts(a.prompts, seed)) + "\n")
            subprocess.run([a.inferctl, "draft-head-data", "--model", a.model, "--prompts", prompts, "--out", prefix,
                            "--max-tokens", str(a.max_tokens), "--batch", "16", "--threads", str(a.threads)],
                           check=True)
        feats, meta = load(prefix, dim)
        meta[:, 0] += seed * 100000  # sequences stay apart across sets; the held-out tenth stays by prompt
        sets.append((feats, meta))
    feats = np.concatenate([s[0] for s in sets])
    meta = np.concatenate([s[1] for s in sets])
    del sets

    k = 5
    held = lambda rows: meta[rows, 0] % 10 == 0  # noqa: E731
    train_starts = pairs(meta, a.unroll + 1)
    train_starts = train_starts[~held(train_starts)]
    fit_rows = pairs(meta, 1)
    fit_rows = fit_rows[~held(fit_rows)]
    W, b = ridge(np.hstack([feats[fit_rows], emb[meta[fit_rows + 1, 2]]]), feats[fit_rows + 1], 1e-4)
    head = Head(W, b, a.hidden, rng)
    # The head drafts only tokens the model produced in the data: far fewer
    # rows of the output head to score for each draft than the vocabulary.
    sub = np.unique(meta[:, 2]).astype(np.int32)
    train(head, emb, out, feats, meta, train_starts, sub, a, rng)

    test = pairs(meta, k + 1)
    test = test[held(test)]
    families = {}
    for fam, name in enumerate(["numbers", "code", "prose"]):  # draft_head_prompts.prompts cycles through them
        rows = test[(meta[test, 0] % 100000) % 3 == fam]
        rows = rng.choice(rows, size=min(len(rows), 1500), replace=False)
        families[name] = acceptance(head, emb, out, feats, meta, rows, k, sub)
    report = {"rows": int(len(meta)), "train_starts": int(len(train_starts)), "held_out_starts": int(len(test)),
              "hidden": a.hidden, "unroll": a.unroll, "epochs": a.epochs, "draft_vocab": int(len(sub)),
              "acceptance_by_position": families}
    print(json.dumps(report))

    write_head(a.out, a.model, emb.shape[0], crc, head, sub, report)


def write_head(path, model, vocab, crc, head, sub, report):
    p = head.p
    dim = p["b"].shape[0]
    w = GGUFWriter(path, "draft_head")
    w.add_name("draft head for " + os.path.basename(model))
    w.add_uint32("draft_head.dim", dim)
    w.add_uint32("draft_head.vocab", vocab)
    w.add_uint32("draft_head.ffn_dim", p["gate"].shape[0])
    w.add_uint32("draft_head.embedding_crc32", crc)
    w.add_string("draft_head.training", json.dumps(report))
    w.add_array("draft_head.draft_ids", [int(x) for x in sub])  # the ids it drafts, ascending
    # Matrices in F16 (half the bytes each draft reads), rows as outputs; the bias in F32.
    f16 = lambda m: np.ascontiguousarray(m).astype(np.float16)  # noqa: E731
    w.add_tensor("draft_head.fc_feature.weight", f16(p["W"][:, :dim]))
    w.add_tensor("draft_head.fc_token.weight", f16(p["W"][:, dim:]))
    w.add_tensor("draft_head.fc.bias", p["b"])
    w.add_tensor("draft_head.ffn_gate.weight", f16(p["gate"]))
    w.add_tensor("draft_head.ffn_up.weight", f16(p["up"]))
    w.add_tensor("draft_head.ffn_down.weight", f16(p["down"]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
