#include "engine/safetensors_checkpoint.hpp"

#include <algorithm>
#include <filesystem>
#include <set>

#include "engine/json_file.hpp"

namespace inferd::engine {

std::vector<std::string> checkpoint_shard_names(const std::string& dir, std::map<std::string, std::string>* assigned) {
  const std::string index_path = dir + "/" + kSafetensorsIndex;
  auto index = read_json(index_path, false);
  if (!index) {
    if (!std::filesystem::exists(dir + "/model.safetensors"))
      throw LoadError(dir, 0, std::string("neither model.safetensors nor ") + kSafetensorsIndex + " is here");
    return {"model.safetensors"};
  }
  const boost::json::value* map = index->find("weight_map");
  if (!map || !map->is_object()) index->fail("weight_map", "missing or not an object");
  std::set<std::string> files;
  for (const auto& [tensor, file] : map->as_object()) {
    const std::string key = "weight_map." + std::string(tensor);
    if (!file.is_string()) index->fail(key, "not a file name");
    const std::string f(file.as_string());
    if (f.empty() || f.find('/') != std::string::npos || f.starts_with("."))
      index->fail(key, "'" + f + "' is not a file in this directory");
    if (assigned) (*assigned)[std::string(tensor)] = f;
    files.insert(f);
  }
  if (files.empty()) index->fail("weight_map", "empty");
  return {files.begin(), files.end()};
}

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& dir) {
  SafetensorsCheckpoint c;
  c.dir_ = dir;
  std::map<std::string, std::string> assigned;
  c.names_ = checkpoint_shard_names(dir, &assigned);
  c.sharded_ = !assigned.empty();
  for (const auto& name : c.names_) {
    std::shared_ptr<SafetensorsFile> st;
    try {
      st = SafetensorsFile::open(dir + "/" + name);
    } catch (const LoadError& e) {
      if (!c.sharded_ || e.message.starts_with("tensor '")) throw;
      // Name a tensor the index expects there, so the report says what is lost.
      const auto it = std::find_if(assigned.begin(), assigned.end(), [&](const auto& a) { return a.second == name; });
      throw LoadError(e.file, e.offset, e.message + " (a shard " + kSafetensorsIndex + " names, for tensor '" + it->first + "' and others)");
    }
    const size_t i = c.files_.size();
    for (const auto& t : st->tensors()) {
      const auto [at, fresh] = c.where_.emplace(t.name, i);
      if (!fresh)
        throw LoadError(st->path(), t.offset, "tensor '" + t.name + "': appears in more than one shard (also in " +
                                                  c.names_[at->second] + ")");
    }
    c.files_.push_back(std::move(st));
  }
  // Against the index, once every shard is read, so a duplicate is reported as one.
  for (size_t i = 0; i < c.files_.size() && c.sharded_; ++i)
    for (const auto& t : c.files_[i]->tensors()) {
      const auto it = assigned.find(t.name);
      if (it == assigned.end() || it->second != c.names_[i])
        throw LoadError(c.files_[i]->path(), t.offset,
                        "tensor '" + t.name + "': is not listed for this file in " + kSafetensorsIndex +
                            (it == assigned.end() ? "" : " (it names " + it->second + ")"));
    }
  for (const auto& [tensor, file] : assigned)
    if (!c.where_.contains(tensor))
      throw LoadError(dir + "/" + kSafetensorsIndex, 0, "key 'weight_map." + tensor + "': tensor not found in " + file);
  return c;
}

SafetensorsCheckpoint::Located SafetensorsCheckpoint::find(std::string_view name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) return {};
  return {files_[it->second]->find(name), &names_[it->second]};
}

}  // namespace inferd::engine
