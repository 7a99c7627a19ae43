// libFuzzer target for the TOML configuration: any text must either load or
// throw ConfigError whose message starts with the file and line ("fuzz.toml:7: ...",
// then the key where one is at fault). Anything else thrown, or a crash, is a bug.
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>
#include <typeinfo>

#include "daemon/config.hpp"

using inferd::daemon::ConfigError;

namespace {

constexpr std::string_view kSource = "fuzz.toml";

bool names_file_and_line(std::string_view message) {
  if (!message.starts_with(kSource) || message.size() <= kSource.size() + 1 || message[kSource.size()] != ':')
    return false;
  size_t i = kSource.size() + 1, digits = 0;
  while (i < message.size() && std::isdigit(static_cast<unsigned char>(message[i]))) ++i, ++digits;
  return digits > 0 && i < message.size() && message[i] == ':';
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    (void)inferd::daemon::parse_config_toml(text, kSource);
  } catch (const ConfigError& e) {
    if (!names_file_and_line(e.what())) {
      std::fprintf(stderr, "fuzz_config: error without file and line: %s\n", e.what());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_config: unexpected %s: %s\n", typeid(e).name(), e.what());
    std::abort();
  }
  return 0;
}
