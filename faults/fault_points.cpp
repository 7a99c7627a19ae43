#include "faults/fault_points.hpp"

// Without fault points the header has all there is (see fault_points.hpp).
#if INFERD_FAULTS

#include <atomic>
#include <charconv>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

namespace inferd::faults {

namespace detail {
struct FaultEntry {
  std::string name;
  std::atomic<bool> armed{false};
  std::string value;  // guarded by the registry mutex
};
}  // namespace detail

namespace {

struct Registry {
  std::mutex mu;
  // unique_ptr keeps entries at a stable address for the handles.
  std::map<std::string, std::unique_ptr<detail::FaultEntry>, std::less<>> entries;

  detail::FaultEntry& get(std::string_view name) {
    auto it = entries.find(name);
    if (it == entries.end()) {
      auto entry = std::make_unique<detail::FaultEntry>();
      entry->name = std::string(name);
      it = entries.emplace(entry->name, std::move(entry)).first;
    }
    return *it->second;
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

FaultPoint::FaultPoint(std::string_view name) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  entry_ = &r.get(name);
}

bool FaultPoint::armed() const noexcept { return entry_->armed.load(std::memory_order_relaxed); }

std::string FaultPoint::value() const {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  return entry_->value;
}

int64_t FaultPoint::int_value(int64_t fallback) const {
  const std::string v = value();
  int64_t out = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return (ec == std::errc() && end == v.data() + v.size() && !v.empty()) ? out : fallback;
}

const std::string& FaultPoint::name() const { return entry_->name; }

void arm_fault(std::string_view name, std::string_view value) {
  if (name.empty()) throw std::invalid_argument("fault point name is empty");
  auto& r = registry();
  std::lock_guard lock(r.mu);
  auto& e = r.get(name);
  e.value = std::string(value);
  e.armed.store(true, std::memory_order_relaxed);
}

bool disarm_fault(std::string_view name) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.entries.find(name);
  if (it == r.entries.end()) return false;
  it->second->value.clear();
  return it->second->armed.exchange(false, std::memory_order_relaxed);
}

void disarm_all_faults() {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  for (auto& [name, e] : r.entries) {
    e->armed.store(false, std::memory_order_relaxed);
    e->value.clear();
  }
}

void arm_faults_from_spec(std::string_view spec) {
  // Parse everything first so a bad item arms nothing.
  std::vector<std::pair<std::string_view, std::string_view>> items;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = trim(spec.substr(0, comma));
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string_view name = trim(item.substr(0, eq));
    const std::string_view value = eq == std::string_view::npos ? std::string_view{} : trim(item.substr(eq + 1));
    if (name.empty()) throw std::invalid_argument("fault item '" + std::string(item) + "' has no name");
    items.emplace_back(name, value);
  }
  for (auto [name, value] : items) arm_fault(name, value);
}

std::vector<std::pair<std::string, std::string>> armed_faults() {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& [name, e] : r.entries)
    if (e->armed.load(std::memory_order_relaxed)) out.emplace_back(name, e->value);
  return out;
}

}  // namespace inferd::faults

#endif  // INFERD_FAULTS
