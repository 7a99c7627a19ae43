#include "cluster/messages.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace inferd::cluster {

namespace json = boost::json;

std::string FabricChoice::describe() const {
  if (empty()) return "none";
  std::string out = "interface " + interface;
  if (device.empty()) out += " (sockets: no RDMA device)";
  else out += fmt::format(", {} port {}, RoCE v2 GID index {}", device, port, gid_index);
  if (!address.empty()) out += ", address " + address;
  if (mtu > 0) out += fmt::format(", MTU {}", mtu);
  if (!link_layer.empty()) out += ", " + link_layer;
  return out;
}

json::object FabricChoice::to_json() const {
  return {{"interface", interface}, {"device", device}, {"port", port}, {"gid_index", gid_index},
          {"mtu", mtu}, {"link_layer", link_layer}, {"address", address}};
}

FabricChoice FabricChoice::from_json(const json::object& o) {
  FabricChoice c;
  auto str = [&](std::string_view k, std::string& out) {
    if (const auto* v = o.if_contains(k)) out = json::value_to<std::string>(*v);
  };
  auto num = [&](std::string_view k, int& out) {
    if (const auto* v = o.if_contains(k)) out = json::value_to<int>(*v);
  };
  str("interface", c.interface);
  str("device", c.device);
  num("port", c.port);
  num("gid_index", c.gid_index);
  num("mtu", c.mtu);
  str("link_layer", c.link_layer);
  str("address", c.address);
  return c;
}

json::object Fingerprint::to_json() const {
  return {{"model_bytes", model_bytes},
          {"model_hash", model_hash},
          {"tensor_parallel_size", tensor_parallel_size},
          {"max_model_len", max_model_len},
          {"max_num_batched_tokens", max_num_batched_tokens},
          {"max_num_seqs", max_num_seqs},
          {"block_size", block_size},
          {"kv_cache_bytes", kv_cache_bytes},
          {"kv_sized_by_device", kv_sized_by_device},
          {"device", device},
          {"fabric", fabric.to_json()}};
}

Fingerprint Fingerprint::from_json(const json::object& o) {
  Fingerprint f;
  f.model_bytes = json::value_to<uint64_t>(o.at("model_bytes"));
  f.model_hash = json::value_to<std::string>(o.at("model_hash"));
  f.tensor_parallel_size = json::value_to<int>(o.at("tensor_parallel_size"));
  f.max_model_len = json::value_to<int>(o.at("max_model_len"));
  f.max_num_batched_tokens = json::value_to<int>(o.at("max_num_batched_tokens"));
  f.max_num_seqs = json::value_to<int>(o.at("max_num_seqs"));
  f.block_size = json::value_to<int>(o.at("block_size"));
  f.kv_cache_bytes = json::value_to<uint64_t>(o.at("kv_cache_bytes"));
  f.device = json::value_to<std::string>(o.at("device"));
  if (const auto* k = o.if_contains("kv_sized_by_device")) f.kv_sized_by_device = k->as_bool();
  if (const auto* c = o.if_contains("fabric")) f.fabric = FabricChoice::from_json(c->as_object());
  return f;
}

std::optional<std::string> Fingerprint::differs(const Fingerprint& w, int rank) const {
  auto diff = [&](std::string_view what, const auto& mine, const auto& theirs) -> std::optional<std::string> {
    if (mine == theirs) return std::nullopt;
    return fmt::format("{} differs: the head has {}, rank {} has {}", what, mine, rank, theirs);
  };
  if (auto d = diff("tensor_parallel_size", tensor_parallel_size, w.tensor_parallel_size)) return d;
  if (auto d = diff("model file size", model_bytes, w.model_bytes)) return d;
  if (auto d = diff("model file (hash of its header and tensor table)", model_hash, w.model_hash)) return d;
  if (auto d = diff("max_model_len", max_model_len, w.max_model_len)) return d;
  if (auto d = diff("max_num_batched_tokens", max_num_batched_tokens, w.max_num_batched_tokens)) return d;
  if (auto d = diff("max_num_seqs", max_num_seqs, w.max_num_seqs)) return d;
  if (auto d = diff("block_size", block_size, w.block_size)) return d;
  if (auto d = diff("kv_cache_bytes", kv_cache_bytes, w.kv_cache_bytes)) return d;
  if (auto d = diff("kv_sized_by_device (gpu_memory_utilization set)", kv_sized_by_device, w.kv_sized_by_device))
    return d;
  if (auto d = diff("device", device, w.device)) return d;
  if (fabric.mtu == 0 || w.fabric.mtu == 0) return std::nullopt;
  auto fabric_diff = [&](std::string_view what, const auto& mine, const auto& theirs) -> std::optional<std::string> {
    if (mine == theirs) return std::nullopt;
    return fmt::format("{} differs: the head has {} ({}), rank {} has {} ({})", what, mine, fabric.describe(), rank,
                       theirs, w.fabric.describe());
  };
  if (auto d = fabric_diff("fabric link layer", fabric.link_layer, w.fabric.link_layer)) return d;
  return fabric_diff("fabric MTU", fabric.mtu, w.fabric.mtu);
}

json::array signals_to_json(const std::vector<health::Signal>& signals) {
  json::array out;
  for (const auto& s : signals)
    out.push_back(json::object{{"monitor", s.monitor}, {"level", health::level_name(s.level)}, {"reason", s.reason}});
  return out;
}

std::vector<health::Signal> signals_from_json(const json::value& v) {
  if (!v.is_array()) throw std::invalid_argument("health: not an array");
  std::vector<health::Signal> out;
  for (const auto& e : v.as_array()) {
    const auto* o = e.if_object();
    const auto* monitor = o ? o->if_contains("monitor") : nullptr;
    const auto* level = o ? o->if_contains("level") : nullptr;
    const auto* reason = o ? o->if_contains("reason") : nullptr;
    if (!monitor || !monitor->is_string() || !level || !level->is_string() || !reason || !reason->is_string())
      throw std::invalid_argument("health: each entry is {monitor, level, reason}, all strings");
    const auto l = health::level_from_name(level->as_string());
    if (!l) throw std::invalid_argument(fmt::format("health: unknown level '{}'", std::string_view(level->as_string())));
    out.push_back({std::string(monitor->as_string()), *l, std::string(reason->as_string())});
  }
  return out;
}

Fingerprint model_fingerprint(const std::string& path) {
  // Identity, not security: the ranks are trusted; a cheap hash catches a
  // different file, quantization or version at the same size.
  uint64_t h = 1469598103934665603ull;
  Fingerprint f;
  auto take = [&](const std::string& file, bool whole_size) {
    std::ifstream in(file, std::ios::binary | std::ios::ate);
    if (!in) throw std::runtime_error("cannot open model file " + file);
    const auto size = static_cast<uint64_t>(in.tellg());
    if (whole_size) f.model_bytes += size;
    in.seekg(0);
    std::vector<char> head(std::min<uint64_t>(size, 1u << 20));
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    for (char c : head) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    // A Hugging Face checkpoint: its config and each weight file's start, in name order.
    std::vector<std::string> weights;
    for (const auto& e : std::filesystem::directory_iterator(path, ec))
      if (e.path().extension() == ".safetensors") weights.push_back(e.path().string());
    std::sort(weights.begin(), weights.end());
    take(path + "/config.json", false);
    for (const auto& w : weights) take(w, true);
  } else {
    take(path, true);
  }
  f.model_hash = fmt::format("{:016x}", h);
  return f;
}

namespace {

json::array ints(const std::vector<int32_t>& v) { return json::array(v.begin(), v.end()); }

std::vector<int32_t> ints_from(const json::value& v, std::string_view field) {
  if (!v.is_array()) throw std::invalid_argument(fmt::format("plan: {} is not an array", field));
  std::vector<int32_t> out;
  out.reserve(v.as_array().size());
  for (const auto& x : v.as_array()) out.push_back(json::value_to<int32_t>(x));
  return out;
}

}  // namespace

json::object plan_to_json(const engine::StepPlan& plan) {
  json::array seqs;
  for (const auto& s : plan.seqs)
    seqs.push_back(json::object{{"seq", s.seq},
                                {"start", s.start},
                                {"tokens", ints(s.tokens)},
                                {"block_table", ints(s.block_table)},
                                {"sample", s.sample}});
  return {{"type", "plan"}, {"step", plan.step}, {"seqs", std::move(seqs)}};
}

engine::StepPlan plan_from_json(const json::object& o) {
  try {
    engine::StepPlan plan;
    plan.step = json::value_to<uint64_t>(o.at("step"));
    for (const auto& v : o.at("seqs").as_array()) {
      const auto& s = v.as_object();
      engine::ScheduledSeq seq;
      seq.seq = json::value_to<uint64_t>(s.at("seq"));
      seq.start = json::value_to<int32_t>(s.at("start"));
      seq.tokens = ints_from(s.at("tokens"), "tokens");
      seq.block_table = ints_from(s.at("block_table"), "block_table");
      seq.sample = s.at("sample").as_bool();
      plan.seqs.push_back(std::move(seq));
    }
    return plan;
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("plan: malformed: ") + e.what());
  }
}

}  // namespace inferd::cluster
