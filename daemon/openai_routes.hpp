// The OpenAI-compatible API over the engine:
//   POST /v1/chat/completions   messages -> chat template -> generation
//   POST /v1/completions        prompt (text, token ids, or a batch of either) -> generation
//   POST /tokenize              {prompt} or {messages} -> {count, max_model_len, tokens}
//   POST /detokenize            {tokens} -> {prompt}
// Both generation routes answer one JSON body or, with "stream": true, Server-Sent
// Events. Results arrive on the engine's scheduler thread and are handed to the
// connection without blocking it; a client that goes away cancels its request.
#pragma once
#include <functional>
#include <memory>
#include <string>

namespace inferd::engine {
class Engine;
}

namespace inferd::daemon {

class HttpServer;
class Lifecycle;
class Metrics;

struct OpenAiOptions {
  // The name responses report and requests may send as "model"; another name is a 404.
  std::string served_model_name;
  // Non-empty: the /v1 routes require "Authorization: Bearer <api_key>".
  std::string api_key;
  // vLLM's parser names (config.hpp): how tool calls and reasoning are read
  // from chat output. Empty: the chat template's format.
  std::string tool_call_parser;
  std::string reasoning_parser;
};

// The engine to serve with, or null while none is loaded (the routes then answer 503).
using EngineSource = std::function<std::shared_ptr<engine::Engine>()>;

// Ends every generation in flight with an error naming `reason`: a stream gets
// an SSE error event and [DONE], a plain request a JSON 500. Thread-safe.
using InFlightEnder = std::function<void(const std::string& reason)>;

// Registers the routes above and the vllm:* metrics (engine_metrics.hpp). Call
// once, before the server starts. Generation is admitted only while `lifecycle`
// admits it (Serving, Degraded); otherwise 503 with Retry-After naming the state.
// `lifecycle` and `metrics` must outlive the server.
InFlightEnder register_openai_routes(HttpServer& http, const Lifecycle& lifecycle, Metrics& metrics,
                                     EngineSource engine, OpenAiOptions options);

}  // namespace inferd::daemon
