// inferctl's subcommands, one file each, and the small flag parser they share.
#pragma once
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/config.hpp"

namespace inferd::tools {

// --key value / --key=value / --flag; positional words kept in order.
class Args {
 public:
  Args(int argc, char** argv, int first) {
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

 private:
  std::map<std::string, std::string> kv_;
};

// The model to use when none is named: $INFERD_MODEL, else the daemon's default.
inline std::string default_model_path() {
  if (const char* m = std::getenv("INFERD_MODEL")) return m;
  return daemon::default_model_path();
}

int cmd_bench_engine(const Args& args);
int cmd_generate(const Args& args);

}  // namespace inferd::tools
