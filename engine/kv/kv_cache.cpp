#include "engine/kv/kv_cache.hpp"

#include <stdexcept>

namespace inferd::engine {

size_t KvGeometry::bytes_per_block_layer() const {
  return static_cast<size_t>(block_size) * n_kv_heads * head_dim * kernels::row_bytes(type, 1);
}

size_t KvGeometry::total_bytes() const {
  return bytes_per_block_layer() * 2 * static_cast<size_t>(num_blocks) * n_layers;
}

KvCache::KvCache(const KvGeometry& g, kernels::Backend& backend) : geo_(g) {
  if (g.n_layers <= 0 || g.n_kv_heads <= 0 || g.head_dim <= 0 || g.block_size <= 0 || g.num_blocks <= 0)
    throw std::invalid_argument("kv cache: every dimension must be positive");
  storage_ = backend.alloc(g.total_bytes(), true);
}

kernels::KvLayerView KvCache::layer(int l) const {
  const size_t half = geo_.bytes_per_block_layer() * geo_.num_blocks;
  auto* base = storage_.as<char>() + 2 * half * static_cast<size_t>(l);
  return kernels::KvLayerView{geo_.type, base, base + half, geo_.block_size, geo_.n_kv_heads, geo_.head_dim};
}

}  // namespace inferd::engine
