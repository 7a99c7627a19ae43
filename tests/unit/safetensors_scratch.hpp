// Shared by the checkpoint tests: a scratch copy of a fixture directory, and
// safetensors files written from (name, dtype, shape, bytes) entries, for
// building resharded, converted or damaged copies of a fixture.
#pragma once
#include <unistd.h>

#include <boost/json.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/safetensors_reader.hpp"

namespace test_scratch {

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A scratch directory holding a copy of `fixture`'s files, removed at the end.
struct Scratch {
  std::filesystem::path dir;
  Scratch(const std::string& fixture, const std::string& tag) {
    namespace fs = std::filesystem;
    dir = fs::temp_directory_path() / ("inferd-ckpt-" + tag + "-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(fixture)) fs::copy_file(e.path(), dir / e.path().filename());
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string path(const std::string& name = "") const { return (dir / name).string(); }
};

struct StEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

inline std::string safetensors_bytes(const std::vector<StEntry>& entries) {
  namespace json = boost::json;
  json::object header;
  std::string data;
  for (const auto& e : entries) {
    json::array shape(e.shape.begin(), e.shape.end());
    header[e.name] = json::object{{"dtype", e.dtype}, {"shape", shape},
                                  {"data_offsets", json::array{data.size(), data.size() + e.bytes.size()}}};
    data += e.bytes;
  }
  std::string h = json::serialize(header);
  const uint64_t n = h.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + h + data;
}

// The tensors of a safetensors file, in header order.
inline std::vector<StEntry> read_entries(const std::string& path) {
  auto st = inferd::engine::SafetensorsFile::open(path);
  std::vector<StEntry> out;
  for (const auto& t : st->tensors())
    out.push_back({t.name, t.dtype, t.shape, std::string(static_cast<const char*>(t.data), t.nbytes)});
  return out;
}

}  // namespace test_scratch
