// `inferctl draft-head-data`: the training data of a draft head
// (engine/spec/draft_head_proposer.hpp). Each prompt, a user message rendered by
// the model's chat template, is continued greedily by the model itself, several
// prompts in one batch; every generated position's feature (the final hidden
// state the output head reads) is written with its token, so a head learns to
// predict the model's own next feature from its current one and the next token.
//
//   PREFIX.features: float32 rows of the model's width, one per position
//   PREFIX.tokens:   int32 triples (sequence, position, token at that position)
//
// The feature of row i predicts the token of row i+1 when both belong to the
// same sequence and their positions follow each other.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <numeric>

#include "engine/chat_template.hpp"
#include "engine/gguf_reader.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/hf_checkpoint.hpp"
#include "engine/models/model_registry.hpp"
#include "engine/tokenizer.hpp"
#include "kernels/backend_factory.hpp"
#include "tools/inferctl_commands.hpp"

namespace inferd::tools {
namespace {

struct Writer {
  std::ofstream features, tokens;
  int dim = 0;
  size_t rows = 0;
  void row(const float* f, int32_t seq, int32_t pos, int32_t token) {
    features.write(reinterpret_cast<const char*>(f), static_cast<std::streamsize>(dim * sizeof(float)));
    const int32_t t[3] = {seq, pos, token};
    tokens.write(reinterpret_cast<const char*>(t), sizeof t);
    ++rows;
  }
};

int32_t argmax(const float* row, int n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

}  // namespace

int cmd_draft_head_data(const Args& args) {
  if (!args.has("prompts") || !args.has("out")) {
    std::cerr << "usage: inferctl draft-head-data --prompts FILE --out PREFIX [--model PATH] [--max-tokens N]\n"
                 "         [--batch B] [--threads N]\n"
                 "  FILE: one user message a line; writes PREFIX.features and PREFIX.tokens\n";
    return 2;
  }
  std::ifstream in(args.get("prompts", ""));
  if (!in) {
    std::cerr << "draft-head-data: cannot read " << args.get("prompts", "") << "\n";
    return 2;
  }
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) prompts.push_back(line);
  const int max_tokens = args.get_int("max-tokens", 256);
  const int batch = std::max(1, args.get_int("batch", 8));

  auto backend = kernels::make_backend("cpu", args.get_int("threads", 0));
  const auto file = engine::open_model(args.get("model", default_model_path()));
  const auto model = engine::load_model(*file, *backend);
  if (!model->emits_features()) {
    std::cerr << "draft-head-data: the " << model->config().architecture << " model does not give its features\n";
    return 2;
  }
  const auto tokenizer = engine::Tokenizer::from_gguf(*file);
  const auto chat = engine::ChatTemplate::from_gguf(*file, *tokenizer);
  const auto& mc = model->config();
  const auto& stop = tokenizer->stop_ids();

  Writer out;
  out.dim = mc.dim;
  const std::string prefix = args.get("out", "");
  out.features.open(prefix + ".features", std::ios::binary);
  out.tokens.open(prefix + ".tokens", std::ios::binary);

  std::vector<std::vector<int32_t>> ids;
  size_t longest = 0;
  for (const auto& p : prompts) {
    const engine::ChatMessage msg{"user", p};
    ids.push_back(chat.encode(*tokenizer, std::span(&msg, 1), true));
    longest = std::max(longest, ids.back().size());
  }
  const int block = 16;
  const int blocks_per_seq = static_cast<int>((longest + static_cast<size_t>(max_tokens) + block) / block);
  engine::KvCache kv(engine::KvGeometry{mc.n_layers, mc.n_kv_heads, mc.head_dim, block, blocks_per_seq * batch},
                     *backend);
  std::vector<float> logits, features;
  auto run = [&](const engine::StepBatch& b) {
    logits.resize(b.logits_rows.size() * static_cast<size_t>(mc.vocab));
    features.resize(b.logits_rows.size() * static_cast<size_t>(mc.dim));
    model->forward(b, kv, logits.data(), nullptr, features.data());
  };

  for (size_t first = 0; first < ids.size(); first += static_cast<size_t>(batch)) {
    const size_t n = std::min(ids.size() - first, static_cast<size_t>(batch));
    std::vector<std::vector<int32_t>> tables(n);
    std::vector<int32_t> next(n), pos(n);
    std::vector<bool> done(n, false);
    for (size_t i = 0; i < n; ++i) {  // each prompt's prefill: its last position starts the data
      tables[i].resize(static_cast<size_t>(blocks_per_seq));
      std::iota(tables[i].begin(), tables[i].end(), static_cast<int32_t>(i) * blocks_per_seq);
      const auto& p = ids[first + i];
      engine::StepBatch b;
      const int32_t t = b.add_table(tables[i]);
      for (size_t j = 0; j < p.size(); ++j) b.add(p[j], static_cast<int32_t>(j), t, j + 1 == p.size());
      run(b);
      pos[i] = static_cast<int32_t>(p.size()) - 1;
      out.row(features.data(), static_cast<int32_t>(first + i), pos[i], p.back());
      next[i] = argmax(logits.data(), mc.vocab);
    }
    for (int step = 0; step < max_tokens; ++step) {  // all of the batch's sequences decode together
      engine::StepBatch b;
      std::vector<size_t> live;
      for (size_t i = 0; i < n; ++i) {
        if (done[i]) continue;
        if (std::ranges::find(stop, next[i]) != stop.end()) {
          done[i] = true;
          continue;
        }
        live.push_back(i);
        b.add(next[i], ++pos[i], b.add_table(tables[i]), true);
      }
      if (live.empty()) break;
      run(b);
      for (size_t r = 0; r < live.size(); ++r) {
        const size_t i = live[r];
        out.row(features.data() + r * static_cast<size_t>(mc.dim), static_cast<int32_t>(first + i), pos[i], next[i]);
        next[i] = argmax(logits.data() + r * static_cast<size_t>(mc.vocab), mc.vocab);
      }
    }
    std::cerr << "draft-head-data: " << first + n << "/" << ids.size() << " prompts, " << out.rows << " rows\n";
  }
  std::cout << "{\"rows\":" << out.rows << ",\"dim\":" << mc.dim << ",\"vocab\":" << mc.vocab << "}\n";
  return 0;
}

}  // namespace inferd::tools
