#include "health/generation_probe.hpp"

#include <algorithm>
#include <condition_variable>
#include <memory>

#include <fmt/format.h>

#include "engine/engine.hpp"
#include "engine/tokenizer.hpp"

namespace inferd::health {

namespace {

// For log lines: newlines shown as \n.
std::string one_line(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

}  // namespace

ProbeResult GenerationProbe::generate(engine::Engine& eng, std::chrono::milliseconds budget) const {
  budget = std::max(budget, opts_.budget);
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::vector<int32_t> tokens;
    std::string text, error;
    engine::FinishReason finish = engine::FinishReason::None;
  };
  auto w = std::make_shared<Wait>();
  ProbeResult r;
  r.ran = true;
  r.at = std::chrono::system_clock::now();
  const auto start = std::chrono::steady_clock::now();
  engine::GenerationRequest req;
  req.id = "probe";
  req.prompt = eng.tokenizer().encode(opts_.prompt, false, false);
  req.max_tokens = opts_.max_tokens;
  req.ignore_eos = true;
  req.sampling.temperature = 0;
  req.priority = true;
  req.sink = [w](engine::Delta&& d) {
    std::lock_guard lk(w->mu);
    for (const auto& t : d.tokens) w->tokens.push_back(t.id);
    w->text += d.text;
    if (d.finish != engine::FinishReason::None) {
      w->done = true;
      w->finish = d.finish;
      w->error = d.error;
      w->cv.notify_all();
    }
  };
  std::vector<engine::GenerationRequest> one;
  one.push_back(std::move(req));
  std::shared_ptr<engine::RequestHandle> handle;
  try {
    handle = eng.submit_together(std::move(one)).front();  // internal: no queue limit
  } catch (const std::exception& e) {
    r.reason = std::string("could not submit: ") + e.what();
    return r;
  }
  std::unique_lock lk(w->mu);
  const bool finished = w->cv.wait_for(lk, budget, [&] { return w->done; });
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.tokens = w->tokens;
  r.text = w->text;
  if (!finished) {
    handle->cancel();
    r.reason = fmt::format("no answer within the {} ms budget", budget.count());
    r.level = Level::Shed;
  } else if (w->finish != engine::FinishReason::Length) {
    r.reason = fmt::format("ended {}{}{}", engine::to_string(w->finish), w->error.empty() ? "" : ": ", w->error);
    r.level = Level::Critical;
  } else {
    r.ok = true;
  }
  return r;
}

ProbeResult GenerationProbe::capture_golden(engine::Engine& eng) {
  ProbeResult r = generate(eng, opts_.budget * 10);  // no golden yet: nothing to hurry for
  std::lock_guard lk(mu_);
  if (r.ok) {
    golden_ = r.tokens;
    golden_text_ = r.text;
  }
  last_ = r;
  return r;
}

ProbeResult GenerationProbe::run(engine::Engine& eng, std::chrono::milliseconds budget) {
  ProbeResult r = generate(eng, budget);
  std::lock_guard lk(mu_);
  if (r.ok && golden_ && r.tokens != *golden_) {
    r.ok = false;
    r.level = Level::Critical;
    r.reason = fmt::format("answered '{}' where the golden is '{}'", one_line(r.text), one_line(golden_text_));
  }
  last_ = r;
  return r;
}

ProbeResult GenerationProbe::last() const {
  std::lock_guard lk(mu_);
  return last_;
}

bool GenerationProbe::has_golden() const {
  std::lock_guard lk(mu_);
  return golden_.has_value();
}

Signal GenerationProbe::signal() const {
  std::lock_guard lk(mu_);
  if (!last_.ran || last_.ok) return {"probe", Level::Ok, last_.ran ? "matches the golden" : "not run yet"};
  return {"probe", last_.level, last_.reason};
}

}  // namespace inferd::health
