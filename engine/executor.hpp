// Runs a step plan's forward pass on one rank: turns the plan into the model's
// batch (tokens, positions, block tables) and gets the logits of the sequences
// the plan samples, one row each, in plan order. This is the part of a step
// every rank of a tensor-parallel group does; sampling stays with the head.
//
// Decode steps on a backend that can capture them (CUDA graphs) are captured
// steps: a step of n sequences runs as the smallest configured graph size b >= n,
// padded with b - n copies of its last sequence's token (they write the same K/V
// to the same slot and their logits are dropped), so each size is recorded once
// and replayed at every position after. Wider steps, and every step elsewhere,
// run as they are.
#pragma once
#include <span>
#include <vector>

#include "engine/kv/kv_cache.hpp"
#include "engine/models/model.hpp"
#include "engine/sched/step_plan.hpp"

namespace inferd::engine {

class Executor {
 public:
  // graph_sizes: the decode batch sizes captured, ascending; empty: none.
  Executor(Model& model, KvCache& kv, kernels::Backend& backend, std::vector<int> graph_sizes = {});
  // logits: resized to one row of the model's vocab per logits row the plan wants
  // (ScheduledSeq::logits_rows), in plan order.
  // features, when given: resized to one row of the model's width per logits
  // row, each that row's feature (Model::forward), for a draft head.
  void execute(const StepPlan& plan, std::vector<float>& logits, std::vector<float>* features = nullptr);
  // The same with the model sampling on its device (Model::samples_on_device):
  // tokens gets each logits row's token drawn as sampling[row] says, and logits
  // are filled only when logits_too.
  void execute(const StepPlan& plan, std::span<const kernels::RowSampling> sampling, bool logits_too,
               std::vector<float>& logits, std::vector<int32_t>& tokens);

  // The graph size a decode step of n sequences runs as; 0: none (it runs as it is).
  int graph_size(int64_t n) const;

 private:
  Model& model_;
  KvCache& kv_;
  kernels::Backend& backend_;
  std::vector<int> graph_sizes_;
  void run(const StepPlan& plan, std::vector<float>& logits, std::vector<int32_t>* tokens,
           std::vector<float>* features);

  StepBatch batch_;  // reused between steps: its vectors keep their capacity
};

// The graph sizes a backend runs for a configuration: none where it cannot capture;
// else `wanted` (sorted, without repeats) up to the widest decode step there can be.
std::vector<int> graph_sizes_for(const kernels::Backend& backend, const std::vector<int>& wanted, int max_num_seqs,
                                 int max_num_batched_tokens);

}  // namespace inferd::engine
