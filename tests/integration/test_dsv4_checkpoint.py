"""The DeepSeek-V4 checkpoint gate with the real daemon, on copies of
tests/golden/dsv4-tiny (tools/make_dsv4_checkpoint.py): a copy with a SHA256SUMS
is hashed, then passes the gate ("N/N params", "M/M draft params"), and the load
stops at the tokenizer this fixture lacks, naming tokenizer.json (dsv4-tiny-chat,
which has one, is served: test_dsv4_serving.py); a copy with one tensor's dtype
changed in its shard's header fails the gate naming the shard and the tensor.
Both exit 1 without leaving Loading. `inferctl check-model` prints the same
lines and exits 0 and 1."""
import hashlib
import json
import shutil
import struct
import subprocess

from conftest import INFERCTL, INFERD, SRC, free_port

TINY = SRC / "tests" / "golden" / "dsv4-tiny"
SHARD = "model-00001-of-00003.safetensors"
TENSOR = "layers.0.attn.wq_a.weight"


def start(model):
    r = subprocess.run([str(INFERD), "--host", "127.0.0.1", "--port", str(free_port()), "--model", str(model),
                        "--no-warmup"], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def retype(shard, tensor, dtype):
    """Rewrites the shard's header with `tensor`'s dtype changed (same byte size)."""
    data = shard.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header[tensor]["dtype"] = dtype
    text = json.dumps(header).encode()
    shard.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + n:])


def test_a_valid_checkpoint_passes_the_gate_then_needs_its_tokenizer(tmp_path):
    model = tmp_path / "dsv4"
    shutil.copytree(TINY, model)
    (model / "SHA256SUMS").write_text("".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n"
                                              for p in sorted(model.iterdir())))
    rc, out = start(model)
    assert rc == 1, out[-4000:]
    assert "checkpoint integrity: 5 files" in out, out[-4000:]
    assert "checkpoint gate: 3/3 shards readable, headers consistent (466 tensors)" in out, out[-4000:]
    assert "checkpoint gate: 297/297 params" in out and "checkpoint gate: 169/169 draft params" in out, out[-4000:]
    assert "checkpoint gate: passed" in out, out[-4000:]
    assert f"{model}/tokenizer.json" in out, out[-4000:]
    assert "Loading -> Failed" in out and "model loaded" not in out, out[-4000:]

    r = subprocess.run([str(INFERCTL), "check-model", str(model)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "5/5 files verified" in r.stdout and "169/169 draft params" in r.stdout, r.stdout


def test_a_corrupt_checkpoint_fails_naming_shard_and_tensor(tmp_path):
    model = tmp_path / "dsv4"
    shutil.copytree(TINY, model)
    retype(model / SHARD, TENSOR, "I8")
    rc, out = start(model)
    assert rc == 1, out[-4000:]
    assert f"{model / SHARD}: tensor '{TENSOR}': dtype I8, the config needs F8_E4M3" in out, out[-4000:]
    assert "Loading -> Failed" in out and "model loaded" not in out, out[-4000:]

    r = subprocess.run([str(INFERCTL), "check-model", str(model)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"tensor '{TENSOR}': dtype I8" in r.stdout and "FAILS" in r.stdout, r.stdout
