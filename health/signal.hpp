// What every monitor hands the recovery policy: a level on one ladder and the
// reason in words, so each decision can be logged as it was made.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace inferd::health {

// Ordered: a larger level asks for a stronger action.
enum class Level { Ok, Warn, Shed, Critical };

constexpr std::string_view level_name(Level level) {
  switch (level) {
    case Level::Ok: return "ok";
    case Level::Warn: return "warn";
    case Level::Shed: return "shed";
    case Level::Critical: return "critical";
  }
  return "?";
}

constexpr std::optional<Level> level_from_name(std::string_view name) {
  for (Level l : {Level::Ok, Level::Warn, Level::Shed, Level::Critical})
    if (level_name(l) == name) return l;
  return std::nullopt;
}

constexpr Level worst(Level a, Level b) { return a < b ? b : a; }

struct Signal {
  std::string monitor;
  Level level = Level::Ok;
  std::string reason;
};

}  // namespace inferd::health
