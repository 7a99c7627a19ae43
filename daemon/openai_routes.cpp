#include "daemon/openai_routes.hpp"

#include "daemon/api_key.hpp"

#include <cctype>
#include <chrono>
#include <ctime>
#include <mutex>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include <boost/json/serialize.hpp>

#include "daemon/engine_metrics.hpp"
#include "daemon/http_server.hpp"
#include "daemon/json_error.hpp"
#include "daemon/lifecycle.hpp"
#include "daemon/metrics.hpp"
#include "daemon/openai_schema.hpp"
#include "daemon/reasoning_parser.hpp"
#include "daemon/tool_call_parser.hpp"
#include "engine/chat_template.hpp"
#include "engine/engine.hpp"
#include "engine/tokenizer.hpp"

namespace inferd::daemon {

namespace json = boost::json;
using openai::Api;
using openai::GenerateRequest;
using Clock = std::chrono::steady_clock;

namespace {

// A full queue drains quickly; a daemon that is loading or recovering takes longer.
constexpr const char* kRetryAfterQueueFull = "1";
constexpr const char* kRetryAfterNotServing = "5";

Response error_response(const HttpError& e) {
  Response r = Response::json(e.status, error_body(e.status, e.what(), e.type, e.param));
  if (e.status == 429) r.headers.emplace_back("Retry-After", kRetryAfterQueueFull);
  if (e.status == 503) r.headers.emplace_back("Retry-After", kRetryAfterNotServing);
  if (e.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

class Generation;

// "call_" and 24 random letters and digits, as OpenAI's ids look.
std::string tool_call_id() {
  static constexpr std::string_view kChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % kChars.size()];
  return id;
}

// What every handler shares; lives as long as the routes and any request in flight.
struct ApiContext : std::enable_shared_from_this<ApiContext> {
  ApiContext(const Lifecycle& lifecycle, Metrics& registry, EngineSource source, OpenAiOptions opts)
      : lifecycle(lifecycle),
        engine(std::move(source)),
        options(std::move(opts)),
        metrics(registry, options.served_model_name, [src = engine]() -> std::optional<engine::EngineStats> {
          auto e = src ? src() : nullptr;
          return e ? std::optional(e->stats()) : std::nullopt;
        }) {}

  const Lifecycle& lifecycle;
  const EngineSource engine;
  const OpenAiOptions options;
  EngineMetrics metrics;

  void check_api_key(const Request& req) const { require_api_key(req, options.api_key); }

  void check_model(const std::string& model) const {
    if (!model.empty() && model != options.served_model_name)
      throw HttpError(404, "The model `" + model + "` does not exist; this server serves `" +
                               options.served_model_name + "`.",
                      "model_not_found", "model");
  }

  void check_admitting() const {
    if (lifecycle.admits_generation()) return;
    std::string msg = "inferd is " + std::string(to_string(lifecycle.state()));
    if (const std::string activity = lifecycle.activity(); !activity.empty()) msg += " (" + activity + ")";
    throw HttpError(503, msg + " and does not accept generation requests now; retry later");
  }

  std::shared_ptr<engine::Engine> loaded_engine() const {
    auto e = engine ? engine() : nullptr;
    if (!e)
      throw HttpError(503, "no model is loaded yet (inferd is " + std::string(to_string(lifecycle.state())) + ")");
    return e;
  }

  // Generations in flight, so that a daemon about to exit can answer each one.
  void track(const std::shared_ptr<Generation>& gen) {
    std::lock_guard lk(live_mu);
    std::erase_if(live, [](const auto& w) { return w.expired(); });
    live.push_back(gen);
  }
  void end_in_flight(const std::string& reason);

  std::mutex live_mu;
  std::vector<std::weak_ptr<Generation>> live;
};

// One generation request: its choices run as separate engine sequences whose
// deltas are merged here by index. Deltas arrive on the engine's scheduler
// thread; everything they trigger only formats and hands bytes to the responder.
class Generation : public std::enable_shared_from_this<Generation> {
 public:
  Generation(GenerateRequest req, openai::ResponseMeta meta, std::shared_ptr<Responder> out,
             std::shared_ptr<ApiContext> api, const engine::Tokenizer& tokenizer)
      : req_(std::move(req)),
        meta_(std::move(meta)),
        out_(std::move(out)),
        api_(std::move(api)),
        metrics_(api_->metrics) {
    // The tokenizer is only used from the engine's own thread, so it is alive.
    bytes_ = [tok = &tokenizer](int32_t id) { return std::string(tok->piece(id, /*skip_special=*/false)); };
  }

  // Submits prompts x n sequences; `echo[p]` leads prompt p's text. Throws what
  // Engine::submit throws, after cancelling whatever it had already submitted.
  void start(engine::Engine& eng, const std::vector<std::vector<int32_t>>& prompts,
             const std::vector<std::string>& echo, const std::string& request_id) {
    std::unique_lock lock(mu_);
    const size_t total = prompts.size() * static_cast<size_t>(req_.n);
    choices_.resize(total);
    try {
      for (size_t p = 0; p < prompts.size(); ++p) {
        for (int j = 0; j < req_.n; ++j) {
          const int index = static_cast<int>(p) * req_.n + j;
          ChoiceState& c = choices_[index];
          c.acc.index = index;
          c.counts_prompt = j == 0;  // a prompt's tokens count once, however many choices it has
          if (req_.echo) {
            c.acc.text = echo[p];
            c.text_len = echo[p].size();
          }
          if (req_.logprobs()) c.acc.logprobs.emplace();
          if (req_.api == Api::Chat) {
            // Calls forced from the first byte leave no room for reasoning before them.
            // Config validation already refused unknown names.
            const auto reasoning = reasoning_format(req_.chat.reasoning_parser).value_or(ReasoningFormat::None);
            if (reasoning != ReasoningFormat::None && !req_.chat.calls_only)
              c.reasoning.emplace(reasoning, req_.chat.template_options.enable_thinking);
            if (req_.chat.parse_tool_calls) c.tools = make_tool_call_parser(req_.chat.tool_call_parser);
          }

          engine::GenerationRequest r;
          r.id = total > 1 ? request_id + "-" + std::to_string(index) : request_id;
          r.prompt = prompts[p];
          r.sampling = req_.sampling;
          // Seeded choices of one prompt must still differ from each other.
          if (r.sampling.seed) *r.sampling.seed += static_cast<uint64_t>(j);
          const int room = eng.max_model_len() - static_cast<int>(r.prompt.size());
          r.max_tokens = req_.max_tokens.value_or(std::max(1, room));
          r.ignore_eos = req_.ignore_eos;
          r.stop = req_.stop;
          r.stop_token_ids = req_.stop_token_ids;
          r.skip_special_tokens = req_.skip_special_tokens;
          r.grammar = req_.grammar;
          r.sink = [self = shared_from_this(), index](engine::Delta&& d) { self->on_delta(index, std::move(d)); };
          handles_.push_back(eng.submit(std::move(r)));
        }
      }
    } catch (...) {
      abandoned_ = true;
      for (auto& h : handles_) h->cancel();
      throw;
    }
    remaining_ = static_cast<int>(total);
    if (req_.stream) out_->start_stream(stream_head());
    lock.unlock();
    api_->track(shared_from_this());
    // After the last submit, so handles_ no longer changes. Weak: the responder
    // keeps the callback, and this object keeps the responder.
    out_->on_disconnect([weak = weak_from_this()] {
      if (auto self = weak.lock())
        for (auto& h : self->handles_) h->cancel();
    });
  }

  // Ends every choice still running with `reason` as its error, whatever the
  // engine does later (its deltas for an ended choice are dropped).
  void end_with_error(const std::string& reason) {
    for (auto& h : handles_) h->cancel();
    for (size_t i = 0; i < handles_.size(); ++i) {
      engine::Delta d;
      d.finish = engine::FinishReason::Error;
      d.error = reason;
      on_delta(static_cast<int>(i), std::move(d));
    }
  }

 private:
  struct ChoiceState {
    openai::Choice acc;   // the whole choice so far (non-streaming)
    size_t text_len = 0;  // text already streamed, for completions' text_offset
    bool counts_prompt = false;
    bool done = false;
    std::optional<Clock::time_point> last_token;
    // Chat output parsers: reasoning first, then tool calls in the answer.
    std::optional<ReasoningParser> reasoning;
    std::unique_ptr<ToolCallParser> tools;
    int calls = 0;
  };

  // What a delta's text is once the parsers have read it.
  struct Parsed {
    std::string reasoning, content;
    std::vector<openai::ToolCall> calls;
  };

  Parsed parse(ChoiceState& c, const std::string& text, bool finished) {
    Parsed p;
    if (c.reasoning) {
      ReasoningSplit r = c.reasoning->push(text);
      if (finished) {
        ReasoningSplit tail = c.reasoning->finish();
        r.reasoning += tail.reasoning;
        r.content += tail.content;
      }
      p.reasoning = std::move(r.reasoning);
      p.content = std::move(r.content);
    } else {
      p.content = text;
    }
    if (c.tools) {
      ToolCallSplit t = c.tools->push(p.content);
      if (finished) {
        ToolCallSplit tail = c.tools->finish();
        t.content += tail.content;
        t.calls.insert(t.calls.end(), tail.calls.begin(), tail.calls.end());
      }
      p.content = std::move(t.content);
      for (auto& call : t.calls) {
        if (!req_.chat.parallel_tool_calls && c.calls > 0) break;  // the client takes one call only
        p.calls.push_back({c.calls++, tool_call_id(), std::move(call.name), std::move(call.arguments)});
      }
    }
    return p;
  }

  Response stream_head() const {
    Response head;
    head.content_type = "text/event-stream";
    head.headers.emplace_back("Cache-Control", "no-cache");
    for (const auto& c : choices_) {
      if (req_.api == Api::Chat) {
        head.body += openai::sse_event(openai::chat_role_chunk(meta_, c.acc.index));
      } else if (req_.echo) {
        openai::Choice echo{c.acc.index, c.acc.text, std::nullopt, engine::FinishReason::None, {}};
        head.body += openai::sse_event(openai::completion_chunk(meta_, echo, 0, bytes_));
      }
    }
    return head;
  }

  void on_delta(int index, engine::Delta&& d) {
    std::lock_guard lock(mu_);
    if (abandoned_) return;  // submission failed and the client already has its error
    ChoiceState& c = choices_[index];
    if (c.done) return;

    if (!d.tokens.empty()) {
      const auto now = Clock::now();
      if (c.last_token) {
        metrics_.observe_inter_token(std::chrono::duration<double>(now - *c.last_token).count());
      } else {
        metrics_.observe_ttft(d.ttft_s);
      }
      c.last_token = now;
    }
    const bool finished = d.finish != engine::FinishReason::None;
    if (finished) {
      c.done = true;
      --remaining_;
      metrics_.request_finished(d.finish, d.e2e_s);
      usage_.completion_tokens += d.usage.completion_tokens;
      if (c.counts_prompt) {
        usage_.prompt_tokens += d.usage.prompt_tokens;
        usage_.cached_tokens += d.usage.cached_tokens;
      }
      if (d.finish == engine::FinishReason::Error && error_.empty())
        error_ = d.error.empty() ? "the generation failed" : d.error;
    }

    Parsed parsed = parse(c, d.text, finished);
    c.acc.called = c.calls > 0;
    if (req_.stream) {
      stream(c, d, std::move(parsed));
    } else {
      c.acc.text += parsed.content;
      c.acc.reasoning += parsed.reasoning;
      for (auto& call : parsed.calls) c.acc.tool_calls.push_back(std::move(call));
      if (c.acc.logprobs) c.acc.logprobs->insert(c.acc.logprobs->end(), d.tokens.begin(), d.tokens.end());
      if (finished) {
        c.acc.finish = d.finish;
        c.acc.stop_reason = d.stop_reason;
      }
    }
    if (remaining_ == 0) complete();
  }

  void stream(ChoiceState& c, const engine::Delta& d, Parsed p) {
    if (d.finish == engine::FinishReason::Error) {
      // vLLM's shape for a failure mid-stream: an error object in a data event.
      out_->write(openai::sse_event(json::object{{"error", error_object(500, error_)}}));
      return;
    }
    if (req_.api == Api::Completions) {
      if (d.text.empty() && d.tokens.empty() && d.finish == engine::FinishReason::None) return;
      openai::Choice delta{c.acc.index, d.text, std::nullopt, d.finish, d.stop_reason};
      if (req_.logprobs()) delta.logprobs = d.tokens;
      out_->write(openai::sse_event(openai::completion_chunk(meta_, delta, c.text_len, bytes_)));
      c.text_len += d.text.size();
      return;
    }
    // Chat: reasoning and answer text in one chunk, then each call as vLLM
    // streams it: its id, type and name, then its arguments. The last chunk
    // carries the finish reason, the first the logprobs.
    std::vector<openai::Choice> chunks;
    auto next = [&]() -> openai::Choice& {
      openai::Choice& ch = chunks.emplace_back();
      ch.index = c.acc.index;
      return ch;
    };
    const bool text = !p.reasoning.empty() || !p.content.empty();
    // Tokens that let nothing out (held back as a possible tag, or inside a
    // call) send no chunk while a parser reads the output, as in vLLM, unless
    // their logprobs are asked for.
    const bool parsing = c.tools || c.reasoning;
    const bool empty_tokens = !d.tokens.empty() && (!parsing || req_.logprobs());
    if (text || (p.calls.empty() && (empty_tokens || d.finish != engine::FinishReason::None))) {
      openai::Choice& ch = next();
      ch.text = std::move(p.content);
      ch.reasoning = std::move(p.reasoning);
    }
    for (auto& call : p.calls) {
      next().tool_calls.push_back({call.index, call.id, call.name, ""});
      next().tool_calls.push_back({call.index, "", "", std::move(call.arguments)});
    }
    if (chunks.empty()) return;
    if (req_.logprobs()) chunks.front().logprobs = d.tokens;
    chunks.back().finish = d.finish;
    chunks.back().stop_reason = d.stop_reason;
    chunks.back().called = c.calls > 0;
    for (const auto& ch : chunks) out_->write(openai::sse_event(openai::chat_chunk(meta_, ch, bytes_)));
  }

  void complete() {
    if (req_.stream) {
      if (req_.include_usage) out_->write(openai::sse_event(openai::usage_chunk(meta_, req_.api, usage_)));
      out_->write(std::string(openai::kSseDone));
      out_->end();
      return;
    }
    if (!error_.empty()) {
      out_->send(error_response(HttpError(500, error_)));
      return;
    }
    std::vector<openai::Choice> all;
    all.reserve(choices_.size());
    for (auto& c : choices_) all.push_back(std::move(c.acc));
    const json::object body = req_.api == Api::Chat ? openai::chat_response(meta_, all, usage_, bytes_)
                                                    : openai::completion_response(meta_, all, usage_, bytes_);
    out_->send(Response::json(200, json::serialize(body)));
  }

  const GenerateRequest req_;
  const openai::ResponseMeta meta_;
  const std::shared_ptr<Responder> out_;
  const std::shared_ptr<ApiContext> api_;  // keeps metrics_ alive for late deltas
  EngineMetrics& metrics_;
  openai::TokenBytes bytes_;
  std::vector<std::shared_ptr<engine::RequestHandle>> handles_;

  std::mutex mu_;  // the rest: the submitting I/O thread, then the scheduler thread
  std::vector<ChoiceState> choices_;
  int remaining_ = 0;
  engine::Usage usage_;
  std::string error_;
  bool abandoned_ = false;
};

void ApiContext::end_in_flight(const std::string& reason) {
  std::vector<std::shared_ptr<Generation>> running;
  {
    std::lock_guard lk(live_mu);
    for (const auto& w : live)
      if (auto g = w.lock()) running.push_back(std::move(g));
    live.clear();
  }
  for (const auto& g : running) g->end_with_error(reason);
}

void generate(ApiContext& api, Api kind, const Request& req, const std::shared_ptr<Responder>& out) {
  const json::object body = parse_json_object(req.body);
  GenerateRequest g = kind == Api::Chat ? openai::parse_chat_request(body) : openai::parse_completion_request(body);
  api.check_model(g.model);
  api.check_admitting();
  const auto eng = api.loaded_engine();
  const engine::Tokenizer& tok = eng->tokenizer();

  // Prompts become token ids here, on a work thread of the HTTP server, so the scheduler only runs the model.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo;
  if (kind == Api::Chat) {
    // Special tokens are parsed in the template's own text only: what a client
    // writes in a message is text, never a control token.
    try {
      prompts.push_back(eng->chat_template().encode(tok, g.messages, g.add_generation_prompt, g.add_special_tokens,
                                                    g.chat.template_options));
    } catch (const engine::ChatTemplateError& e) {
      throw HttpError(400, e.what(), {}, "messages");
    }
    // Calls forced by a grammar are read as the grammar writes them: DSML for
    // DeepSeek's formats where it can hold the arguments, else hermes.
    const std::string format = !api.options.tool_call_parser.empty() ? api.options.tool_call_parser
                                                                     : std::string(eng->chat_template().tool_call_format());
    g.chat.tool_call_parser = format;
    if (g.chat.call_grammar) {
      g.chat.tool_call_parser = "hermes";
      if (auto dsml = openai::dsml_call_grammar(g.chat, format)) {
        g.grammar = g.chat.call_grammar = std::move(dsml);
        g.chat.tool_call_parser = format;
      }
    }
    g.chat.reasoning_parser = !api.options.reasoning_parser.empty() ? api.options.reasoning_parser
                                                                    : std::string(eng->chat_template().reasoning_format());
  } else {
    for (size_t p = 0; p < g.prompts.size(); ++p) {
      const auto& prompt = g.prompts[p];
      if (prompt.tokens.empty()) {
        prompts.push_back(tok.encode(prompt.text, g.add_special_tokens, /*parse_special=*/true));
        echo.push_back(prompt.text);
        continue;
      }
      for (int32_t id : prompt.tokens)
        if (static_cast<size_t>(id) >= tok.vocab_size())
          throw HttpError(400,
                          "token id " + std::to_string(id) + " in `prompt` is outside the vocabulary of " +
                              std::to_string(tok.vocab_size()) + " tokens",
                          {}, g.prompts.size() > 1 ? "prompt[" + std::to_string(p) + "]" : "prompt");
      prompts.push_back(prompt.tokens);
      echo.push_back(g.echo ? tok.decode(prompt.tokens, /*skip_special=*/false) : std::string());
    }
  }

  openai::ResponseMeta meta{(kind == Api::Chat ? "chatcmpl-" : "cmpl-") + req.request_id,
                            static_cast<int64_t>(std::time(nullptr)), api.options.served_model_name};
  auto gen = std::make_shared<Generation>(std::move(g), std::move(meta), out, api.shared_from_this(), tok);
  try {
    gen->start(*eng, prompts, echo, req.request_id);
  } catch (const engine::InvalidRequest& e) {
    // The engine says "prompt"; a chat client wrote messages.
    throw HttpError(400, e.what(), {}, kind == Api::Chat && e.field == "prompt" ? "messages" : e.field);
  } catch (const engine::QueueFull& e) {
    throw HttpError(429, std::string("the server is busy: ") + e.what() + "; retry later");
  } catch (const std::invalid_argument& e) {
    throw HttpError(400, e.what());
  }
}

void tokenize(ApiContext& api, const Request& req, const std::shared_ptr<Responder>& out) {
  const openai::TokenizeRequest t = openai::parse_tokenize_request(parse_json_object(req.body));
  api.check_model(t.model);
  const auto eng = api.loaded_engine();
  std::vector<int32_t> ids;
  if (t.prompt) {
    ids = eng->tokenizer().encode(*t.prompt, t.add_special_tokens, /*parse_special=*/true);
  } else {
    try {  // as a chat request tokenizes them
      ids = eng->chat_template().encode(eng->tokenizer(), t.messages, t.add_generation_prompt, t.add_special_tokens,
                                        t.chat.template_options);
    } catch (const engine::ChatTemplateError& e) {
      throw HttpError(400, e.what(), {}, "messages");
    }
  }
  out->send(Response::json(200, json::serialize(openai::tokenize_response(ids, eng->max_model_len()))));
}

void detokenize(ApiContext& api, const Request& req, const std::shared_ptr<Responder>& out) {
  const json::object body = parse_json_object(req.body);
  const auto eng = api.loaded_engine();
  const auto ids = openai::parse_detokenize_request(body, eng->tokenizer().vocab_size());
  const std::string text = eng->tokenizer().decode(ids, /*skip_special=*/false);
  out->send(Response::json(200, json::serialize(openai::detokenize_response(text))));
}

using RouteBody = std::function<void(ApiContext&, const Request&, const std::shared_ptr<Responder>&)>;

// Wraps a route body: API key first (for /v1), and every HttpError answered here
// so its param and Retry-After reach the client.
Handler guarded(std::shared_ptr<ApiContext> api, bool needs_key, RouteBody body) {
  return [api = std::move(api), needs_key, body = std::move(body)](const Request& req, std::shared_ptr<Responder> out) {
    try {
      if (needs_key) api->check_api_key(req);
      body(*api, req, out);
    } catch (const HttpError& e) {
      out->send(error_response(e));
    }
  };
}

}  // namespace

InFlightEnder register_openai_routes(HttpServer& http, const Lifecycle& lifecycle, Metrics& metrics,
                                     EngineSource engine, OpenAiOptions options) {
  auto api = std::make_shared<ApiContext>(lifecycle, metrics, std::move(engine), std::move(options));

  // Parsing, templating and tokenizing a body of up to max_body_bytes is CPU
  // work: it runs on the server's work threads, not its I/O threads.
  const RouteOptions work{.offload = true};
  http.route("POST", "/v1/chat/completions",
             guarded(api, true, [](ApiContext& a, const Request& r, const std::shared_ptr<Responder>& o) {
               generate(a, Api::Chat, r, o);
             }),
             work);
  http.route("POST", "/v1/completions",
             guarded(api, true, [](ApiContext& a, const Request& r, const std::shared_ptr<Responder>& o) {
               generate(a, Api::Completions, r, o);
             }),
             work);
  // As in vLLM, only /v1 routes need the key.
  http.route("POST", "/tokenize", guarded(api, false, tokenize), work);
  http.route("POST", "/detokenize", guarded(api, false, detokenize), work);
  return [api](const std::string& reason) { api->end_in_flight(reason); };
}

}  // namespace inferd::daemon
