#include "engine/checkpoint_gate.hpp"

#include <filesystem>
#include <optional>
#include <set>

#include "engine/json_file.hpp"
#include "engine/models/deepseek_v4_schema.hpp"
#include "engine/safetensors_checkpoint.hpp"

namespace inferd::engine {
namespace {

std::string dims(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::string checkpoint_model_type(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) return "";
  try {
    const auto config = read_json(path + "/config.json", false);
    return config ? config->get_string("model_type").value_or("") : "";
  } catch (const LoadError&) {
    return "";  // the load itself reports a broken config.json
  }
}

bool gate_knows(const std::string& model_type) { return model_type == "deepseek_v4"; }

GateResult check_checkpoint(const std::string& dir, const std::function<void(const std::string&)>& on_line) {
  GateResult r;
  auto line = [&](const std::string& s) {
    r.lines.push_back(s);
    if (on_line) on_line(s);
  };
  std::vector<ParamSpec> params;
  std::optional<SafetensorsCheckpoint> checkpoint;
  try {
    params = deepseek_v4_params(*read_json(dir + "/config.json", true));
    checkpoint = SafetensorsCheckpoint::open(dir);
  } catch (const LoadError& e) {
    r.problems.push_back(e.what());
    return r;
  }
  const size_t files = checkpoint->files().size();
  line(std::to_string(files) + "/" + std::to_string(files) + (files == 1 ? " weight file" : " shards") +
       " readable, headers consistent (" + std::to_string(checkpoint->tensor_count()) + " tensors)");

  size_t found[2] = {0, 0}, needed[2] = {0, 0};
  std::set<std::string_view> wanted;
  for (const auto& p : params) {
    wanted.insert(p.name);
    ++needed[p.draft];
    const auto at = checkpoint->find(p.name);
    const std::string where = dir + "/" + (at.file ? *at.file : std::string(kSafetensorsIndex));
    const std::string what = where + ": tensor '" + p.name + "': ";
    if (!at.tensor) r.problems.push_back(what + "missing (" + p.dtype + " " + dims(p.shape) + " needed)");
    else if (at.tensor->dtype != p.dtype) r.problems.push_back(what + "dtype " + at.tensor->dtype + ", the config needs " + p.dtype);
    else if (at.tensor->shape != p.shape)
      r.problems.push_back(what + "shape " + dims(at.tensor->shape) + ", the config needs " + dims(p.shape));
    else ++found[p.draft];
  }
  // A tensor the config does not account for means the config and weights disagree.
  for (size_t i = 0; i < files; ++i)
    for (const auto& t : checkpoint->files()[i]->tensors())
      if (!wanted.contains(t.name))
        r.problems.push_back(checkpoint->files()[i]->path() + ": tensor '" + t.name + "': not a parameter config.json calls for");
  line(std::to_string(found[0]) + "/" + std::to_string(needed[0]) + " params");
  line(std::to_string(found[1]) + "/" + std::to_string(needed[1]) + " draft params");
  return r;
}

}  // namespace inferd::engine
