#include "kernels/shape_registry.hpp"

#include <cstring>

namespace inferd::kernels {
namespace {

uint64_t new_epoch() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

}  // namespace

ShapeRegistry::ShapeRegistry() : epoch_(new_epoch()) {}

ShapeRegistry::Entry* ShapeRegistry::touch_entry(const ShapeKey& key, double cost_s, bool* first) {
  ColdHook hook;
  Entry* e;
  {
    std::lock_guard lock(mu_);
    e = &uses_.try_emplace(key).first->second;
    *first = !e->live;
    if (*first) {
      e->live = true;
      e->count.store(1, std::memory_order_relaxed);
      e->use = ShapeUse{0, std::chrono::steady_clock::now(), cost_s, sealed_.load()};
      if (e->use.cold) {
        cold_.fetch_add(1);
        hook = hook_;
      }
    } else {
      e->count.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (hook) hook(key);  // outside the lock: the hook may log or read the registry
  return e;
}

bool ShapeRegistry::touch(const ShapeKey& key, double cost_s) {
  bool first;
  touch_entry(key, cost_s, &first);
  return first;
}

bool ShapeRegistry::seen(const ShapeKey& key) const {
  std::lock_guard lock(mu_);
  const auto it = uses_.find(key);
  return it != uses_.end() && it->second.live;
}

std::vector<std::pair<ShapeKey, ShapeUse>> ShapeRegistry::snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<ShapeKey, ShapeUse>> out;
  for (const auto& [key, e] : uses_) {
    if (!e.live) continue;
    ShapeUse u = e.use;
    u.count = e.count.load(std::memory_order_relaxed);
    out.emplace_back(key, u);
  }
  return out;
}

void ShapeRegistry::seal(ColdHook hook) {
  std::lock_guard lock(mu_);
  hook_ = std::move(hook);
  sealed_.store(true);
}

void ShapeRegistry::unseal() {
  std::lock_guard lock(mu_);
  sealed_.store(false);
  hook_ = {};
}

void ShapeRegistry::clear() {
  std::lock_guard lock(mu_);
  for (auto& [key, e] : uses_) {
    e.live = false;
    e.count.store(0, std::memory_order_relaxed);
  }
  cold_.store(0);
  epoch_.store(new_epoch());
}

ShapeRegistry& ShapeRegistry::global() {
  static ShapeRegistry registry;
  return registry;
}

ShapeKey LaunchKey::key() const {
  std::string bucket;
  const char* name = dims;
  for (int i = 0; i < 4 && *name; ++i) {
    const char* end = std::strchr(name, ',');
    const size_t len = end ? static_cast<size_t>(end - name) : std::strlen(name);
    if (i) bucket += ',';
    bucket.append(name, len).append("=").append(std::to_string(v[i]));
    name += len + (end ? 1 : 0);
  }
  return ShapeKey{op, std::move(bucket)};
}

namespace {

// Per-thread, 4-way set-associative cache of keys already in the registry.
struct LaunchCache {
  struct Slot {
    LaunchKey key;
    uint64_t epoch = 0;
    std::atomic<uint64_t>* count = nullptr;
  };
  static constexpr size_t kSets = 64, kWays = 4;
  Slot slots[kSets * kWays];
  unsigned next_victim = 0;

  static size_t set_of(const LaunchKey& k) {
    uint64_t h = reinterpret_cast<uintptr_t>(k.op) ^ (reinterpret_cast<uintptr_t>(k.dims) << 7);
    for (int64_t x : k.v) h = (h ^ static_cast<uint64_t>(x)) * 0x9e3779b97f4a7c15ull;
    return (h >> 40) % kSets;
  }
};

// initial-exec: a plain TLS offset, no __tls_get_addr call (the library is linked into executables).
__attribute__((tls_model("initial-exec"))) thread_local LaunchCache t_cache;

}  // namespace

LaunchScope::LaunchScope(const LaunchKey& key, ShapeRegistry& reg) : reg_(reg), key_(key), cached_(false) {
  const uint64_t epoch = reg_.epoch_.load(std::memory_order_relaxed);
  LaunchCache::Slot* set = &t_cache.slots[LaunchCache::set_of(key) * LaunchCache::kWays];
  for (size_t w = 0; w < LaunchCache::kWays; ++w) {
    LaunchCache::Slot& s = set[w];
    if (s.epoch == epoch && s.key == key) {
      s.count->fetch_add(1, std::memory_order_relaxed);
      cached_ = true;
      return;
    }
  }
  start_ = std::chrono::steady_clock::now();
}

LaunchScope::~LaunchScope() {
  if (cached_) return;
  const double cost = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const uint64_t epoch = reg_.epoch_.load();
  bool first;
  auto* e = reg_.touch_entry(key_.key(), cost, &first);
  LaunchCache::Slot* set = &t_cache.slots[LaunchCache::set_of(key_) * LaunchCache::kWays];
  LaunchCache::Slot& s = set[t_cache.next_victim++ % LaunchCache::kWays];
  s = LaunchCache::Slot{key_, epoch, &e->count};
}

}  // namespace inferd::kernels
