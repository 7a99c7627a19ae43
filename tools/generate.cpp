// `inferctl generate`: one prompt through the embedded engine, streamed to stdout.
// With --chat the prompt is a user message rendered by the model's chat template.
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <optional>

#include "engine/chat_template.hpp"
#include "engine/engine.hpp"
#include "engine/tokenizer.hpp"
#include "tools/inferctl_commands.hpp"

namespace inferd::tools {

int cmd_generate(const Args& args) {
  if (!args.has("prompt")) {
    std::cerr << "usage: inferctl generate --prompt TEXT [--chat] [--max-tokens N] [--temperature T] [--top-k K]\n"
                 "         [--top-p P] [--seed S] [--threads N] [--model PATH] [--ignore-eos]\n";
    return 2;
  }
  engine::EngineOptions opts;
  opts.model_path = args.get("model", default_model_path());
  opts.threads = args.get_int("threads", 0);
  opts.max_model_len = args.get_int("max-model-len", 0);
  engine::Engine eng(opts);

  const std::string text = args.get("prompt", "");
  engine::GenerationRequest req;
  req.id = "generate";
  if (args.has("chat")) {  // the message is plain text; the template writes the special tokens
    const engine::ChatMessage msg{"user", text};
    req.prompt = eng.chat_template().encode(eng.tokenizer(), std::span(&msg, 1), true);
  } else {
    req.prompt = eng.tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/true);
  }
  req.max_tokens = args.get_int("max-tokens", 64);
  req.ignore_eos = args.has("ignore-eos");
  req.sampling.temperature = float(args.get_double("temperature", 0.0));
  req.sampling.top_k = args.get_int("top-k", 0);
  req.sampling.top_p = float(args.get_double("top-p", 1.0));
  if (args.has("seed")) req.sampling.seed = uint64_t(args.get_int("seed", 0));

  std::mutex mu;
  std::condition_variable cv;
  std::optional<engine::Delta> last;
  req.sink = [&](engine::Delta&& d) {
    std::cout << d.text << std::flush;
    if (d.finish != engine::FinishReason::None) {
      std::lock_guard lk(mu);
      last = std::move(d);
      cv.notify_all();
    }
  };
  eng.submit(std::move(req));
  std::unique_lock lk(mu);
  cv.wait(lk, [&] { return last.has_value(); });
  std::cout << "\n";
  std::cerr << "finish=" << engine::to_string(last->finish) << " prompt_tokens=" << last->usage.prompt_tokens
            << " completion_tokens=" << last->usage.completion_tokens << " seconds=" << last->e2e_s << "\n";
  if (!last->error.empty()) std::cerr << "error: " << last->error << "\n";
  return last->finish == engine::FinishReason::Error ? 1 : 0;
}

}  // namespace inferd::tools
