// The engine with response grammars: every output, batched beside others and
// sampled or greedy, is a prefix of the grammar's language, and whole (valid
// JSON) when it ends with Stop; such requests never carry drafts.
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <boost/json/parse.hpp>

#include "engine/engine.hpp"
#include "engine/grammar/json_schema.hpp"
#include "engine/grammar/matcher.hpp"
#include "engine/tokenizer.hpp"
#include "tests/engine_generate.hpp"
#include "test_paths.hpp"

using namespace inferd;

namespace {

struct Outcome {
  std::string text;
  engine::FinishReason finish = engine::FinishReason::None;
  std::string error;
};

}  // namespace

TEST_CASE("engine: outputs under a grammar stay in it, batched, greedy and sampled, without drafts") {
  engine::EngineOptions o;
  o.model_path = test_paths::default_model();
  o.threads = 1;
  o.max_model_len = 512;
  o.kv_cache_bytes = 16 << 20;
  o.speculative = engine::NgramOptions{3, 1, 4};  // requests with a grammar must not use it
  engine::Engine eng(o);

  const auto any_object = std::make_shared<const engine::grammar::Grammar>(engine::grammar::any_json_object());
  const auto person = std::make_shared<const engine::grammar::Grammar>(engine::grammar::compile_json_schema(
      boost::json::parse(R"({"type": "object", "properties": {
          "name": {"type": "string"}, "age": {"type": "integer"}, "admin": {"type": "boolean"},
          "pets": {"type": "array", "items": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}},
                                               "required": ["kind"], "additionalProperties": false}, "maxItems": 3}},
          "required": ["name", "age", "admin", "pets"], "additionalProperties": false})"),
      true));
  const std::vector<int32_t> prompt =
      eng.tokenizer().encode("A person as JSON, with name, age, admin and pets:\n", true, false);

  std::mutex mu;
  std::condition_variable cv;
  std::vector<Outcome> out(6);
  size_t done = 0;
  std::vector<engine::GenerationRequest> reqs;
  for (size_t i = 0; i < out.size(); ++i) {
    engine::GenerationRequest r;
    r.id = std::to_string(i);
    r.prompt = prompt;
    r.grammar = i % 2 ? any_object : person;
    r.sampling.temperature = i < 2 ? 0.0f : 1.0f;
    r.sampling.seed = i;
    r.max_tokens = 120;
    r.sink = [&, i](engine::Delta&& d) {
      std::lock_guard lk(mu);
      out[i].text += d.text;
      if (d.finish == engine::FinishReason::None) return;
      out[i].finish = d.finish;
      out[i].error = d.error;
      ++done;
      cv.notify_all();
    };
    reqs.push_back(std::move(r));
  }
  eng.submit_together(std::move(reqs));
  {
    std::unique_lock lk(mu);
    test_engine::wait_finished(eng, lk, cv, [&] { return done == out.size(); });
  }
  int whole = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    INFO("request ", i, ": ", out[i].text);
    CHECK(out[i].error.empty());
    engine::grammar::Matcher m(i % 2 ? any_object : person);
    CHECK(m.accept(out[i].text));
    if (out[i].finish == engine::FinishReason::Stop) {
      CHECK(m.finished());
      CHECK_NOTHROW(boost::json::parse(out[i].text));
      ++whole;
    } else {
      CHECK(out[i].finish == engine::FinishReason::Length);
    }
  }
  CHECK(whole >= 2);  // the greedy ones at least finish well within 120 tokens
  CHECK(eng.stats().spec_drafts == 0);
}
