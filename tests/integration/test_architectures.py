"""Every architecture inferd loads from GGUF, at the weight types people download,
without downloads: tiny seeded random models (tools/make_random_gguf.py --arch)
with the default model's tokenizer load and generate greedily, and the AVX-512
kernel table gives the scalar table's tokens (quantized matmuls are bit for bit
the scalar ones; float weights are summed in another order, which these models'
logits are far enough apart not to feel). Correctness against transformers is
checked per architecture by the golden tests (tests/unit/test_qwen.cpp,
test_gemma.cpp, test_model_golden.cpp); this checks that each architecture's
extra tensors and keys meet every weight type and kernel table."""
import pytest

from conftest import cpu_has, generate_on, random_model

pytest.importorskip("gguf")

ARCHS = ["llama", "qwen2", "qwen3", "gemma2", "gemma3"]
TYPES = ["q4_0", "q8_0", "q4_k_m", "f16"]


@pytest.mark.parametrize("weight_type", TYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_an_architecture_generates_the_same_tokens_on_every_kernel_table(tmp_path, arch, weight_type):
    model = random_model(tmp_path / f"{arch}-{weight_type}.gguf", weight_type, arch)
    scalar = generate_on(model, "scalar")
    assert scalar and scalar[0].strip(), scalar  # twelve tokens of text
    for isa in ("avx2", "avx512"):
        if not cpu_has(isa):
            continue
        tokens = generate_on(model, isa)
        if isa == "avx512":
            assert tokens == scalar
        else:  # AVX2 sums float rows in another order and its k-quant dots within 1e-4: it runs
            assert tokens and tokens[0].strip()
