"""A Q4_K_M-style model (Q4_K, Q6_K and the Q5_0 fallback for rows that are not a
whole number of 256) loads and generates through every CPU kernel table: the
AVX-512 one gives the scalar one's tokens (its quantized matmul is bit for bit
the scalar one's). The model is tiny and random (tools/make_random_gguf.py),
with the default model's tokenizer."""
import pytest

from conftest import cpu_has, generate_on, random_model

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def tiny_q4_k_m(tmp_path_factory):
    return random_model(tmp_path_factory.mktemp("kquant") / "tiny-q4_k_m.gguf", "q4_k_m")


def test_a_q4_k_m_model_generates_the_same_tokens_on_the_scalar_and_avx512_kernels(tiny_q4_k_m):
    scalar = generate_on(tiny_q4_k_m, "scalar")
    assert len(scalar) > 0
    if not cpu_has("avx512"):
        pytest.skip("no AVX-512 VNNI on this CPU")
    assert generate_on(tiny_q4_k_m, "avx512") == scalar


def test_a_q4_k_m_model_generates_on_the_avx2_kernels(tiny_q4_k_m):
    if not cpu_has("avx2"):
        pytest.skip("no AVX2 on this CPU")
    assert len(generate_on(tiny_q4_k_m, "avx2")) > 0
