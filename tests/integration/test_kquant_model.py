"""A Q4_K_M-style model (Q4_K, Q6_K and the Q5_0 fallback for rows that are not a
whole number of 256) loads and generates through every CPU kernel table: the
AVX-512 one gives the scalar one's tokens (its quantized matmul is bit for bit
the scalar one's). The model is tiny and random (tools/make_random_gguf.py),
with the default model's tokenizer."""
import os
import subprocess
import sys

import pytest

from conftest import INFERCTL, SRC, default_model

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def tiny_q4_k_m(tmp_path_factory):
    out = tmp_path_factory.mktemp("kquant") / "tiny-q4_k_m.gguf"
    subprocess.run([sys.executable, str(SRC / "tools" / "make_random_gguf.py"), "--donor", default_model(),
                    "--shape", "tiny", "--type", "q4_k_m", str(out)], check=True, timeout=300)
    return out


def generate(model, isa):
    env = dict(os.environ, INFERD_CPU_ISA=isa)
    r = subprocess.run([str(INFERCTL), "generate", "--model", str(model), "--prompt", "The capital of France is",
                        "--max-tokens", "12", "--ignore-eos", "--threads", "2", "--max-model-len", "256"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"(cpu-{isa})" in r.stdout + r.stderr  # the engine's log names the table it runs
    return [line for line in r.stdout.splitlines() if not line.startswith("[")]  # the text, not the log


def available(isa):
    flags = open("/proc/cpuinfo").read().split()
    need = {"avx2": ["avx2", "fma", "f16c"], "avx512": ["avx512f", "avx512bw", "avx512vl", "avx512_vnni"]}
    return all(f in flags for f in need[isa])


def test_a_q4_k_m_model_generates_the_same_tokens_on_the_scalar_and_avx512_kernels(tiny_q4_k_m):
    scalar = generate(tiny_q4_k_m, "scalar")
    assert len(scalar) > 0
    if not available("avx512"):
        pytest.skip("no AVX-512 VNNI on this CPU")
    assert generate(tiny_q4_k_m, "avx512") == scalar


def test_a_q4_k_m_model_generates_on_the_avx2_kernels(tiny_q4_k_m):
    if not available("avx2"):
        pytest.skip("no AVX2 on this CPU")
    assert len(generate(tiny_q4_k_m, "avx2")) > 0
