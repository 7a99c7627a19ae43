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
  mutable std::mutex mu_;
  std::unordered_map<ShapeKey, ShapeUse, ShapeKeyHash> uses_;
  std::atomic<bool> sealed_{false};
  std::atomic<uint64_t> cold_{0};
  ColdHook hook_;
};

// Times a launch and touches its key on destruction. Cheap after first use.
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

// Rounds n up to the next power of two (1 for n <= 1): the bucket for token counts.
inline int64_t pow2_bucket(int64_t n) {
  int64_t b = 1;
  while (b < n) b <<= 1;
  return b;
}

}  // namespace inferd::kernels
