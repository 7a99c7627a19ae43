// Every tensor a DeepSeek-V4 checkpoint (model_type deepseek_v4: V4-Flash and
// its DSpark 0731 release) must hold, with the exact stored name, dtype and
// shape, derived from config.json alone. The checkpoint gate
// (engine/checkpoint_gate.hpp) holds the files against it.
//
// Storage, as the released checkpoints hold it:
// - linear weights in FP8 (F8_E4M3 [out, in]) with one scale per 128x128
//   block, `NAME.scale` [ceil(out/128), ceil(in/128)]: F8_E8M0 when
//   quantization_config.scale_fmt is "ue8m0", else F32; BF16 [out, in] and no
//   scale when the config has no quantization_config;
// - routed experts (expert_dtype "fp4") in MXFP4: I8 [out, in/2], two E2M1
//   values a byte, with F8_E8M0 scales [out, in/32]; expert_dtype "fp8" stores
//   them as the other linear weights;
// - norms, embeddings, gates, compressors in BF16; hyper-connection mixers,
//   sinks, compressor position biases and gate biases in F32; the hash
//   layers' token-to-expert table in I64.
//
// The stages past num_hidden_layers (stored as mtp.N) are the speculative
// (draft) stages: as many as compress_ratios has entries past the layers,
// else num_nextn_predict_layers. With dspark_* keys they are DSpark stages
// (main_proj, Markov and confidence heads), else one NextN head (e_proj, h_proj).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/json_file.hpp"

namespace inferd::engine {

// The dimensions the schema and the forward pass (deepseek_v4.hpp) both read.
struct DeepseekV4Dims {
  int64_t hidden = 0, layers = 0, heads = 0, head_dim = 0, q_lora = 0, o_lora = 0, o_groups = 0, vocab = 0;
  int64_t experts = 0, experts_per_tok = 0, moe_inter = 0, hash_layers = 0, hc = 0;
  int64_t index_heads = 0, index_head_dim = 0;
};
// Throws LoadError naming config.json and the key that is missing or out of range.
DeepseekV4Dims read_deepseek_v4_dims(const JsonFile& config);

struct ParamSpec {
  std::string name;
  std::string dtype;  // safetensors dtype name
  std::vector<int64_t> shape;
  bool draft = false;  // belongs to a speculative stage (mtp.N)
};

// Throws LoadError naming config.json and the key that is missing or out of range.
std::vector<ParamSpec> deepseek_v4_params(const JsonFile& config);

}  // namespace inferd::engine
