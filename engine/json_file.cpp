#include "engine/json_file.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace inferd::engine {

namespace json = boost::json;

void JsonFile::fail(const std::string& key, const std::string& message) const {
  throw LoadError(path, 0, key.empty() ? message : "key '" + key + "': " + message);
}

const json::object& JsonFile::object() const {
  if (!root.is_object()) fail("", "not a JSON object");
  return root.as_object();
}

const json::value* JsonFile::find(const std::string& key) const {
  const json::value* v = object().if_contains(key);
  return v && !v->is_null() ? v : nullptr;
}

static std::optional<int64_t> as_int(const json::value& v) {
  if (v.is_int64()) return v.as_int64();
  if (v.is_uint64() && v.as_uint64() <= uint64_t(INT64_MAX)) return static_cast<int64_t>(v.as_uint64());
  return std::nullopt;
}

std::optional<int64_t> JsonFile::get_int(const std::string& key) const {
  const json::value* v = find(key);
  if (!v) return std::nullopt;
  if (auto i = as_int(*v)) return i;
  fail(key, "not an integer");
}

int64_t JsonFile::need_int(const std::string& key, int64_t min) const {
  auto v = get_int(key);
  if (!v) fail(key, "missing");
  if (*v < min || *v > INT32_MAX) fail(key, std::to_string(*v) + " is out of range");
  return *v;
}

std::optional<double> JsonFile::get_float(const std::string& key) const {
  const json::value* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_double()) return v->as_double();
  if (v->is_int64()) return static_cast<double>(v->as_int64());
  if (v->is_uint64()) return static_cast<double>(v->as_uint64());
  fail(key, "not a number");
}

std::optional<bool> JsonFile::get_bool(const std::string& key) const {
  const json::value* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_bool()) fail(key, "not true or false");
  return v->as_bool();
}

std::optional<std::string> JsonFile::get_string(const std::string& key) const {
  const json::value* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) fail(key, "not a string");
  return std::string(v->as_string());
}

std::optional<std::vector<int64_t>> JsonFile::get_ints(const std::string& key) const {
  const json::value* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_array()) fail(key, "not an array of integers");
  std::vector<int64_t> out;
  for (const auto& e : v->as_array()) {
    const auto i = as_int(e);
    if (!i) fail(key, "not an array of integers");
    out.push_back(*i);
  }
  return out;
}

std::optional<JsonFile> read_json(const std::string& path, bool required) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!required) return std::nullopt;
    throw LoadError(path, 0, std::string("cannot open: ") + std::strerror(errno));
  }
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  json::stream_parser p;
  boost::system::error_code ec;
  const size_t used = p.write_some(text.data(), text.size(), ec);
  if (!ec) p.finish(ec);
  if (ec) throw LoadError(path, used, "not valid JSON: " + ec.message());
  return JsonFile{path, p.release()};
}

}  // namespace inferd::engine
