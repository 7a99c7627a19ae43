// inferctl's subcommands, one file each, and the small flag parser they share.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config.hpp"

namespace inferd::tools {

// --key value / --key=value / --flag; positional words kept in order.
class Args {
 public:
  Args(int argc, char** argv, int first) {
    for (int i = first; i < argc; ++i) raw.emplace_back(argv[i]);
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) != 0) {
        positional.push_back(a);
        continue;
      }
      a = a.substr(2);
      if (auto eq = a.find('='); eq != std::string::npos) {
        kv_[a.substr(0, eq)] = a.substr(eq + 1);
      } else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
        kv_[a] = argv[++i];
      } else {
        kv_[a] = "true";
      }
    }
  }
  bool has(const std::string& k) const { return kv_.count(k) != 0; }
  // Throws std::invalid_argument naming the first flag that is not in `known`,
  // so a misspelt flag is not silently ignored.
  void allow_only(std::initializer_list<std::string_view> known) const {
    for (const auto& [k, v] : kv_)
      if (std::find(known.begin(), known.end(), k) == known.end())
        throw std::invalid_argument("unknown flag --" + k + " (see --help)");
  }
  std::string get(const std::string& k, const std::string& def) const {
    auto it = kv_.find(k);
    return it == kv_.end() ? def : it->second;
  }
  int get_int(const std::string& k, int def) const {
    auto it = kv_.find(k);
    if (it == kv_.end()) return def;
    try {
      return std::stoi(it->second);
    } catch (const std::exception&) {
      throw std::invalid_argument("--" + k + ": expected an integer, got '" + it->second + "'");
    }
  }
  double get_double(const std::string& k, double def) const {
    auto it = kv_.find(k);
    if (it == kv_.end()) return def;
    try {
      return std::stod(it->second);
    } catch (const std::exception&) {
      throw std::invalid_argument("--" + k + ": expected a number, got '" + it->second + "'");
    }
  }
  // Comma-separated list.
  std::vector<std::string> get_list(const std::string& k, std::vector<std::string> def) const {
    auto it = kv_.find(k);
    if (it == kv_.end()) return def;
    std::vector<std::string> out;
    size_t start = 0;
    const std::string& s = it->second;
    while (start <= s.size()) {
      size_t c = s.find(',', start);
      if (c == std::string::npos) c = s.size();
      if (c > start) out.push_back(s.substr(start, c - start));
      start = c + 1;
    }
    return out;
  }
  std::vector<std::string> positional;
  std::vector<std::string> raw;  // every argument as given, for commands that pass them on

 private:
  std::map<std::string, std::string> kv_;
};

// The model to use when none is named: $INFERD_MODEL, else the daemon's default.
inline std::string default_model_path() {
  if (const char* m = std::getenv("INFERD_MODEL")) return m;
  return daemon::default_model_path();
}

int cmd_bench_engine(const Args& args);
int cmd_check_model(const Args& args);  // check_model.cpp
int cmd_bench_serve(const Args& args);
int cmd_bench_single(const Args& args);
int cmd_draft_head_data(const Args& args);  // draft_head_data.cpp
int cmd_generate(const Args& args);
int cmd_proof(const Args& args);
int cmd_warmup(const Args& args);

}  // namespace inferd::tools
