// Hugging Face checkpoints (engine/hf_checkpoint.hpp, engine/safetensors_reader.hpp)
// on the CPU backend, against transformers in float32 on the committed tiny
// random checkpoint (tests/golden/hf-tiny, tests/golden/hf_tiny.json, both made
// by tools/make_hf_golden.py): its BF16 weights, widened to F32 (exact
// precision), give logits within 1e-3 (absolute; measured 1.3e-5) of
// transformers' and the same argmax at every prompt position and the same 16
// greedy tokens; as stored (fast precision) within 5e-2 and the same greedy
// tokens. Copies of it resharded, or converted to F32 or F16, load to the same
// logits; damaged copies fail to load with errors naming the file and the
// byte offset or the key.
#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "cluster/messages.hpp"
#include "engine/chat_template.hpp"
#include "engine/hf_checkpoint.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/models/model_registry.hpp"
#include "engine/safetensors_reader.hpp"
#include "engine/tokenizer.hpp"
#include "kernels/half.hpp"
#include "tests/unit/golden_runner.hpp"
#include "tests/unit/safetensors_scratch.hpp"
#include "tests/unit/test_paths.hpp"

using namespace inferd;
namespace fs = std::filesystem;
namespace json = boost::json;
using namespace test_golden;
using test_scratch::read_entries;
using test_scratch::safetensors_bytes;
using test_scratch::StEntry;
using test_scratch::write_text;

namespace {

std::string fixture() { return test_paths::source_dir() + "/tests/golden/hf-tiny"; }

// The fixture's tensors.
std::vector<StEntry> fixture_entries() { return read_entries(fixture() + "/model.safetensors"); }

// A scratch copy of the fixture.
struct Scratch : test_scratch::Scratch {
  explicit Scratch(const std::string& tag) : test_scratch::Scratch(fixture(), "hf-" + tag) {}
};

StEntry widened(StEntry e, const std::string& to) {
  REQUIRE(e.dtype == "BF16");
  const size_t n = e.bytes.size() / 2;
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    uint16_t b;
    std::memcpy(&b, e.bytes.data() + 2 * i, 2);
    const uint32_t bits = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    if (to == "F32") {
      out.append(reinterpret_cast<const char*>(&f), 4);
    } else {
      const uint16_t h = kernels::fp32_to_fp16(f);
      out.append(reinterpret_cast<const char*>(&h), 2);
    }
  }
  e.dtype = to;
  e.bytes = out;
  return e;
}

json::object golden() { return read_golden(test_paths::source_dir() + "/tests/golden/hf_tiny.json"); }

}  // namespace

TEST_CASE("HF checkpoint: config.json maps onto the Llama model") {
  Runner r(fixture());
  const auto& mc = r.model->config();
  CHECK(mc.architecture == "llama");
  CHECK(mc.n_layers == 2);
  CHECK(mc.dim == 16);
  CHECK(mc.n_heads == 4);
  CHECK(mc.n_kv_heads == 2);
  CHECK(mc.head_dim == 8);  // config.json's head_dim, not hidden_size / heads
  CHECK(mc.ffn_dim == 64);
  CHECK(mc.vocab == 49152);
  CHECK(mc.max_context == 256);
  CHECK(mc.norm_eps == doctest::Approx(1e-5));
  CHECK(mc.rope.neox);
  CHECK(mc.rope.freq_base == doctest::Approx(10000.0));
  CHECK(mc.rope.freq_scale == doctest::Approx(0.5));  // linear, factor 2
  CHECK(mc.tied_embeddings);
  // Weights stay in the mapping: the embedding is the file's own bytes.
  auto st = engine::SafetensorsFile::open(fixture() + "/model.safetensors");
  CHECK(r.file->tensor("token_embd.weight").type == kernels::DType::BF16);
  CHECK(r.file->tensor("blk.0.attn_q.weight").dims == std::vector<int64_t>{16, 32});
}

TEST_CASE("HF checkpoint: tokenizer.json and tokenizer_config.json give transformers' ids and specials") {
  const auto file = engine::open_model(fixture());
  const auto tok = engine::Tokenizer::from_gguf(*file);
  CHECK(tok->vocab_size() == 49152);
  CHECK(tok->token_text(tok->bos()) == "<|im_start|>");
  CHECK(tok->token_text(tok->eos()) == "<|im_end|>");
  CHECK_FALSE(tok->add_bos());
  CHECK(tok->token_type(0) == engine::TokenType::Control);
  const auto g = golden();
  for (const auto& cv : g.at("cases").as_array()) {
    const auto& c = cv.as_object();
    const std::string prompt(c.at("prompt").as_string());
    CAPTURE(prompt);
    CHECK(tok->encode(prompt, true, true) == ints(c.at("ids")));
  }
  const auto chat = engine::ChatTemplate::from_gguf(*file, *tok);
  CHECK(chat.apply(std::vector<engine::ChatMessage>{{"user", "Hi"}}, true).ends_with(
      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
}

TEST_CASE("HF checkpoint: exact precision matches transformers float32") {
  Runner r(fixture());
  check_cases(r, golden(), true, 1e-3, "exact");
}

TEST_CASE("HF checkpoint: fast precision (BF16 weights as stored) stays close to transformers") {
  Runner r(fixture(), engine::Precision::Fast);
  check_cases(r, golden(), false, 5e-2, "fast");  // measured 1.3e-2 (F16 KV cache, the fast kernels)
}

TEST_CASE("HF checkpoint: sharded, F32 and F16 copies load to the same logits") {
  const auto ids = ints(golden().at("cases").as_array()[0].at("ids"));
  Runner whole(fixture());
  const std::vector<float> want(whole.run(ids), whole.run(ids) + ids.size() * size_t(whole.vocab));
  auto entries = fixture_entries();
  REQUIRE(entries.size() > 2);

  SUBCASE("three shards and an index") {
    Scratch s("shards");
    fs::remove(s.path("model.safetensors"));
    json::object map;
    for (size_t shard = 0; shard < 3; ++shard) {
      std::vector<StEntry> part;
      const std::string name = "model-0000" + std::to_string(shard + 1) + "-of-00003.safetensors";
      for (size_t i = shard; i < entries.size(); i += 3) {
        part.push_back(entries[i]);
        map[entries[i].name] = name;
      }
      write_text(s.path(name), safetensors_bytes(part));
    }
    write_text(s.path("model.safetensors.index.json"),
               json::serialize(json::object{{"metadata", json::object{}}, {"weight_map", map}}));
    Runner r(s.path());
    const float* got = r.run(ids);
    CHECK(std::equal(want.begin(), want.end(), got));
  }
  SUBCASE("F32") {
    Scratch s("f32");
    std::vector<StEntry> f32;
    for (auto& e : entries) f32.push_back(widened(e, "F32"));
    write_text(s.path("model.safetensors"), safetensors_bytes(f32));
    Runner r(s.path());
    CHECK(r.file->tensor("token_embd.weight").type == kernels::DType::F32);
    const float* got = r.run(ids);
    CHECK(std::equal(want.begin(), want.end(), got));
  }
  SUBCASE("F16") {
    Scratch s("f16");
    std::vector<StEntry> f16;
    for (auto& e : entries) f16.push_back(widened(e, "F16"));
    write_text(s.path("model.safetensors"), safetensors_bytes(f16));
    Runner r(s.path());
    CHECK(r.file->tensor("token_embd.weight").type == kernels::DType::F16);
    const float* got = r.run(ids);
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::abs(want[i] - got[i])));
    CHECK(worst < 1e-2);  // BF16 values below F16's normal range lose bits
  }
}

TEST_CASE("HF checkpoint: unsupported checkpoints are refused naming the file and key or tensor") {
  Scratch s("refuse");
  const std::string config = read_text(fixture() + "/config.json");
  auto with_config = [&](const std::string& from, const std::string& to) {
    std::string c = config;
    const auto at = c.find(from);
    REQUIRE(at != std::string::npos);
    write_text(s.path("config.json"), c.replace(at, from.size(), to));
  };
  SUBCASE("architecture") {
    with_config("\"LlamaForCausalLM\"", "\"MistralForCausalLM\"");
    const auto e = load_error(s.path());
    CHECK(e.find("config.json") != std::string::npos);
    CHECK(e.find("'architectures'") != std::string::npos);
    CHECK(e.find("MistralForCausalLM") != std::string::npos);
  }
  SUBCASE("rope scaling other than linear") {
    with_config("\"rope_type\": \"linear\"", "\"rope_type\": \"llama3\"");
    const auto e = load_error(s.path());
    CHECK(e.find("config.json") != std::string::npos);
    CHECK(e.find("rope_parameters.rope_type") != std::string::npos);
    CHECK(e.find("llama3") != std::string::npos);
  }
  SUBCASE("older rope_scaling key") {
    with_config("\"rope_parameters\"", "\"rope_scaling\"");
    CHECK(load_error(s.path()) == "(loaded)");
    with_config("\"rope_type\": \"linear\",\n    \"type\": \"linear\"", "\"type\": \"dynamic\"");
    const auto e = load_error(s.path());
    CHECK(e.find("rope_parameters.type") != std::string::npos);
  }
  SUBCASE("SentencePiece-style tokenizer") {
    std::string t = read_text(fixture() + "/tokenizer.json");
    const auto at = t.find("\"type\":\"BPE\"");
    REQUIRE(at != std::string::npos);
    write_text(s.path("tokenizer.json"), t.replace(at, 12, "\"type\":\"Unigram\""));
    const auto e = load_error(s.path());
    CHECK(e.find("tokenizer.json") != std::string::npos);
    CHECK(e.find("'model.type'") != std::string::npos);
    CHECK(e.find("Unigram") != std::string::npos);
  }
  SUBCASE("a dtype other than BF16, F16, F32") {
    auto entries = fixture_entries();
    entries[0].dtype = "I16";  // same size, so the header stays consistent
    write_text(s.path("model.safetensors"), safetensors_bytes(entries));
    const auto e = load_error(s.path());
    CHECK(e.find("model.safetensors") != std::string::npos);
    CHECK(e.find(entries[0].name) != std::string::npos);
    CHECK(e.find("I16") != std::string::npos);
  }
  SUBCASE("a tensor of another architecture") {
    auto entries = fixture_entries();
    entries.push_back({"model.layers.0.self_attn.q_proj.bias", "BF16", {32}, std::string(64, '\0')});
    write_text(s.path("model.safetensors"), safetensors_bytes(entries));
    const auto e = load_error(s.path());
    CHECK(e.find("q_proj.bias") != std::string::npos);
  }
  SUBCASE("a directory without weights") {
    fs::remove(s.path("model.safetensors"));
    CHECK(load_error(s.path()).find("model.safetensors") != std::string::npos);
  }
}

TEST_CASE("safetensors: malformed headers are load errors naming the file and byte offset") {
  const std::vector<StEntry> good{{"a", "F32", {2, 2}, std::string(16, '\1')}, {"b", "BF16", {4}, std::string(8, '\2')}};
  const std::string bytes = safetensors_bytes(good);
  auto bytes_of = [](const std::string& s) { return std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()); };
  auto error = [&](const std::string& image) -> std::string {
    try {
      engine::SafetensorsFile::open_memory(bytes_of(image), "x.safetensors");
    } catch (const engine::LoadError& e) {
      CHECK(std::string(e.what()).starts_with("x.safetensors: offset "));
      return e.what();
    }
    return "(loaded)";
  };
  const auto f = engine::SafetensorsFile::open_memory(bytes_of(bytes), "x.safetensors");
  REQUIRE(f->tensors().size() == 2);
  CHECK(f->find("a")->shape == std::vector<int64_t>{2, 2});
  CHECK(f->find("b")->offset == f->data_offset() + 16);

  CHECK(error(bytes.substr(0, 5)).find("too short") != std::string::npos);
  std::string huge = bytes;
  huge[7] = 0x7f;
  CHECK(error(huge).find("offset 0: header length") != std::string::npos);
  std::string broken = bytes;
  broken[8 + 5] = '}';  // inside the JSON
  CHECK(error(broken).find("not valid JSON") != std::string::npos);

  auto with_header = [&](const std::string& h, size_t data) {
    const uint64_t n = h.size();
    return std::string(reinterpret_cast<const char*>(&n), 8) + h + std::string(data, '\0');
  };
  const auto past = error(with_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8));
  CHECK(past.find("not inside the data section") != std::string::npos);
  const auto overlap = error(with_header(
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
      16));
  CHECK(overlap.find("overlaps") != std::string::npos);
  const size_t header = 8 + std::string(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})").size();
  CHECK(overlap.find("offset " + std::to_string(header + 8) + ":") != std::string::npos);
  CHECK(error(with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", 16)).find("take 12") !=
        std::string::npos);
  CHECK(error(with_header(R"({"a":{"dtype":"Q9","shape":[3],"data_offsets":[0,3]}})", 16)).find("unknown dtype") !=
        std::string::npos);
  CHECK(error(with_header(R"([1,2])", 0)).find("not a JSON object") != std::string::npos);
}

TEST_CASE("HF checkpoint: an untied lm_head is the output; tied, it is left unused") {
  const auto ids = ints(golden().at("cases").as_array()[0].at("ids"));
  Runner tied(fixture());
  const std::vector<float> want(tied.run(ids), tied.run(ids) + ids.size() * size_t(tied.vocab));
  auto entries = fixture_entries();
  const auto emb = std::find_if(entries.begin(), entries.end(), [](const StEntry& e) { return e.name == "model.embed_tokens.weight"; });
  REQUIRE(emb != entries.end());
  StEntry head = *emb;
  head.name = "lm_head.weight";

  Scratch s("untied");
  std::string config = read_text(fixture() + "/config.json");
  config.replace(config.find("\"tie_word_embeddings\": true"), 27, "\"tie_word_embeddings\": false");
  write_text(s.path("config.json"), config);
  SUBCASE("untied, with lm_head: the same numbers through output.weight") {
    entries.push_back(head);
    write_text(s.path("model.safetensors"), safetensors_bytes(entries));
    Runner r(s.path());
    CHECK_FALSE(r.model->config().tied_embeddings);
    CHECK(r.file->find_tensor("output.weight") != nullptr);
    const float* got = r.run(ids);
    CHECK(std::equal(want.begin(), want.end(), got));
  }
  SUBCASE("untied without lm_head: refused naming the key and the tensor") {
    const auto e = load_error(s.path());
    CHECK(e.find("tie_word_embeddings") != std::string::npos);
    CHECK(e.find("lm_head.weight") != std::string::npos);
  }
  SUBCASE("tied with an lm_head saved anyway: the embedding is the output") {
    write_text(s.path("config.json"), read_text(fixture() + "/config.json"));
    entries.push_back(head);
    write_text(s.path("model.safetensors"), safetensors_bytes(entries));
    Runner r(s.path());
    CHECK(r.model->config().tied_embeddings);
    CHECK(r.file->find_tensor("output.weight") == nullptr);
  }
}

TEST_CASE("HF checkpoint: tokenizer.json's pre-tokenizer and post-processor pick the family and BOS") {
  Scratch s("tok");
  // A Llama 3 style tokenizer: the split regex, then ByteLevel without its own
  // regex; BOS added by the post-processor; a second stop id in generation_config.
  auto tok_json = [](const json::value& pre, const json::value& post) {
    json::object vocab;
    const char* pieces[] = {"a", "b", "c", "Ġ", "ab", "<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>"};
    for (int i = 0; i < 5; ++i) vocab[pieces[i]] = i;
    json::array added;
    for (int i = 5; i < 8; ++i) added.push_back(json::object{{"id", i}, {"content", pieces[i]}, {"special", true}});
    return json::serialize(json::object{
        {"normalizer", nullptr},
        {"pre_tokenizer", pre},
        {"post_processor", post},
        {"added_tokens", added},
        {"model", json::object{{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array{"a b"}},
                               {"ignore_merges", true}, {"byte_fallback", false}}}});
  };
  const std::string llama3_regex =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const json::value split = json::object{{"type", "Split"}, {"pattern", json::object{{"Regex", llama3_regex}}},
                                         {"behavior", "Isolated"}, {"invert", false}};
  const json::value byte_level = json::object{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  const json::value post = json::object{
      {"type", "TemplateProcessing"},
      {"single", json::array{json::object{{"SpecialToken", json::object{{"id", "<|begin_of_text|>"}}}}}}};
  write_text(s.path("tokenizer.json"),
             tok_json(json::object{{"type", "Sequence"}, {"pretokenizers", json::array{split, byte_level}}}, post));
  write_text(s.path("tokenizer_config.json"),
             R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": "{{ '<|start_header_id|>' }}"})");
  write_text(s.path("generation_config.json"), R"({"bos_token_id": 5, "eos_token_id": [7, 6]})");
  fs::remove(s.path("chat_template.jinja"));
  {
    const auto file = engine::open_model(s.path());
    const auto tok = engine::Tokenizer::from_gguf(*file);
    CHECK(tok->pre_tokenizer().name() == "llama3");
    CHECK(tok->bos() == 5);
    CHECK(tok->eos() == 6);
    CHECK(tok->add_bos());
    CHECK(tok->stop_ids() == std::vector<int32_t>{6, 7});
    CHECK(tok->encode("ab", true, true) == std::vector<int32_t>{5, 4});
    CHECK(engine::ChatTemplate::from_gguf(*file, *tok).apply({}, false) == "<|start_header_id|>");
  }
  SUBCASE("a regex inferd has no family for") {
    json::value other = split;
    other.as_object()["pattern"] = json::object{{"Regex", "\\w+"}};
    write_text(s.path("tokenizer.json"),
               tok_json(json::object{{"type", "Sequence"}, {"pretokenizers", json::array{other, byte_level}}}, post));
    const auto e = load_error(s.path());
    CHECK(e.find("tokenizer.json") != std::string::npos);
    CHECK(e.find("'pre_tokenizer'") != std::string::npos);
  }
  SUBCASE("a Metaspace (SentencePiece) pre-tokenizer") {
    write_text(s.path("tokenizer.json"), tok_json(json::object{{"type", "Metaspace"}}, post));
    const auto e = load_error(s.path());
    CHECK(e.find("'pre_tokenizer'") != std::string::npos);
    CHECK(e.find("Metaspace") != std::string::npos);
  }
}

TEST_CASE("HF checkpoint: tensor-parallel ranks fingerprint a checkpoint directory by its config and weights") {
  const auto want = cluster::model_fingerprint(fixture());
  CHECK(want.model_bytes == fs::file_size(fixture() + "/model.safetensors"));
  Scratch s("fingerprint");
  CHECK(cluster::model_fingerprint(s.path()).model_hash == want.model_hash);
  std::string config = read_text(s.path("config.json"));
  config.replace(config.find("\"rms_norm_eps\": 1e-05"), 21, "\"rms_norm_eps\": 1e-06");
  write_text(s.path("config.json"), config);
  CHECK(cluster::model_fingerprint(s.path()).model_hash != want.model_hash);
}
