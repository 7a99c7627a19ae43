"""Checkpoint integrity with the real daemon: a copy of tests/golden/hf-tiny with
a SHA256SUMS written here (hashlib, as `sha256sum *` writes it) is verified
before the load, serves, reports the check in /v1/models, and passes `inferctl
proof`'s integrity gate; a copy with one flipped byte, checked against a
manifest given with --model-manifest, never leaves Loading: inferd exits 1 with
the file and both digests named."""
import hashlib
import shutil
import subprocess

from conftest import INFERCTL, INFERD, SRC, free_port

TINY = SRC / "tests" / "golden" / "hf-tiny"
SHAPES = ["--max-model-len", "256", "--max-num-batched-tokens", "128", "--max-num-seqs", "4"]


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sums(directory):
    return "".join(f"{sha256(p)}  {p.name}\n" for p in sorted(directory.iterdir()) if p.name != "SHA256SUMS")


def test_verified_checkpoint_serves_and_passes_the_proof_gate(start_daemon, tmp_path):
    model = tmp_path / "hf-tiny"
    shutil.copytree(TINY, model)
    (model / "SHA256SUMS").write_text(sums(model))
    d = start_daemon(["--model", str(model), "--no-warmup"] + SHAPES, small_shapes=False)
    entry = d.get("/v1/models").json()["data"][0]
    integrity = entry["integrity"]
    assert integrity["status"] == "verified", entry
    assert integrity["manifest"] == str(model / "SHA256SUMS")
    assert integrity["files"] == 6
    assert integrity["bytes"] == sum(p.stat().st_size for p in model.iterdir() if p.name != "SHA256SUMS")
    assert f"checkpoint integrity: 6 files" in d.output() and f"match {model / 'SHA256SUMS'}" in d.output()

    out = tmp_path / "proof.json"
    r = subprocess.run([str(INFERCTL), "proof", "--url", d.url, "--gates", "integrity", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "integrity" in r.stdout and "PASSED: 0 of 1 gates failed" in r.stdout, r.stdout
    assert "6 files" in r.stdout and "SHA256SUMS" in r.stdout, r.stdout


def test_a_corrupted_copy_never_leaves_loading(tmp_path):
    model = tmp_path / "hf-tiny"
    shutil.copytree(TINY, model)
    manifest = tmp_path / "SUMS"  # beside the checkpoint, given with --model-manifest
    manifest.write_text(sums(model))
    weights = model / "model.safetensors"
    expected = sha256(weights)
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    actual = sha256(weights)
    r = subprocess.run([str(INFERD), "--host", "127.0.0.1", "--port", str(free_port()), "--model", str(model),
                        "--model-manifest", str(manifest), "--no-warmup"] + SHAPES,
                       capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-4000:]
    assert f"{weights}: SHA-256 mismatch: expected {expected}, actual {actual}" in out, out[-4000:]
    assert "model loaded" not in out and "Warming" not in out, out[-4000:]
