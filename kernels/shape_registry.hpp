// The shape-key registry: every kernel launch site records (op, shape bucket).
// The first use of a key and its cost are kept; warm-up reads the set of touched
// keys, and after seal() a first use is a "cold shape" that is counted.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace inferd::kernels {

struct ShapeKey {
  std::string op;      // e.g. "matmul.q4_1"
  std::string bucket;  // e.g. "n=576,k=1536,t=8" (already bucketed by the caller)
  bool operator==(const ShapeKey&) const = default;
  std::string str() const { return op + "[" + bucket + "]"; }
};

struct ShapeKeyHash {
  size_t operator()(const ShapeKey& k) const noexcept {
    return std::hash<std::string>{}(k.op) * 31 + std::hash<std::string>{}(k.bucket);
  }
};

struct ShapeUse {
  uint64_t count = 0;
  std::chrono::steady_clock::time_point first_use{};
  double first_cost_s = 0;  // duration of the first launch
  bool cold = false;        // first used after seal()
};

class ShapeRegistry {
 public:
  using ColdHook = std::function<void(const ShapeKey&)>;

  ShapeRegistry();
  ShapeRegistry(const ShapeRegistry&) = delete;
  ShapeRegistry& operator=(const ShapeRegistry&) = delete;

  // Returns true when this is the key's first use.
  bool touch(const ShapeKey& key, double cost_s);
  bool seen(const ShapeKey& key) const;
  std::vector<std::pair<ShapeKey, ShapeUse>> snapshot() const;
  // After seal(), first uses are cold: counted and reported to the hook.
  void seal(ColdHook hook = {});
  void unseal();
  bool sealed() const { return sealed_.load(); }
  uint64_t cold_count() const { return cold_.load(); }
  void clear();

  static ShapeRegistry& global();

 private:
  friend class LaunchScope;
  struct Entry {
    std::atomic<uint64_t> count{0};
    ShapeUse use;  // count unused here; see `count`
    bool live = false;
  };
  // Records a use under the lock; the entry's address stays valid for the
  // registry's lifetime (entries are reset by clear(), never erased).
  Entry* touch_entry(const ShapeKey& key, double cost_s, bool* first);

  mutable std::mutex mu_;
  std::unordered_map<ShapeKey, Entry, ShapeKeyHash> uses_;
  std::atomic<bool> sealed_{false};
  std::atomic<uint64_t> cold_{0};
  // Unique over all registries and renewed by clear(): launch-site caches keyed by
  // it never hand out an entry of a cleared or destroyed registry.
  std::atomic<uint64_t> epoch_;
  ColdHook hook_;
};

// Times a launch and touches its key on destruction. Builds the key strings on
// every launch; hot launch sites use LaunchScope.
class ShapeScope {
 public:
  ShapeScope(ShapeRegistry& reg, const char* op, std::string bucket)
      : reg_(reg), key_{op, std::move(bucket)}, start_(std::chrono::steady_clock::now()) {}
  ~ShapeScope() {
    reg_.touch(key_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  ShapeScope(const ShapeScope&) = delete;
  ShapeScope& operator=(const ShapeScope&) = delete;

 private:
  ShapeRegistry& reg_;
  ShapeKey key_;
  std::chrono::steady_clock::time_point start_;
};

// A shape key in numeric form, for the hot path: the op and dimension names are
// string literals and the bucket text "n=576,k=1536,t=8" is only formatted on a
// key's first use.
struct LaunchKey {
  const char* op = "";    // e.g. "matmul.q4_1"
  const char* dims = "";  // comma-separated names of v[0..]: "n,k,t"
  int64_t v[4] = {0, 0, 0, 0};
  ShapeKey key() const;
  bool operator==(const LaunchKey&) const = default;
};

// Like ShapeScope, for launch sites that run hundreds of times per token: a key
// this thread has already seen costs a lookup in a small per-thread cache and an
// atomic increment; only a first use is timed and goes through the registry's lock.
class LaunchScope {
 public:
  explicit LaunchScope(const LaunchKey& key, ShapeRegistry& reg = ShapeRegistry::global());
  ~LaunchScope();
  LaunchScope(const LaunchScope&) = delete;
  LaunchScope& operator=(const LaunchScope&) = delete;

 private:
  ShapeRegistry& reg_;
  LaunchKey key_;
  bool cached_;
  std::chrono::steady_clock::time_point start_;
};

// Rounds n up to the next power of two (1 for n <= 1): the bucket for token counts.
inline int64_t pow2_bucket(int64_t n) {
  int64_t b = 1;
  while (b < n) b <<= 1;
  return b;
}

}  // namespace inferd::kernels
