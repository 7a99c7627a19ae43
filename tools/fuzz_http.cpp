// libFuzzer target for the HTTP request path without sockets. The first byte
// picks the mode:
//   even: the rest is raw bytes from a client. Beast's parser reads requests from
//         them as the session does (same limits, pipelined requests in turn); each
//         one is routed and, on a /v1-style route, its body validated.
//   odd:  the rest is the body of one of the four JSON routes (byte / 2 picks it),
//         so the schema is fuzzed without keeping a Content-Length consistent.
// Every outcome must be a response: a route's answer, a 404/405 refusal, or an
// HttpError with a 4xx status, naming the field when the body is a JSON object.
// Any other exception, or a crash, is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "daemon/http_router.hpp"
#include "daemon/json_error.hpp"
#include "daemon/openai_schema.hpp"

namespace http = boost::beast::http;
using namespace inferd::daemon;

namespace {

// As the daemon configures them (http_session.cpp, HttpServerOptions).
constexpr size_t kHeaderLimit = 16 * 1024;
constexpr size_t kBodyLimit = 8 << 20;
constexpr size_t kVocabSize = 49152;  // the default model's
constexpr int kMaxPipelined = 8;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_http: %s\n", what);
  std::abort();
}

// A body that is a JSON object but breaks the schema must be refused naming the
// field at fault (HttpError::param), as docs/HTTP.md promises.
template <class F>
void validate(const Request& r, F&& parse) {
  const boost::json::object body = parse_json_object(r.body);
  try {
    parse(body);
  } catch (const HttpError& e) {
    if (e.param.empty()) fail("a schema error that names no field");
    throw;
  }
}

void chat(const Request& r) { validate(r, [](const auto& b) { (void)openai::parse_chat_request(b); }); }
void completion(const Request& r) { validate(r, [](const auto& b) { (void)openai::parse_completion_request(b); }); }
void tokenize(const Request& r) { validate(r, [](const auto& b) { (void)openai::parse_tokenize_request(b); }); }
void detokenize(const Request& r) {
  validate(r, [](const auto& b) { (void)openai::parse_detokenize_request(b, kVocabSize); });
}
void nothing(const Request&) {}

using Validate = void (*)(const Request&);
constexpr Validate kJsonRoutes[] = {chat, completion, tokenize, detokenize};

// The daemon's routes; the JSON ones validate their body as their handler does
// before it reaches the engine.
const Router& router() {
  static const Router r = [] {
    Router r;
    auto add = [&](std::string method, std::string path, Validate v) {
      r.add(std::move(method), std::move(path), [v](const Request& req, std::shared_ptr<Responder>) { v(req); }, {});
    };
    add("POST", "/v1/chat/completions", chat);
    add("POST", "/v1/completions", completion);
    add("POST", "/tokenize", tokenize);
    add("POST", "/detokenize", detokenize);
    for (const char* path : {"/health/live", "/health/ready", "/metrics", "/v1/models", "/health/generate",
                             "/health_generate", "/admin/fault", "/admin/supervisor", "/admin/warmup"})
      add("GET", path, nothing);
    for (const char* path : {"/admin/fault", "/admin/probe", "/admin/warmup"}) add("POST", path, nothing);
    return r;
  }();
  return r;
}

// Runs `f`; an HttpError must carry a client-error status, anything else thrown aborts.
template <class F>
void expect_4xx(F&& f) {
  try {
    f();
  } catch (const HttpError& e) {
    if (e.status < 400 || e.status > 499) fail("HttpError with a status outside 4xx");
    if (e.what()[0] == '\0') fail("HttpError without a message");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_http: unexpected %s: %s\n", typeid(e).name(), e.what());
    std::abort();
  } catch (...) {
    fail("a non-std exception");
  }
}

void serve(http::request<http::string_body>& msg) {
  Request req;
  req.method = msg.method_string();
  req.target = msg.target();
  const auto q = req.target.find('?');
  req.path = req.target.substr(0, q);
  if (q != std::string::npos) req.query = req.target.substr(q + 1);
  for (const auto& f : msg) req.headers.emplace_back(f.name_string(), f.value());
  req.body = std::move(msg.body());
  const Router::Match m = router().match(req.method, req.path, /*admin=*/false);  // the API listener
  if (!m.route) {
    const Response r = m.refusal(req.method, req.path);
    if (r.status != 404 && r.status != 405) fail("a refusal other than 404 or 405");
    return;
  }
  expect_4xx([&] { m.route->handler(req, nullptr); });
}

void parse_raw(std::string_view bytes) {
  for (int n = 0; n < kMaxPipelined && !bytes.empty(); ++n) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(kHeaderLimit);
    parser.body_limit(kBodyLimit);
    parser.eager(true);
    boost::beast::error_code ec;
    while (!parser.is_done() && !bytes.empty()) {
      const size_t used = parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
      if (used > bytes.size()) fail("the parser consumed more than it was given");
      bytes.remove_prefix(used);
      // need_more: the parser has looked at every byte it was given and waits for
      // more. All the client's bytes are here already, so the request is
      // incomplete and the session would wait. (Offering the same bytes again
      // breaks the parser's contract: it asserts.)
      if (ec == http::error::need_more) return;
      if (ec) return;  // answered 400 and closed
      if (used == 0) break;
    }
    if (!parser.is_done()) {
      parser.put_eof(ec);  // the client closed: only a body read to EOF completes here
      if (ec || !parser.is_done()) return;
    }
    serve(parser.get());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    parse_raw(rest);
  } else {
    Request req;
    req.method = "POST";
    req.body = rest;
    expect_4xx([&] { kJsonRoutes[(data[0] / 2) % 4](req); });
  }
  return 0;
}
