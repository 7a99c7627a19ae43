// `inferctl proof`: the gates a deployment must pass before it is called good,
// run against a running daemon after every deploy. Each gate checks one thing
// end to end through the daemon's own API; a table goes to stdout, JSON to
// --out, and the exit status is 1 when any gate failed.
//   readiness     Serving, the last warm-up passed covering every shape key, no cold shape since
//   probe         the supervisor's generation probe answers its golden text
//   long_context  a nonce buried in filler that fills the context is returned exactly
//   tool_call     a weather tool is called with valid arguments, and the answer after
//                 the tool's result uses it
//   json_schema   20 requests under a strict nested JSON schema all validate
//   restart       --restart-command (or systemctl restart --systemd-unit) brings it back
//                 Serving with a new process, the probe passing, no error lines after its baseline
//   integrity     the daemon verified the model's checksum manifest (models without one: skipped)
//   memory        MemAvailable above the shed floor and memory pressure (PSI some avg10)
//                 within --max-memory-psi, sampled before and after every other gate
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "tools/bench_http.hpp"
#include "tools/http_client.hpp"
#include "tools/inferctl_commands.hpp"

namespace inferd::tools {
namespace {

namespace json = boost::json;

constexpr const char* kUsage =
    "usage: inferctl proof [--url http://127.0.0.1:8000] [--api-key KEY]\n"
    "         [--admin-url URL] [--admin-api-key KEY]\n"
    "         [--gates readiness,probe,long_context,tool_call,json_schema,integrity,restart,memory]\n"
    "         [--restart-command CMD | --systemd-unit UNIT] [--max-memory-psi PERCENT]\n"
    "         [--ready-timeout SECONDS] [--timeout SECONDS] [--out FILE]\n"
    "Runs each gate against a running daemon, prints a table, writes JSON to --out and\n"
    "exits 1 when a gate failed (2 on bad flags). Gates:\n"
    "  readiness     state Serving; the last warm-up passed with every shape key covered;\n"
    "                no cold shape since\n"
    "  probe         the generation probe (POST /admin/probe at --admin-url) passes\n"
    "  long_context  a nonce in filler that fills the context to within 64 tokens of\n"
    "                max_model_len is returned exactly; prompt_tokens is reported\n"
    "  tool_call     after two turns that answered weather questions with calls, the next\n"
    "                question gets a get_weather call with valid arguments; given the\n"
    "                tool's result, the answer repeats it\n"
    "  json_schema   20 requests (4 at a time) under a strict nested schema finish with\n"
    "                stop and validate against it (checked here, not by the daemon)\n"
    "  restart       runs --restart-command with /bin/sh (or `systemctl restart UNIT`),\n"
    "                then: ready within --ready-timeout, a new process (uptime reset),\n"
    "                the probe passes, no error lines after the new baseline. Without\n"
    "                either flag the gate fails, naming them.\n"
    "  integrity     the daemon verified the model's files against a checksum manifest\n"
    "                before loading (SHA256SUMS, NAME.gguf.sha256, --model-manifest); none: skipped\n"
    "  memory        MemAvailable above the daemon's shed floor and memory PSI some avg10\n"
    "                at most --max-memory-psi (10), sampled around every gate\n"
    "Admin routes are asked at --admin-url (default --url; the admin listener needs no key)\n"
    "with --admin-api-key when the daemon has one.\n";

const std::vector<std::string> kGates = {"readiness", "probe",     "long_context", "tool_call",
                                         "json_schema", "integrity", "restart",      "memory"};

struct Options {
  Url url, admin_url;
  std::string api_key, admin_api_key;
  std::vector<std::string> gates;
  std::string restart_command;
  double max_memory_psi = 10;
  std::chrono::milliseconds ready_timeout{}, timeout{};
  std::string out;
};

Options parse_options(const Args& args) {
  args.allow_only({"url", "api-key", "admin-url", "admin-api-key", "gates", "restart-command", "systemd-unit",
                   "max-memory-psi", "ready-timeout", "timeout", "out", "help"});
  if (!args.positional.empty())
    throw std::invalid_argument("unexpected argument '" + args.positional[0] + "' (see --help)");
  for (const char* f : {"url", "api-key", "admin-url", "admin-api-key", "gates", "restart-command", "systemd-unit", "out"})
    if (args.has(f) && args.get(f, "") == "true") throw std::invalid_argument(std::string("--") + f + ": missing value");
  Options o;
  o.url = parse_url(args.get("url", "http://127.0.0.1:8000"));
  o.admin_url = args.has("admin-url") ? parse_url(args.get("admin-url", "")) : o.url;
  o.api_key = args.get("api-key", "");
  o.admin_api_key = args.get("admin-api-key", "");
  o.gates = args.get_list("gates", kGates);
  for (const auto& g : o.gates)
    if (std::find(kGates.begin(), kGates.end(), g) == kGates.end())
      throw std::invalid_argument("--gates: unknown gate '" + g +
                                  "' (readiness, probe, long_context, tool_call, json_schema, integrity, restart, "
                                  "memory)");
  if (args.has("restart-command") && args.has("systemd-unit"))
    throw std::invalid_argument("--restart-command and --systemd-unit: give one of them");
  o.restart_command = args.has("systemd-unit") ? "systemctl restart '" + args.get("systemd-unit", "") + "'"
                                               : args.get("restart-command", "");
  o.max_memory_psi = args.get_double("max-memory-psi", 10);
  if (!(o.max_memory_psi >= 0 && o.max_memory_psi <= 100))
    throw std::invalid_argument("--max-memory-psi: expected a percentage from 0 to 100");
  o.ready_timeout = std::chrono::milliseconds(std::lround(positive_double(args, "ready-timeout", 300) * 1000));
  o.timeout = std::chrono::milliseconds(std::lround(positive_double(args, "timeout", 600) * 1000));
  o.out = args.get("out", "");
  return o;
}

struct Gate {
  std::string name;
  std::string result;  // "pass", "FAIL" or "skipped"
  std::string detail;
  double seconds = 0;
  json::object data;
};

Gate pass(std::string detail, json::object data = {}) { return {"", "pass", std::move(detail), 0, std::move(data)}; }
Gate fail(std::string detail, json::object data = {}) { return {"", "FAIL", std::move(detail), 0, std::move(data)}; }

json::value parse_body(const HttpReply& r) {
  json::error_code ec;
  json::value v = json::parse(r.body, ec);
  return ec ? json::value(nullptr) : v;
}

std::string fmt(double x, int digits = 0) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

// --- readiness -------------------------------------------------------------

Gate readiness(const Options& o) {
  const HttpReply r = http_request(o.url, "GET", "/health/ready", {}, std::chrono::seconds(10));
  const json::value v = parse_body(r);
  const std::string state = v.is_object() && v.as_object().contains("state") && v.at("state").is_string()
                                ? std::string(v.at("state").as_string())
                                : "unknown";
  const std::string m = metrics_text(o.url);
  const double total = metric_sum(m, "inferd_warmup_keys_total").value_or(0);
  const double covered = metric_sum(m, "inferd_warmup_keys_covered").value_or(0);
  const double cold = metric_sum(m, "inferd_cold_shapes_total").value_or(0);
  json::object data{{"state", state}, {"warmup_keys_total", total}, {"warmup_keys_covered", covered},
                    {"cold_shapes", cold}};
  const std::string keys = fmt(covered) + "/" + fmt(total) + " shape keys warmed, " + fmt(cold) + " cold shapes";
  if (r.status != 200 || state != "Serving") return fail("state " + state + " (/health/ready " + std::to_string(r.status) + ")", data);
  if (total <= 0) return fail("no warm-up has run (inferd_warmup_keys_total 0): start without --no-warmup", data);
  if (covered < total) return fail(keys + ": the warm-up did not cover every key", data);
  if (cold > 0) return fail(keys + ": traffic reached shapes the warm-up missed", data);
  return pass("Serving; " + keys, data);
}

// --- probe -----------------------------------------------------------------

Gate probe(const Options& o) {
  const HttpReply r = http_request(o.admin_url, "POST", "/admin/probe", {}, std::chrono::seconds(120), o.admin_api_key);
  const json::value v = parse_body(r);
  if (r.status == 401 || r.status == 403)
    return fail("/admin/probe answered " + std::to_string(r.status) + ": give --admin-api-key or --admin-url");
  // A failed probe answers 503 with the same report.
  if (!v.is_object() || !v.as_object().contains("ok"))
    return fail("/admin/probe answered " + std::to_string(r.status) + ": " + r.body.substr(0, 200));
  const auto& p = v.as_object();
  json::object data{{"answer", p.contains("text") ? p.at("text") : json::value(nullptr)},
                    {"probe_seconds", p.contains("seconds") ? p.at("seconds") : json::value(nullptr)}};
  const bool ok = p.contains("ok") && p.at("ok").is_bool() && p.at("ok").as_bool();
  const std::string reason = p.contains("reason") && p.at("reason").is_string() ? std::string(p.at("reason").as_string()) : "";
  if (!ok) return fail("the generation probe failed: " + reason, data);
  return pass("the generation probe answered its golden text", data);
}

// --- long context ------------------------------------------------------------

int count_tokens(const Options& o, const std::string& text) {
  const HttpReply r = http_request(o.url, "POST", "/tokenize", json::serialize(json::object{{"prompt", text}}),
                                   std::chrono::seconds(60), o.api_key);
  const json::value v = parse_body(r);
  if (r.status != 200 || !v.is_object() || !v.as_object().contains("tokens") || !v.at("tokens").is_array())
    throw std::runtime_error("/tokenize answered " + std::to_string(r.status) + ": " + r.body.substr(0, 200));
  return static_cast<int>(v.at("tokens").as_array().size());
}

Gate long_context(const Options& o, int max_model_len) {
  static const char* kFiller[] = {
      "The river flows past the old mill and the fields beyond it.",
      "Farmers bring their grain to the market every Tuesday morning.",
      "The weather in the valley is mild for most of the year.",
      "Children walk to the village school along the northern road.",
      "A small bridge crosses the stream near the church.",
  };
  std::mt19937 rng(std::random_device{}());
  const std::string nonce = std::to_string(1000 + rng() % 9000) + "-" + std::to_string(1000 + rng() % 9000);
  const std::string question = "\n\nWhat is the secret key? Answer with the key only.";
  constexpr int kAnswerTokens = 24, kMargin = 64;  // the answer and the chat template's tokens
  const int target = max_model_len - kMargin - kAnswerTokens;
  // n filler sentences with the key's sentence in the middle, then the question.
  auto build = [&](int n) {
    std::string t;
    for (int i = 0; i < n; ++i) {
      if (i == n / 2) t += "The secret key is " + nonce + ". ";
      t += kFiller[i % 5];
      t += ' ';
    }
    return t + question;
  };
  // Sized with the daemon's own tokenizer: a first guess from 16 sentences, then
  // down in steps until it fits and up one sentence at a time while it does.
  const int per16 = count_tokens(o, build(16));
  int n = std::max(1, 16 * target / std::max(per16, 1));
  for (int guard = 0; count_tokens(o, build(n)) > target; ++guard) {
    if (n == 1 || guard > 200) return fail("max_model_len " + std::to_string(max_model_len) + " leaves no room for the filler");
    n = std::max(1, n - std::max(1, n / 50));
  }
  for (int guard = 0; guard < 200 && count_tokens(o, build(n + 1)) <= target; ++guard) ++n;
  const std::string prompt = build(n);
  const json::object body{{"messages", json::array{json::object{{"role", "user"}, {"content", prompt}}}},
                          {"max_tokens", kAnswerTokens},
                          {"temperature", 0.0}};
  const HttpReply r =
      http_request(o.url, "POST", "/v1/chat/completions", json::serialize(body), o.timeout, o.api_key);
  const json::value v = parse_body(r);
  if (r.status != 200 || !v.is_object()) return fail("the request answered " + std::to_string(r.status) + ": " + r.body.substr(0, 200));
  const auto& c = v.at("choices").as_array().at(0).at("message").as_object();
  const std::string answer = c.contains("content") && c.at("content").is_string() ? std::string(c.at("content").as_string()) : "";
  const auto prompt_tokens = v.at("usage").at("prompt_tokens").to_number<int64_t>();
  json::object data{{"nonce", nonce}, {"answer", answer}, {"prompt_tokens", prompt_tokens},
                    {"max_model_len", max_model_len}};
  const std::string where = std::to_string(prompt_tokens) + " prompt tokens of " + std::to_string(max_model_len);
  if (answer.find(nonce) == std::string::npos) return fail("the key " + nonce + " was not returned (" + where + "): '" + answer + "'", data);
  return pass("the key came back exactly from " + where, data);
}

// --- tool call -----------------------------------------------------------------

json::value chat(const Options& o, const json::object& body) {
  const HttpReply r = http_request(o.url, "POST", "/v1/chat/completions", json::serialize(body), o.timeout, o.api_key);
  json::value v = parse_body(r);
  if (r.status != 200 || !v.is_object())
    throw std::runtime_error("/v1/chat/completions answered " + std::to_string(r.status) + ": " + r.body.substr(0, 300));
  return v;
}

Gate tool_call(const Options& o) {
  const json::value weather = json::parse(R"({"type": "function", "function": {"name": "get_weather",
      "description": "The current weather in a city", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}})");
  auto ask = [](const std::string& city) {
    return json::object{{"role", "user"}, {"content", "What is the weather in " + city + "?"}};
  };
  auto called = [](const std::string& id, const std::string& city) {
    return json::object{{"role", "assistant"}, {"content", nullptr},
                        {"tool_calls", json::array{json::object{
                                           {"id", id}, {"type", "function"},
                                           {"function", {{"name", "get_weather"},
                                                         {"arguments", json::serialize(json::object{{"city", city}})}}}}}}};
  };
  // Two turns answered with calls, then the question the model must answer with one.
  json::array messages{ask("Paris"), called("call_1", "Paris"), ask("Rome"), called("call_2", "Rome"), ask("Madrid")};
  json::object body{{"messages", messages}, {"tools", json::array{weather}}, {"max_tokens", 100}, {"temperature", 0.0}};
  const json::value first = chat(o, body);
  const auto& choice = first.at("choices").as_array().at(0).as_object();
  const auto& message = choice.at("message").as_object();
  json::object data{{"finish_reason", choice.at("finish_reason")}, {"message", message}};
  const json::value* calls = message.if_contains("tool_calls");
  if (!calls || !calls->is_array() || calls->as_array().empty())
    return fail("no tool call: the model answered '" + (message.contains("content") && message.at("content").is_string()
                                                             ? std::string(message.at("content").as_string())
                                                             : std::string()) + "'",
                data);
  const auto& call = calls->as_array().at(0).as_object();
  const auto& fn = call.at("function").as_object();
  if (fn.at("name") != "get_weather") return fail("the call names '" + json::serialize(fn.at("name")) + "'", data);
  json::error_code ec;
  const json::value args = json::parse(fn.at("arguments").as_string(), ec);
  if (ec || !args.is_object() || !args.as_object().contains("city") || !args.at("city").is_string() ||
      args.as_object().size() != 1)
    return fail("arguments that do not match the tool's parameters: " + std::string(fn.at("arguments").as_string()), data);
  // The tool's result goes back; the answer must use it.
  const std::string result = "Sunny, 31 degrees";
  messages.push_back(json::object{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array{call}}});
  messages.push_back(json::object{{"role", "tool"}, {"tool_call_id", call.at("id")}, {"content", result}});
  body["messages"] = messages;
  body["max_tokens"] = 40;
  const json::value second = chat(o, body);
  const auto& answer_msg = second.at("choices").as_array().at(0).at("message").as_object();
  const std::string answer =
      answer_msg.contains("content") && answer_msg.at("content").is_string() ? std::string(answer_msg.at("content").as_string()) : "";
  data["arguments"] = args;
  data["answer"] = answer;
  if (answer.find("31 degrees") == std::string::npos)
    return fail("given the tool's result '" + result + "', the answer did not use it: '" + answer + "'", data);
  return pass("get_weather(" + json::serialize(args) + "), and the answer used its result", data);
}

// --- json schema ------------------------------------------------------------------

// What is wrong with `v` under `schema`, or empty: the keywords the gate's schema
// uses, checked here so that the check does not rest on the daemon's own grammar.
std::string violation(const json::value& v, const json::object& schema, const std::string& at) {
  const std::string type = schema.contains("type") ? std::string(schema.at("type").as_string()) : "";
  if (type == "object") {
    if (!v.is_object()) return at + ": not an object";
    const auto& props = schema.at("properties").as_object();
    for (const auto& r : schema.at("required").as_array())
      if (!v.as_object().contains(r.as_string())) return at + ": '" + std::string(r.as_string()) + "' is missing";
    for (const auto& [k, x] : v.as_object()) {
      if (!props.contains(k)) return at + ": '" + std::string(k) + "' is not a property";
      if (auto e = violation(x, props.at(k).as_object(), at + "." + std::string(k)); !e.empty()) return e;
    }
  } else if (type == "array") {
    if (!v.is_array()) return at + ": not an array";
    if (schema.contains("maxItems") && v.as_array().size() > schema.at("maxItems").to_number<size_t>())
      return at + ": too many items";
    for (size_t i = 0; i < v.as_array().size(); ++i)
      if (auto e = violation(v.as_array()[i], schema.at("items").as_object(), at + "[" + std::to_string(i) + "]");
          !e.empty())
        return e;
  } else if (type == "string") {
    if (!v.is_string()) return at + ": not a string";
    if (schema.contains("maxLength") && v.as_string().size() > schema.at("maxLength").to_number<size_t>())
      return at + ": longer than maxLength";  // bytes bound characters from above
  } else if (type == "integer") {
    if (!v.is_int64() && !v.is_uint64()) return at + ": not an integer";
  } else if (type == "boolean") {
    if (!v.is_bool()) return at + ": not a boolean";
  }
  if (schema.contains("enum")) {
    const auto& e = schema.at("enum").as_array();
    if (std::find(e.begin(), e.end(), v) == e.end()) return at + ": not one of the enum's values";
  }
  return "";
}

Gate json_schema(const Options& o) {
  const json::value schema = json::parse(R"({"type": "object", "additionalProperties": false,
      "required": ["title", "year", "author", "genres", "in_print"],
      "properties": {
        "title": {"type": "string", "maxLength": 60},
        "year": {"type": "integer"},
        "author": {"type": "object", "additionalProperties": false, "required": ["name", "country"],
                   "properties": {"name": {"type": "string", "maxLength": 40},
                                  "country": {"type": "string", "maxLength": 40}}},
        "genres": {"type": "array", "maxItems": 3,
                   "items": {"type": "string", "enum": ["novel", "poetry", "history", "science", "drama"]}},
        "in_print": {"type": "boolean"}}})");
  static const char* kBooks[] = {"War and Peace", "The Odyssey", "A Brief History of Time", "Hamlet", "Don Quixote"};
  constexpr int kRequests = 20, kAtOnce = 4;
  std::vector<std::string> problems(kRequests);
  std::vector<json::value> outputs(kRequests);
  std::vector<std::thread> clients;
  std::atomic<int> next{0};
  for (int c = 0; c < kAtOnce; ++c)
    clients.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < kRequests;) {
        try {
          const json::object body{
              {"messages", json::array{json::object{{"role", "user"},
                                                    {"content", std::string("Describe the book ") + kBooks[i % 5] +
                                                                    " as JSON."}}}},
              {"max_tokens", 200},
              {"temperature", i < kRequests / 2 ? 0.0 : 0.8},
              {"seed", i},
              {"response_format",
               {{"type", "json_schema"}, {"json_schema", {{"name", "book"}, {"strict", true}, {"schema", schema}}}}}};
          const json::value r = chat(o, body);
          const auto& choice = r.at("choices").as_array().at(0).as_object();
          const std::string text(choice.at("message").at("content").as_string());
          if (choice.at("finish_reason") != "stop") {
            problems[i] = "finished with " + json::serialize(choice.at("finish_reason")) + ": " + text.substr(0, 120);
            continue;
          }
          json::error_code ec;
          outputs[i] = json::parse(text, ec);
          problems[i] = ec ? "not JSON: " + text.substr(0, 120) : violation(outputs[i], schema.as_object(), "$");
        } catch (const std::exception& e) {
          problems[i] = e.what();
        }
      }
    });
  for (auto& t : clients) t.join();
  int valid = 0;
  std::string first_problem;
  for (int i = 0; i < kRequests; ++i) {
    if (problems[i].empty()) ++valid;
    else if (first_problem.empty()) first_problem = "request " + std::to_string(i) + ": " + problems[i];
  }
  json::object data{{"requests", kRequests}, {"valid", valid}, {"example", outputs[0]}};
  if (valid < kRequests)
    return fail(std::to_string(kRequests - valid) + " of " + std::to_string(kRequests) + " outputs invalid; " + first_problem,
                data);
  return pass(std::to_string(valid) + "/" + std::to_string(kRequests) + " outputs validate (greedy and sampled, 4 at a time)",
              data);
}

// --- restart -----------------------------------------------------------------

// Error lines (NCCL, UCX, CUDA, ibverbs, OOM) the daemon logged since it took its baseline.
double error_lines_after_baseline(const Options& o) {
  const std::string m = metrics_text(o.url);
  double n = 0;
  for (const char* c : {"nccl", "ucx", "cuda", "ibverbs", "oom"})
    n += metric_sum(m, std::string("inferd_log_lines_total{category=\"") + c + "\",baseline=\"after\"}").value_or(0);
  return n;
}

Gate restart(const Options& o) {
  if (o.restart_command.empty())
    return fail("no way to restart the daemon: give --systemd-unit UNIT or --restart-command CMD");
  const double uptime_before = metric_sum(metrics_text(o.url), "inferd_uptime_seconds").value_or(0);
  const auto start = BenchClock::now();
  if (const int rc = run_and_wait({"/bin/sh", "-c", o.restart_command}); rc != 0)
    return fail("`" + o.restart_command + "` exited with " + std::to_string(rc));
  // A command may return before the old process has gone: wait until a new one answers.
  std::optional<double> uptime;
  const auto deadline = start + o.ready_timeout;
  for (;;) {
    try {
      const double u = metric_sum(metrics_text(o.url), "inferd_uptime_seconds").value_or(1e300);
      if (u < uptime_before + seconds(BenchClock::now() - start) - 0.5) {
        uptime = u;
        break;
      }
    } catch (const std::runtime_error&) {  // not listening yet
    }
    if (BenchClock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  if (!uptime) return fail("no new process answered within " + fmt(o.ready_timeout.count() / 1000.0) + " s of the restart");
  wait_ready(o.url, std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::max(deadline - BenchClock::now(), BenchClock::duration(std::chrono::seconds(1)))));
  const double to_ready = seconds(BenchClock::now() - start);
  Gate p = probe(o);
  const double errors = error_lines_after_baseline(o);
  json::object data{{"command", o.restart_command}, {"ready_after_s", to_ready}, {"probe", p.result},
                    {"error_lines_after_baseline", errors}};
  if (p.result != "pass") return fail("restarted and ready in " + fmt(to_ready, 1) + " s, but " + p.detail, data);
  if (errors > 0) return fail(fmt(errors) + " error lines after the restarted daemon's baseline", data);
  return pass("ready again " + fmt(to_ready, 1) + " s after the restart; probe passed; no error lines", data);
}

// --- integrity -----------------------------------------------------------------

// The daemon checks the model against its checksum manifest before loading and
// reports the result in its /v1/models entry; a daemon that did not check says
// nothing, and that fails.
Gate integrity(const json::object& model) {
  const std::string root = model.contains("root") && model.at("root").is_string() ? std::string(model.at("root").as_string()) : "";
  const std::string what = root.empty() ? "its model" : root;
  const auto* i = model.if_contains("integrity");
  if (!i || !i->is_object()) return fail("this daemon does not report a checkpoint integrity check for " + what);
  const json::object& o = i->as_object();
  const auto* status = o.if_contains("status");
  const std::string s = status && status->is_string() ? std::string(status->as_string()) : "";
  json::object data{{"model", root}, {"integrity", o}};
  if (s == "no_manifest")
    return {"", "skipped", "no checksum manifest for " + what + " (SHA256SUMS, NAME.gguf.sha256 or --model-manifest)", 0,
            data};
  if (s != "verified") return fail("the daemon reports integrity status '" + s + "' for " + what, data);
  auto num = [&](const char* k) {
    const auto* v = o.if_contains(k);
    return v && v->is_number() ? v->to_number<double>() : 0.0;
  };
  const auto* manifest = o.if_contains("manifest");
  return pass(fmt(num("files")) + (num("files") == 1 ? " file (" : " files (") + fmt(num("bytes") / (1 << 20), 1) + " MiB) match " +
                  (manifest && manifest->is_string() ? std::string(manifest->as_string()) : "the manifest") +
                  ", verified before the load in " + fmt(num("seconds"), 2) + " s",
              data);
}

// --- memory ----------------------------------------------------------------------

struct MemorySample {
  double available = 0, floor = 0, psi = 0;
};

MemorySample sample_memory(const Options& o) {
  const std::string m = metrics_text(o.url);
  return {metric_sum(m, "inferd_mem_available_bytes").value_or(-1),
          metric_sum(m, "inferd_mem_shed_floor_bytes").value_or(0),
          metric_sum(m, "inferd_psi_percent{resource=\"memory\",kind=\"some\",window=\"avg10\"}").value_or(0)};
}

Gate memory(const Options& o, const std::vector<MemorySample>& samples) {
  double least = 1e300, most_psi = 0;
  std::string broke;
  for (const auto& s : samples) {
    least = std::min(least, s.available);
    most_psi = std::max(most_psi, s.psi);
    if (broke.empty() && s.available >= 0 && s.available < s.floor)
      broke = "MemAvailable " + fmt(s.available / (1 << 20)) + " MiB below the shed floor " + fmt(s.floor / (1 << 20)) + " MiB";
    if (broke.empty() && s.psi > o.max_memory_psi)
      broke = "memory pressure some avg10 " + fmt(s.psi, 2) + "% above " + fmt(o.max_memory_psi, 2) + "%";
  }
  json::object data{{"samples", samples.size()}, {"least_mem_available_bytes", least}, {"most_memory_psi_some_avg10", most_psi}};
  if (samples.empty() || least < 0) return fail("the daemon exports no MemAvailable (is its supervisor off?)", data);
  if (!broke.empty()) return fail(broke, data);
  return pass("MemAvailable at least " + fmt(least / (1 << 30), 2) + " GiB, memory PSI at most " + fmt(most_psi, 2) + "% over " +
                  std::to_string(samples.size()) + " samples",
              data);
}

bool wants(const Options& o, const std::string& gate) {
  return std::find(o.gates.begin(), o.gates.end(), gate) != o.gates.end();
}

}  // namespace

int cmd_proof(const Args& args) {
  if (args.has("help")) {
    std::cout << kUsage;
    return 0;
  }
  const Options o = parse_options(args);
  wait_ready(o.url, o.ready_timeout);
  const json::object model = served_model(o.url, o.api_key);
  const int context = max_model_len(model);

  std::vector<Gate> gates;
  std::vector<MemorySample> mem;
  auto sample = [&] {
    try {
      mem.push_back(sample_memory(o));
    } catch (const std::runtime_error&) {  // the daemon is restarting
    }
  };
  sample();
  auto run = [&](const std::string& name, auto&& fn) {
    if (!wants(o, name)) return;
    const auto start = BenchClock::now();
    Gate g;
    try {
      g = fn();
    } catch (const std::exception& e) {
      g = fail(e.what());
    }
    g.name = name;
    g.seconds = seconds(BenchClock::now() - start);
    gates.push_back(std::move(g));
    sample();
  };
  run("readiness", [&] { return readiness(o); });
  run("probe", [&] { return probe(o); });
  run("long_context", [&] {
    if (context <= 0) return fail("/v1/models reports no max_model_len");
    return long_context(o, context);
  });
  run("tool_call", [&] { return tool_call(o); });
  run("json_schema", [&] { return json_schema(o); });
  run("integrity", [&] { return integrity(model); });
  run("restart", [&] { return restart(o); });  // last but memory: what follows meets the new process
  run("memory", [&] { return memory(o, mem); });

  int failed = 0;
  json::array rows;
  std::printf("%-13s %-7s %8s  %s\n", "gate", "result", "seconds", "detail");
  for (const auto& g : gates) {
    failed += g.result == "FAIL";
    std::printf("%-13s %-7s %8.1f  %s\n", g.name.c_str(), g.result.c_str(), g.seconds, g.detail.c_str());
    rows.push_back(json::object{{"gate", g.name}, {"result", g.result}, {"detail", g.detail}, {"seconds", g.seconds}, {"data", g.data}});
  }
  std::printf("%s: %d of %zu gates failed\n", failed ? "FAILED" : "PASSED", failed, gates.size());
  std::fflush(stdout);
  if (!o.out.empty()) {
    const json::object doc{{"proof", "inferctl proof"},
                           {"date", utc_now()},
                           {"url", o.url.text()},
                           {"machine", machine()},
                           {"model", model},
                           {"passed", failed == 0},
                           {"gates", rows}};
    if (write_and_plot("inferctl proof", doc, o.out, "", "") != 0) return 1;
  }
  return failed ? 1 : 0;
}

}  // namespace inferd::tools
