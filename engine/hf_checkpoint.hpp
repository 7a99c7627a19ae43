// Hugging Face checkpoints: a directory with config.json, the weights in
// model.safetensors (or shards listed by model.safetensors.index.json) and the
// tokenizer in tokenizer.json + tokenizer_config.json (+ generation_config.json,
// chat_template.jinja). The checkpoint is presented as a GgufFile: the settings
// become the GGUF metadata keys the model loader, tokenizer and chat template
// already read, and the tensors, renamed to GGUF's names, point into the mapped
// safetensors files (no copy; only the small norm vectors are widened to F32).
//
// Supported: LlamaForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM (the shared
// decoder, engine/models/decoder.hpp) with BF16, F16 or F32 weights, linear RoPE scaling,
// and byte-level BPE tokenizers. Anything else is refused with a LoadError naming
// the file and the key or tensor. A model_type deepseek_v4 checkpoint becomes a
// GgufFile without tensors (architecture deepseek_v4, its context and its
// tokenizer): its own loader maps the weights (engine/models/deepseek_v4.hpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/gguf_reader.hpp"

namespace inferd::engine {

// Loads the checkpoint in `dir`; throws LoadError.
std::unique_ptr<GgufFile> open_hf_checkpoint(const std::string& dir);

// The safetensors files (names within `dir`) a load of the checkpoint reads:
// model.safetensors, or the shards model.safetensors.index.json lists. Throws LoadError.
std::vector<std::string> checkpoint_weight_files(const std::string& dir);

// What --model names: a directory is read as a Hugging Face checkpoint, anything
// else as a GGUF file.
std::unique_ptr<GgufFile> open_model(const std::string& path);

// GGUF metadata key, set only on Hugging Face checkpoints: their q/k weights are
// not permuted, so RoPE rotates the two halves of each head (NeoX layout).
inline constexpr const char* kRopeNeoxKey = "inferd.rope.neox";

}  // namespace inferd::engine
