// The paged KV cache's memory: per layer, `num_blocks` blocks of `block_size`
// token slots for K and for V, in the backend's memory. Which sequence holds
// which block is the KV manager's business (kv_cache_manager.hpp).
#pragma once
#include <cstddef>

#include "kernels/backend.hpp"

namespace inferd::engine {

struct KvGeometry {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int num_blocks = 0;
  kernels::DType type = kernels::DType::F16;

  size_t bytes_per_block_layer() const;  // one of K or V
  size_t total_bytes() const;
};

class KvCache {
 public:
  // Zeroed, so a bug that reads an unwritten slot gives zeros, not garbage.
  KvCache(const KvGeometry& g, kernels::Backend& backend);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvGeometry& geometry() const { return geo_; }
  kernels::KvLayerView layer(int l) const;

 private:
  KvGeometry geo_;
  kernels::Buffer storage_;  // [layer][k|v][block][slot][head][dim]
};

}  // namespace inferd::engine
