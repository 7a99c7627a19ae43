// DeepSeek-V4 checkpoints: the sharded safetensors reader
// (engine/safetensors_checkpoint.hpp), the parameter schema
// (engine/models/deepseek_v4_schema.hpp) and the gate holding one against the
// other (engine/checkpoint_gate.hpp), on the committed tiny checkpoint
// (tests/golden/dsv4-tiny, made by tools/make_dsv4_checkpoint.py) and on
// damaged copies of it: each failure names the file and the tensor.
#include <doctest/doctest.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cstring>
#include <filesystem>

#include "engine/checkpoint_gate.hpp"
#include "engine/json_file.hpp"
#include "engine/models/deepseek_v4_schema.hpp"
#include "engine/safetensors_checkpoint.hpp"
#include "tests/unit/golden_runner.hpp"
#include "tests/unit/safetensors_scratch.hpp"
#include "tests/unit/test_paths.hpp"

using namespace inferd;
using namespace test_scratch;
using test_golden::read_text;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

std::string fixture() { return test_paths::source_dir() + "/tests/golden/dsv4-tiny"; }

const std::string kShard1 = "model-00001-of-00003.safetensors";
const std::string kShard2 = "model-00002-of-00003.safetensors";
const std::string kShard3 = "model-00003-of-00003.safetensors";

// The first problem the gate reports ("" when it passes).
std::string gate_problem(const std::string& dir) {
  const auto r = engine::check_checkpoint(dir);
  return r.passed() ? "" : r.problems.front();
}

// The shard rewritten after `edit` changes its entries.
template <class Edit>
void rewrite(const Scratch& s, const std::string& shard, Edit edit) {
  auto entries = read_entries(s.path(shard));
  edit(entries);
  write_text(s.path(shard), safetensors_bytes(entries));
}

StEntry& entry(std::vector<StEntry>& entries, const std::string& name) {
  const auto it = std::find_if(entries.begin(), entries.end(), [&](const StEntry& e) { return e.name == name; });
  REQUIRE(it != entries.end());
  return *it;
}

// A config.json with V4-Flash's real dimensions; `dspark` adds the 0731 DSpark keys and stages.
engine::JsonFile real_config(bool dspark) {
  json::array ratios{0, 0};
  for (int l = 2; l < 43; ++l) ratios.push_back(l % 2 == 0 ? 4 : 128);
  ratios.push_back(0);  // the preview's NextN stage, or DSpark stage 0
  json::object c{{"model_type", "deepseek_v4"}, {"hidden_size", 4096}, {"num_hidden_layers", 43},
                 {"num_attention_heads", 64}, {"head_dim", 512}, {"q_lora_rank", 1024}, {"o_lora_rank", 1024},
                 {"o_groups", 8}, {"vocab_size", 129280}, {"n_routed_experts", 256}, {"num_experts_per_tok", 6},
                 {"moe_intermediate_size", 2048}, {"n_shared_experts", 1}, {"num_hash_layers", 3}, {"hc_mult", 4},
                 {"index_n_heads", 64}, {"index_head_dim", 128}, {"num_nextn_predict_layers", 1},
                 {"expert_dtype", "fp4"},
                 {"quantization_config", json::object{{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"},
                                                      {"weight_block_size", json::array{128, 128}}}}};
  if (dspark) {
    ratios.push_back(0);
    ratios.push_back(0);
    c["dspark_markov_rank"] = 256;
    c["dspark_target_layer_ids"] = json::array{40, 41, 42};
  }
  c["compress_ratios"] = ratios;
  return {"config.json", c};
}

size_t count_draft(const std::vector<engine::ParamSpec>& ps) {
  return std::count_if(ps.begin(), ps.end(), [](const engine::ParamSpec& p) { return p.draft; });
}

const engine::ParamSpec& spec(const std::vector<engine::ParamSpec>& ps, const std::string& name) {
  const auto it = std::find_if(ps.begin(), ps.end(), [&](const engine::ParamSpec& p) { return p.name == name; });
  REQUIRE(it != ps.end());
  return *it;
}

}  // namespace

TEST_CASE("DeepSeek-V4 schema: the real configs call for the released checkpoints' tensors") {
  // The 0731 (DSpark) release holds 72,317 tensors, the preview 69,187 (their shard headers).
  const auto dspark = engine::deepseek_v4_params(real_config(true));
  CHECK(dspark.size() == 72317);
  CHECK(count_draft(dspark) == 3 * 1565 + 10);
  const auto preview = engine::deepseek_v4_params(real_config(false));
  CHECK(preview.size() == 69187);
  CHECK(count_draft(preview) == 1565 + 10);

  // Shapes and dtypes as the 0731 headers hold them.
  auto is = [&](const std::string& name, const std::string& dtype, std::vector<int64_t> shape) {
    const auto& p = spec(dspark, name);
    CHECK_MESSAGE(p.dtype == dtype, name);
    CHECK_MESSAGE(p.shape == shape, name);
  };
  is("layers.0.attn.wq_b.scale", "F8_E8M0", {256, 8});
  is("layers.0.attn.wo_a.weight", "F8_E4M3", {8192, 4096});
  is("layers.0.hc_attn_fn", "F32", {24, 16384});
  is("layers.2.ffn.gate.tid2eid", "I64", {129280, 6});
  is("layers.3.ffn.gate.bias", "F32", {256});
  is("layers.2.attn.compressor.ape", "F32", {4, 1024});
  is("layers.3.attn.compressor.ape", "F32", {128, 512});
  is("layers.2.attn.indexer.wq_b.scale", "F8_E8M0", {64, 8});
  is("layers.5.ffn.experts.255.w1.weight", "I8", {2048, 2048});
  is("layers.5.ffn.experts.255.w2.scale", "F8_E8M0", {4096, 64});
  is("mtp.0.main_proj.scale", "F8_E8M0", {32, 96});
  is("mtp.2.confidence_head.proj.weight", "BF16", {1, 4352});
  is("mtp.2.hc_head_fn", "F32", {4, 16384});
  CHECK(spec(dspark, "mtp.1.ffn.gate.bias").draft);

  SUBCASE("a config it cannot read is refused naming the key") {
    auto c = real_config(true);
    c.root.as_object().erase("hc_mult");
    CHECK_THROWS_WITH_AS(engine::deepseek_v4_params(c), doctest::Contains("key 'hc_mult': missing"), engine::LoadError);
    c = real_config(true);
    c.root.as_object()["compress_ratios"] = json::array{0, 4};
    CHECK_THROWS_WITH_AS(engine::deepseek_v4_params(c), doctest::Contains("key 'compress_ratios'"), engine::LoadError);
  }
}

TEST_CASE("DeepSeek-V4 checkpoint: the tiny fixture passes the gate, mapped in three shards") {
  const auto c = engine::SafetensorsCheckpoint::open(fixture());
  CHECK(c.sharded());
  CHECK(c.files().size() == 3);
  CHECK(c.tensor_count() == 466);
  const auto w = c.find("layers.3.ffn.experts.3.w2.weight");
  REQUIRE(w.tensor);
  CHECK(*w.file == kShard2);
  CHECK(w.tensor->dtype == "I8");

  CHECK(engine::checkpoint_model_type(fixture()) == "deepseek_v4");
  const auto r = engine::check_checkpoint(fixture());
  CHECK_MESSAGE(r.passed(), (r.problems.empty() ? std::string() : r.problems.front()));
  REQUIRE(r.lines.size() == 3);
  CHECK(r.lines[0] == "3/3 shards readable, headers consistent (466 tensors)");
  CHECK(r.lines[1] == "297/297 params");
  CHECK(r.lines[2] == "169/169 draft params");
}

TEST_CASE("safetensors checkpoint: an unsharded model.safetensors still opens") {
  const auto c = engine::SafetensorsCheckpoint::open(test_paths::source_dir() + "/tests/golden/hf-tiny");
  CHECK_FALSE(c.sharded());
  CHECK(c.file_names() == std::vector<std::string>{"model.safetensors"});
  CHECK(c.tensor_count() > 0);
}

TEST_CASE("DeepSeek-V4 checkpoint: damaged copies fail the gate naming the file and the tensor") {
  Scratch s(fixture(), "dsv4");

  SUBCASE("missing shard") {
    fs::remove(s.path(kShard2));
    const auto e = gate_problem(s.path());
    CHECK(e.find(kShard2) != std::string::npos);
    CHECK(e.find("cannot open") != std::string::npos);
    CHECK(e.find("tensor 'layers.2.attn.compressor.ape'") != std::string::npos);  // the first the index puts there
  }
  SUBCASE("truncated shard") {
    const auto size = fs::file_size(s.path(kShard3));
    fs::resize_file(s.path(kShard3), size - 1000);
    const auto e = gate_problem(s.path());
    CHECK(e.find(kShard3) != std::string::npos);
    CHECK(e.find("is not inside the data section") != std::string::npos);
    CHECK(e.find("tensor '") != std::string::npos);
  }
  SUBCASE("header JSON malformed") {
    std::string bytes = read_text(s.path(kShard1));
    bytes[8] = 'x';  // the header's opening brace
    write_text(s.path(kShard1), bytes);
    const auto e = gate_problem(s.path());
    CHECK(e.find(kShard1) != std::string::npos);
    CHECK(e.find("header is not valid JSON") != std::string::npos);
    CHECK(e.find("for tensor 'embed.weight'") != std::string::npos);
  }
  SUBCASE("tensor outside the file") {
    // The header claims the last tensor ends past the data.
    auto entries = read_entries(s.path(kShard2));
    std::string bytes = safetensors_bytes(entries);
    uint64_t n;
    std::memcpy(&n, bytes.data(), 8);
    auto header = json::parse(bytes.substr(8, n)).as_object();
    const std::string last = entries.back().name;
    auto& range = header[last].as_object()["data_offsets"].as_array();
    range[1] = range[1].to_number<uint64_t>() + 64;
    const std::string h = json::serialize(header);
    const uint64_t m = h.size();
    write_text(s.path(kShard2), std::string(reinterpret_cast<const char*>(&m), 8) + h + bytes.substr(8 + n));
    const auto e = gate_problem(s.path());
    CHECK(e.find(kShard2) != std::string::npos);
    CHECK(e.find("tensor '" + last + "'") != std::string::npos);
    CHECK(e.find("not inside the data section") != std::string::npos);
  }
  SUBCASE("wrong dtype") {
    rewrite(s, kShard1, [](auto& es) { entry(es, "layers.0.attn.wq_a.weight").dtype = "I8"; });
    const auto e = gate_problem(s.path());
    CHECK(e.find(kShard1) != std::string::npos);
    CHECK(e.find("tensor 'layers.0.attn.wq_a.weight': dtype I8, the config needs F8_E4M3") != std::string::npos);
  }
  SUBCASE("wrong shape") {
    rewrite(s, kShard1, [](auto& es) { entry(es, "layers.1.attn.wq_b.weight").shape = {32, 64}; });
    const auto e = gate_problem(s.path());
    CHECK(e.find(kShard1) != std::string::npos);
    CHECK(e.find("tensor 'layers.1.attn.wq_b.weight': shape [32, 64], the config needs [64, 32]") != std::string::npos);
  }
  SUBCASE("duplicate names") {
    const auto first = read_entries(s.path(kShard1));
    rewrite(s, kShard2, [&](auto& es) { es.push_back(first.back()); });
    const auto e = gate_problem(s.path());
    CHECK(e.find(kShard2) != std::string::npos);
    CHECK(e.find("tensor '" + first.back().name + "': appears in more than one shard (also in " + kShard1 + ")") !=
          std::string::npos);
  }
  SUBCASE("duplicate names in one header") {
    // JSON parsers keep one of two equal keys; the header is refused instead.
    const auto entries = read_entries(s.path(kShard3));
    std::string bytes = safetensors_bytes(entries);
    uint64_t n;
    std::memcpy(&n, bytes.data(), 8);
    const std::string first = entries.front().name;
    std::string h = bytes.substr(8, n);
    const auto entry_text = json::serialize(json::parse(h).as_object()[first]);
    h.insert(1, "\"" + first + "\":" + entry_text + ",");
    const uint64_t m = h.size();
    write_text(s.path(kShard3), std::string(reinterpret_cast<const char*>(&m), 8) + h + bytes.substr(8 + n));
    const auto e = gate_problem(s.path());
    CHECK(e.find(kShard3) != std::string::npos);
    CHECK(e.find("tensor '" + first + "': named twice in the header") != std::string::npos);
  }
  SUBCASE("missing draft param") {
    const std::string gone = "mtp.2.confidence_head.proj.weight";
    rewrite(s, kShard3, [&](auto& es) { std::erase_if(es, [&](const StEntry& x) { return x.name == gone; }); });
    SUBCASE("still named by the index") {
      const auto e = gate_problem(s.path());
      CHECK(e.find(engine::kSafetensorsIndex) != std::string::npos);
      CHECK(e.find("weight_map." + gone + "': tensor not found in " + kShard3) != std::string::npos);
    }
    SUBCASE("gone from the index too") {
      auto index = json::parse(read_text(s.path(engine::kSafetensorsIndex))).as_object();
      index["weight_map"].as_object().erase(gone);
      write_text(s.path(engine::kSafetensorsIndex), json::serialize(index));
      const auto r = engine::check_checkpoint(s.path());
      REQUIRE(r.problems.size() == 1);
      CHECK(r.problems[0].find("tensor '" + gone + "': missing (BF16 [1, 80] needed)") != std::string::npos);
      CHECK(r.lines.back() == "168/169 draft params");
    }
  }
  SUBCASE("a tensor the config does not call for") {
    rewrite(s, kShard3, [](auto& es) { entry(es, "mtp.2.norm.weight").name = "mtp.2.extra.weight"; });
    auto index = json::parse(read_text(s.path(engine::kSafetensorsIndex))).as_object();
    auto& map = index["weight_map"].as_object();
    map.erase("mtp.2.norm.weight");
    map["mtp.2.extra.weight"] = kShard3;
    write_text(s.path(engine::kSafetensorsIndex), json::serialize(index));
    const auto r = engine::check_checkpoint(s.path());
    REQUIRE(r.problems.size() == 2);
    CHECK(r.problems[0].find("tensor 'mtp.2.norm.weight': missing") != std::string::npos);
    CHECK(r.problems[1].find(kShard3 + ": tensor 'mtp.2.extra.weight': not a parameter") != std::string::npos);
  }
}
