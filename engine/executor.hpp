// Runs a step plan's forward pass on one rank: turns the plan into the model's
// batch (tokens, positions, block tables) and gets the logits of the sequences
// the plan samples, one row each, in plan order. This is the part of a step
// every rank of a tensor-parallel group does; sampling stays with the head.
#pragma once
#include <vector>

#include "engine/kv/kv_cache.hpp"
#include "engine/models/model.hpp"
#include "engine/sched/step_plan.hpp"

namespace inferd::engine {

class Executor {
 public:
  Executor(Model& model, KvCache& kv) : model_(model), kv_(kv) {}
  // logits: resized to one row of the model's vocab per sequence the plan samples.
  void execute(const StepPlan& plan, std::vector<float>& logits);

 private:
  Model& model_;
  KvCache& kv_;
  StepBatch batch_;  // reused between steps: its vectors keep their capacity
};

}  // namespace inferd::engine
