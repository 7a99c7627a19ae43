// Named fault points for tests: code declares a point by name and asks whether it
// is armed; tests arm points through INFERD_FAULTS="name[=value],name2" at start
// or through the daemon's POST /admin/fault at run time.
//
// Only builds configured with -Dfaults=true have them (meson sets INFERD_FAULTS
// to 1 or 0 for every file). Without them a point is never armed: armed() is a
// constant false, the code it guards folds away, and nothing can arm a point.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#ifndef INFERD_FAULTS
#error "INFERD_FAULTS is set by meson (option faults); every file must see the same value"
#endif

namespace inferd::faults {

// Whether this build has fault points.
inline constexpr bool kBuiltIn = INFERD_FAULTS != 0;

#if INFERD_FAULTS

namespace detail {
struct FaultEntry;
}

// A handle on one named point; declare it once (e.g. a function-local static)
// and test it on the hot path: a disarmed point costs one relaxed atomic load.
class FaultPoint {
 public:
  explicit FaultPoint(std::string_view name);

  bool armed() const noexcept;
  // The value it was armed with ("" when none).
  std::string value() const;
  // The value as an integer, or `fallback` when empty or not a number.
  int64_t int_value(int64_t fallback) const;
  const std::string& name() const;

 private:
  detail::FaultEntry* entry_;
};

// Points may be armed before the code that declares them first runs, so any
// name is accepted; names are compared exactly.
void arm_fault(std::string_view name, std::string_view value = {});
// True if the point was armed.
bool disarm_fault(std::string_view name);
void disarm_all_faults();
// Parses "name[=value],name2" (whitespace around items ignored) and arms each;
// throws std::invalid_argument naming the bad item.
void arm_faults_from_spec(std::string_view spec);
// Armed points and their values, sorted by name.
std::vector<std::pair<std::string, std::string>> armed_faults();

#else

// A point that is never armed. Only what code guarded by armed() calls exists;
// nothing here can arm a point.
class FaultPoint {
 public:
  constexpr explicit FaultPoint(std::string_view) {}

  static constexpr bool armed() noexcept { return false; }
  std::string value() const { return {}; }
  int64_t int_value(int64_t fallback) const { return fallback; }
};

inline bool disarm_fault(std::string_view) { return false; }

#endif

}  // namespace inferd::faults
