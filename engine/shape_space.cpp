#include "engine/shape_space.hpp"

#include <algorithm>

#include "engine/kv/kv_cache.hpp"
#include "engine/models/model.hpp"
#include "engine/models/model_registry.hpp"
#include "kernels/shape_tracer.hpp"
#include "kernels/launch_keys.hpp"

namespace inferd::engine {

std::vector<int64_t> bucket_representatives(int64_t max) {
  std::vector<int64_t> out;
  for (int64_t b = 1; max > 0; b <<= 1) {
    out.push_back(std::min(b, max));
    if (b >= max) break;
  }
  return out;
}

ShapeAxes shape_axes(int max_num_batched_tokens, int max_num_seqs, int max_model_len,
                     const std::vector<int>& graph_sizes) {
  ShapeAxes a;
  // A prompt has at most max_model_len - 1 tokens; several fill a wider step.
  const int64_t longest_prompt = std::max(1, max_model_len - 1);
  a.step_tokens = bucket_representatives(std::min<int64_t>(max_num_batched_tokens, max_num_seqs * longest_prompt));
  a.sampled_seqs = bucket_representatives(std::min(max_num_seqs, max_num_batched_tokens));
  // The last fed position is max_model_len - 2: the final sampled token is never fed.
  a.contexts = bucket_representatives(longest_prompt);
  // Decoding needs room for a prompt token and two generated ones.
  if (max_model_len >= 3) a.decode_batches = a.sampled_seqs;
  // A size is recorded at its first decode step and replayed at its second.
  if (max_model_len >= 4) a.graph_sizes.assign(graph_sizes.begin(), graph_sizes.end());
  return a;
}

int64_t graph_size_of(const std::vector<int64_t>& sizes, int64_t n) {
  const auto it = std::lower_bound(sizes.begin(), sizes.end(), n);
  return it == sizes.end() ? 0 : *it;
}

kernels::LaunchKey decode_batch_key(int64_t n) { return {"step.decode", "b", {kernels::pow2_bucket(n)}}; }

void for_each_axis_step(const ShapeAxes& axes, std::span<const int32_t> table,
                        const std::function<void(const StepBatch&)>& run) {
  const int64_t max_ctx = axes.contexts.empty() ? 1 : axes.contexts.back();
  StepBatch b;
  uint64_t seq = 0;  // a new sequence each time, for a model that keeps their state
  for (int64_t t : axes.step_tokens) {  // t prompt tokens, as few sequences as the longest prompt allows
    b.clear();
    const int32_t at = b.add_table(table);
    for (int64_t done = 0; done < t;) {
      const int64_t n = std::min(t - done, max_ctx);
      ++seq;
      for (int64_t i = 0; i < n; ++i) b.add(0, static_cast<int32_t>(i), at, i + 1 == n, seq);
      done += n;
    }
    run(b);
  }
  for (int64_t r : axes.sampled_seqs) {  // r sequences, one token each
    b.clear();
    const int32_t at = b.add_table(table);
    for (int64_t i = 0; i < r; ++i) b.add(0, 0, at, true, ++seq);
    run(b);
  }
  for (int64_t c : axes.contexts) {  // one decode token reading c positions
    b.clear();
    b.add(0, static_cast<int32_t>(c - 1), b.add_table(table), true, ++seq);
    run(b);
  }
}

std::vector<kernels::ShapeKey> trace_shape_space(Model& model, kernels::Backend& tracer, kernels::ShapeRegistry& traced,
                                                 const KvGeometry& g, const ShapeAxes& axes) {
  // One cache block is enough: the tracer reads no memory, only block tables.
  KvGeometry one = g;
  one.num_blocks = 1;
  KvCache kv(one, tracer);
  const int64_t max_ctx = axes.contexts.empty() ? 1 : axes.contexts.back();
  const std::vector<int32_t> table(static_cast<size_t>(max_ctx / std::max(1, g.block_size) + 2), 0);
  std::vector<float> logits;
  auto run = [&](const StepBatch& b) {
    logits.resize(b.logits_rows.size() * static_cast<size_t>(model.config().vocab));
    model.forward(b, kv, logits.data());
  };

  traced.clear();
  for_each_axis_step(axes, table, run);
  for (int64_t n : axes.decode_batches) traced.touch(decode_batch_key(n).key(), 0.0);
  for (int64_t b : axes.graph_sizes) {
    traced.touch(kernels::launch_keys::graph_capture(b).key(), 0.0);
    traced.touch(kernels::launch_keys::graph_replay(b).key(), 0.0);
  }

  std::vector<kernels::ShapeKey> keys;
  for (auto& [key, use] : traced.snapshot()) keys.push_back(key);
  std::sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) { return a.str() < b.str(); });
  return keys;
}

}  // namespace inferd::engine

namespace inferd::engine {

std::vector<kernels::ShapeKey> reachable_shape_keys(const GgufFile& file, Precision precision, TensorParallel tp,
                                                    const KvGeometry& g, const ShapeAxes& axes) {
  kernels::ShapeRegistry traced;
  auto be = kernels::make_shape_tracer(traced);
  tp.comm = nullptr;
  auto model = load_model(file, *be, precision, {}, tp);
  return trace_shape_space(*model, *be, traced, g, axes);
}

}  // namespace inferd::engine
