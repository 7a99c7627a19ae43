// The engine: owns the backend, model, tokenizer and KV cache, and runs one step
// loop: the scheduler plans a step (engine/sched), the executor runs its forward
// pass (engine/executor.hpp), the engine samples, the scheduler takes the
// sampled tokens back, and each request's output stream (engine/output) turns
// them into deltas. Requests arrive through submit(); results leave through each
// request's sink, called on the step loop's thread.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/grammar/grammar.hpp"
#include "engine/models/model.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/models/model_registry.hpp"
#include "engine/models/tensor_parallel.hpp"
#include "engine/sampler.hpp"
#include "engine/sched/step_plan.hpp"
#include "engine/shape_space.hpp"
#include "engine/spec/ngram_proposer.hpp"

namespace inferd::engine {

class GgufFile;
class Tokenizer;
class ChatTemplate;
class KvCache;
class KvCacheManager;
class Scheduler;
class Executor;
class StepHeartbeat;
class DraftModelProposer;
namespace grammar {
class TokenIndex;
}

struct EngineOptions {
  std::string model_path;
  // A Jinja chat template file used instead of the model's own; empty: the model's.
  std::string chat_template_path;
  int threads = 0;                  // 0: one per core
  int max_model_len = 0;            // 0: the model's trained context
  int max_num_seqs = 16;
  int max_num_batched_tokens = 512;
  int block_size = 16;
  int num_kv_blocks = 0;            // 0: derived from kv_cache_bytes
  size_t kv_cache_bytes = size_t(1) << 30;  // 0: the least that holds one sequence of max_model_len
  // > 0, on a backend that reports its memory (a GPU): the cache instead gets
  // what this share of the device's memory leaves once the weights are
  // uploaded (engine/kv/gpu_kv_budget.hpp); num_kv_blocks still wins.
  double gpu_memory_utilization = 0;
  bool enable_prefix_caching = true;
  size_t max_waiting = 256;         // queued requests beyond this are refused
  // Makes the backend the model runs on; empty: the CPU backend with `threads`.
  kernels::BackendFactory backend;
  // This engine's rank of a tensor-parallel group; the engine is its head (rank
  // 0: scheduler and sampling), workers run engine/rank_worker.hpp.
  TensorParallel tp;
  // Hears each step's plan just before the head runs it: the group's workers
  // must run every plan, in the same order (the daemon sends them on).
  std::function<void(const StepPlan&)> on_plan;
  // With a group: run on the step thread during each reset (after reset()
  // aborted the data plane): re-forms the group on every rank, or throws; then
  // the reset fails (reset() returns why) and the caller escalates.
  std::function<void(const std::string& reason)> reform_group;
  // Decode batch sizes run as captured steps (CUDA graphs) on a backend that can
  // capture (engine/executor.hpp); the CPU backend cannot: there they do nothing.
  // Empty: every step runs eagerly; so does every rank that runs collectives
  // (TensorParallel::collective), which run between the ops, outside what a
  // graph holds.
  std::vector<int> graph_sizes = {1, 2, 4, 8};
  // Speculative decoding with the prompt-lookup proposer (engine/spec/); unset:
  // none. Greedy requests give the tokens they give without it; sampled ones
  // verify drafts by speculative sampling (Sampler::verify), the same
  // distribution, but not the same tokens for a given seed. Not with a
  // tensor-parallel group (refused: std::invalid_argument).
  std::optional<NgramOptions> speculative;
  // With `speculative`: the drafts come from this smaller model of the same
  // vocabulary (a GGUF file or checkpoint directory; engine/spec/
  // draft_model_proposer.hpp) instead of prompt lookup. Empty: prompt lookup.
  std::string draft_model;
  // With `speculative`: the drafts come from this head reading the target's
  // hidden state (a GGUF of architecture "draft_head"; engine/spec/
  // draft_head_proposer.hpp). Not with draft_model.
  std::string draft_head;
  // Hears the load as it goes (engine/models/model_registry.hpp): stages "weights" (per
  // tensor), "tokenizer", "kv_cache", on the constructing thread.
  LoadProgressFn on_load_progress;
};

// The context the engine serves: `asked`, or the model's trained context when 0;
// more than the trained context is refused (std::invalid_argument).
int resolve_max_model_len(const ModelConfig& mc, int asked);
// The KV cache the options allow (block count from the bytes, this rank's kv
// heads); std::invalid_argument naming the numbers when it cannot hold one
// sequence of max_model_len.
KvGeometry plan_kv_cache(const ModelConfig& mc, int max_model_len, const EngineOptions& opts);
// The options with num_kv_blocks from the device's memory, now that the weights
// (weights_bytes) are on it, when gpu_memory_utilization asks for that and the
// backend reports its memory; a group's ranks (each calls it) take the fewest
// blocks any of them has room for. The options as they are otherwise.
EngineOptions kv_sized_by_device(const EngineOptions& opts, kernels::Backend& backend, const ModelConfig& mc,
                                 int max_model_len, size_t weights_bytes);

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
};

struct TokenOut {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // when logprobs were asked for
};

// What a request's sink receives: new text and tokens, and at the end the finish
// reason and usage. A stream that ends with Error carries a message.
struct Delta {
  std::string text;
  std::vector<TokenOut> tokens;
  FinishReason finish = FinishReason::None;
  std::string stop_reason;  // the stop string that matched, if any
  std::string error;
  Usage usage;
  double ttft_s = 0;   // set on the first delta that carries tokens
  double e2e_s = 0;    // set on the final delta
};

struct GenerationRequest {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 16;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool skip_special_tokens = true;
  bool priority = false;  // jumps the waiting queue (health probes: they measure the engine, not the queue)
  // May carry drafts when the engine speculates. The warm-up turns it off: its
  // plan counts on steps of one token per decoding sequence (decode batch sizes
  // held for several steps); the verify steps' shapes lie inside its buckets.
  bool speculate = true;
  // Warm-up only: the first `unwritten_prefix` prompt tokens count as already in
  // the KV cache without being run (their slots keep whatever the blocks held),
  // so a recovery's re-warm reaches the top context bucket (attention reading a
  // long context) in one step instead of prefilling the whole prompt. The output
  // means nothing; those blocks never enter the prefix cache. Below the prompt's
  // length: its last token is run.
  int unwritten_prefix = 0;
  // Constrained decoding (engine/grammar/): every sampled token keeps the output
  // a prefix of a text this grammar accepts, and the request ends with Stop once
  // the text is whole and nothing may follow. Such a request never carries
  // drafts: the prompt-lookup drafts would each need the grammar's state after
  // the drafts before them, which the verify step does not keep.
  std::shared_ptr<const grammar::Grammar> grammar;
  std::function<void(Delta&&)> sink;
};

// The caller's handle on a submitted request.
class RequestHandle {
 public:
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  std::atomic<bool> cancelled_{false};
};

class QueueFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Raised by submit() for a request the engine cannot run (e.g. too long).
class InvalidRequest : public std::invalid_argument {
 public:
  InvalidRequest(std::string field, const std::string& msg) : std::invalid_argument(msg), field(std::move(field)) {}
  std::string field;
};

struct EngineStats {
  int running = 0;
  int waiting = 0;
  int kv_blocks_total = 0;
  int kv_blocks_used = 0;
  uint64_t prompt_tokens_total = 0;
  uint64_t generation_tokens_total = 0;
  uint64_t prefix_queries_tokens = 0;
  uint64_t prefix_hits_tokens = 0;
  uint64_t preemptions_total = 0;
  uint64_t steps_total = 0;
  // Speculative decoding, as vLLM counts it: sequence-steps that carried drafts,
  // the drafts, those accepted, and those accepted at each draft position.
  uint64_t spec_drafts = 0;
  uint64_t spec_draft_tokens = 0;
  uint64_t spec_accepted_tokens = 0;
  std::vector<uint64_t> spec_accepted_per_pos;  // num_speculative_tokens entries; empty without speculation
  double kv_usage() const { return kv_blocks_total ? double(kv_blocks_used) / kv_blocks_total : 0.0; }
};

class Engine {
 public:
  // Loads the model (throws LoadError naming the file and offset) and starts the scheduler.
  explicit Engine(const EngineOptions& opts, StepHeartbeat* heartbeat = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ChatTemplate& chat_template() const { return *chat_; }
  const ModelConfig& model_config() const { return model_->config(); }
  const EngineOptions& options() const { return opts_; }
  int max_model_len() const { return max_model_len_; }
  // The decode batch sizes this engine runs as captured steps (empty on the CPU).
  const std::vector<int>& graph_sizes() const { return graph_sizes_; }
  kernels::Backend& backend() { return *backend_; }

  // The shape space of this engine's configuration (engine/shape_space.hpp): its
  // axes, and the keys real traffic can reach, found by a dry run on the shape tracer.
  ShapeAxes shape_axes() const;
  std::vector<kernels::ShapeKey> reachable_shape_keys() const;
  // Runs the proposer's own warm-up (a draft model's forwards over the shape
  // axes) on the step thread and waits for it; nothing without a proposer.
  // The warm-up calls it once it cleared the shape registry.
  void warm_proposer();

  // Queues a request; throws InvalidRequest or QueueFull.
  std::shared_ptr<RequestHandle> submit(GenerationRequest req);
  // Queues all or none, in one go, so the scheduler sees them in the same step
  // (warm-up relies on it to build steps of a known size). Internal work: the
  // queue limit does not apply.
  std::vector<std::shared_ptr<RequestHandle>> submit_together(std::vector<GenerationRequest> reqs);
  EngineStats stats() const;
  // Stops the scheduler; requests still queued or running end with an error.
  void stop();

  // Recovery: aborts the step in progress (if it responds), drops the KV cache's
  // contents and the prefix cache, and sorts the requests: those that have
  // produced nothing are held (they run again after release_held()), those that
  // have end with an error naming `reason`. The model stays loaded. With a group,
  // then re-forms it (bounded by reform_group's own waits, not by `timeout`).
  // Returns why it failed, if it did: the scheduler did not leave its step
  // within `timeout` (a wedge it cannot leave), or the group did not re-form.
  std::optional<std::string> reset(const std::string& reason, std::chrono::milliseconds timeout);
  // The held requests go back to the queue, ahead of anything newer.
  void release_held();

 private:
  struct Live;  // a request the engine holds: its sink, sampler and output stream
  std::unique_ptr<Live> make_live(GenerationRequest req);  // validates; throws InvalidRequest
  void enqueue(std::vector<std::unique_ptr<Live>> reqs, bool queue_limit);
  void loop();
  void take_inbox();                         // step loop; mu_ held
  // Step loop, mu_ held. Returns the requests that had produced output, for the
  // loop to end outside the lock.
  std::vector<std::unique_ptr<Live>> do_reset(const std::string& reason);
  std::string reform_group(const std::string& reason);  // step loop; mu_ not held; why it failed, or empty
  void drop_cancelled();  // requests whose caller cancelled them (a hang-up, a timeout)
  void step();
  // Tokens drawn where the model computes (Model::samples_on_device), by logits
  // row: a row whose request needs its logits here (penalties, logprobs, a
  // grammar, drafts to verify) is drawn here instead, and brings them back.
  struct DeviceDraws {
    std::vector<kernels::RowSampling> params;
    std::vector<uint8_t> drawn;  // the row's token is tokens[row]
    std::vector<int32_t> tokens;
    bool logits_too = false;
  };
  DeviceDraws plan_device_draws(const StepPlan& plan);
  // Samples a sequence's rows of the step's logits from `row`: one token, or for
  // one with drafts the accepted drafts and then the target's token.
  void sample_seq(const ScheduledSeq& s, int row, const DeviceDraws* draws, std::vector<SampledToken>& sampled,
                  std::vector<SampleResult>& results);
  void stall_if_armed();
  void corrupt_if_armed();
  // Ends a request with a final delta (carrying its last text, if any).
  void end(Live& r, FinishReason why, std::string error = {}, Delta last = {});
  void deliver(Live& r, Delta&& d);
  void publish_stats();

  EngineOptions opts_;
  StepHeartbeat* heartbeat_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> chat_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<KvCacheManager> kv_manager_;
  std::unique_ptr<Proposer> proposer_;
  DraftModelProposer* draft_ = nullptr;  // proposer_, when it runs a draft model
  std::unique_ptr<grammar::TokenIndex> token_index_;  // the vocabulary's bytes, for grammar masks
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Executor> executor_;
  int max_model_len_ = 0;
  std::vector<int> graph_sizes_;
  int n_tokens_ = 0;  // the tokenizer's; ids from here to the model's vocab are padding
  Precision precision_ = Precision::Fast;
  std::atomic<uint64_t> next_id_{1};

  // Inbox from submit(), guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Live>> inbox_;
  bool stopping_ = false;
  std::optional<std::string> reset_reason_;  // a reset the step loop has yet to do
  uint64_t resets_begun_ = 0;  // resets whose step the loop has left
  uint64_t resets_done_ = 0;
  std::string last_reset_failure_;  // why the last reset's group did not re-form; empty if it did
  bool group_broken_ = false;  // a collective failed: no step runs until a reset re-forms the group
  std::condition_variable reset_cv_;
  std::deque<std::unique_ptr<Live>> held_;
  std::atomic<bool> abort_step_{false};
  // warm_proposer() asks the step loop, which runs it between steps.
  uint64_t proposer_warms_asked_ = 0, proposer_warms_done_ = 0;
  std::string proposer_warm_error_;  // why the last one failed; empty if it did not
  std::condition_variable proposer_warm_cv_;

  // Step-loop state: the requests the scheduler holds, by sequence id.
  std::unordered_map<SeqId, std::unique_ptr<Live>> live_;
  std::vector<float> logits_;
  std::vector<float> features_;  // each logits row's feature, for a proposer that reads them

  // Counters read by stats().
  std::atomic<int> n_running_{0}, n_waiting_{0}, kv_used_{0};
  std::atomic<uint64_t> prompt_total_{0}, gen_total_{0}, prefix_q_{0}, prefix_hit_{0}, preempt_total_{0},
      steps_total_{0};
  std::atomic<uint64_t> spec_drafts_{0}, spec_draft_tokens_{0}, spec_accepted_{0};
  std::vector<std::atomic<uint64_t>> spec_accepted_per_pos_;

  std::thread thread_;
};

}  // namespace inferd::engine
