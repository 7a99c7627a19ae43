// The engine's shape space: which shape keys real traffic can reach under a
// configuration. A step varies along four axes, each bucketed in powers of two:
// the tokens it carries (decode tokens plus prefill chunks, up to
// max_num_batched_tokens), the sequences it samples (up to max_num_seqs), the
// context its attention reads (up to max_model_len - 1 positions), and, for
// steps that only decode, the batch size. Where decode steps are captured (CUDA
// graphs, engine/executor.hpp), each graph size is a key of its own to record
// and one to replay: warm-up must do both before serving.
// Every kernel key depends on one axis (kernels/launch_keys.hpp), so the reachable
// set is the union, over the axes' buckets, of the keys one step of that shape
// launches; the shape tracer computes them by a dry run of the model.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "engine/models/tensor_parallel.hpp"
#include "kernels/shape_registry.hpp"

namespace inferd::engine {

class GgufFile;
class Model;
enum class Precision;
struct KvGeometry;

struct ShapeAxes {
  // One representative per bucket: the largest value the bucket can hold here.
  std::vector<int64_t> step_tokens;
  std::vector<int64_t> sampled_seqs;
  std::vector<int64_t> contexts;
  std::vector<int64_t> decode_batches;
  // The graph sizes decode steps run as (not bucketed: each is its own); empty
  // where no step is captured (the CPU).
  std::vector<int64_t> graph_sizes;
};

ShapeAxes shape_axes(int max_num_batched_tokens, int max_num_seqs, int max_model_len,
                     const std::vector<int>& graph_sizes = {});

// The graph size a decode step of n sequences runs as: the smallest of `sizes`
// (ascending) at least n; 0: none.
int64_t graph_size_of(const std::vector<int64_t>& sizes, int64_t n);

// The representatives of 1..max, one per power-of-two bucket.
std::vector<int64_t> bucket_representatives(int64_t max);

// The key a step that only decodes registers, for `n` sequences.
kernels::LaunchKey decode_batch_key(int64_t n);

// The reachable keys of rank `tp` of `file`'s model at `precision` with a KV
// cache of geometry `g`: the model loaded again on a shape tracer (no peers:
// a traced model never communicates) and traced.
std::vector<kernels::ShapeKey> reachable_shape_keys(const GgufFile& file, Precision precision, TensorParallel tp,
                                                    const KvGeometry& g, const ShapeAxes& axes);

// Runs one step per axis representative, each of which reaches its axis' keys:
// the step-token and sampled-sequence buckets as prompts of token 0 from
// position 0, each context as one decode token there. Every sequence uses
// block table `table`, which must cover the longest context.
struct StepBatch;
void for_each_axis_step(const ShapeAxes& axes, std::span<const int32_t> table,
                        const std::function<void(const StepBatch&)>& run);

// The reachable keys for `model` (whose backend must be `tracer`, a shape tracer
// writing to `traced`) with a KV cache of geometry `g`, sorted by their text.
std::vector<kernels::ShapeKey> trace_shape_space(Model& model, kernels::Backend& tracer, kernels::ShapeRegistry& traced,
                                                 const KvGeometry& g, const ShapeAxes& axes);

}  // namespace inferd::engine
