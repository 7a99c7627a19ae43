#include "tools/bench_http.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string_view>
#include <thread>

extern char** environ;

namespace inferd::tools {
namespace {

namespace json = boost::json;

// Splits a server-sent event stream into the payloads of its `data:` lines.
class SseReader {
 public:
  template <class F>
  void feed(std::string_view bytes, F&& on_data) {
    pending_ += bytes;
    size_t nl;
    while ((nl = pending_.find('\n')) != std::string::npos) {
      std::string_view line(pending_.data(), nl);
      if (line.ends_with('\r')) line.remove_suffix(1);
      if (line.starts_with("data:")) {
        line.remove_prefix(5);
        if (line.starts_with(' ')) line.remove_prefix(1);
        on_data(line);
      }
      pending_.erase(0, nl + 1);
    }
  }

 private:
  std::string pending_;
};

std::string error_message(const json::value& v) {
  if (const auto* o = v.if_object())
    if (const auto* e = o->if_contains("error"); e && e->is_object())
      if (const auto* m = e->as_object().if_contains("message"); m && m->is_string()) return std::string(m->as_string());
  return json::serialize(v);
}

// A choice's text: a completion's `text`, or a chat delta's reasoning and content.
std::string choice_text(const json::object& choice) {
  std::string out;
  auto add = [&](const json::object& o, const char* key) {
    if (const auto* t = o.if_contains(key); t && t->is_string()) out += t->as_string();
  };
  add(choice, "text");
  if (const auto* d = choice.if_contains("delta"); d && d->is_object()) {
    add(d->as_object(), "reasoning_content");
    add(d->as_object(), "content");
  }
  return out;
}

std::string first_line_with(const std::string& path, std::string_view key, std::string_view sep) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with(key)) continue;
    const size_t s = line.find(sep);
    if (s == std::string::npos) continue;
    std::string v = line.substr(s + sep.size());
    v.erase(0, v.find_first_not_of(" \t\""));
    while (!v.empty() && (v.back() == '"' || v.back() == ' ')) v.pop_back();
    return v;
  }
  return "unknown";
}

int run_plot(const std::string& who, const std::string& script, const std::string& json_path, const std::string& png) {
  if (run_and_wait({"python3", script, json_path, png}) != 0) {
    std::cerr << who << ": " << script << " failed; the JSON is in " << json_path << "\n";
    return 1;
  }
  std::cerr << "plot: " << png << "\n";
  return 0;
}

}  // namespace

double seconds(BenchClock::duration d) { return std::chrono::duration<double>(d).count(); }

int run_and_wait(std::vector<std::string> argv_s) {
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (int err = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ); err != 0)
    throw std::runtime_error("cannot run " + argv_s[0] + ": " + std::strerror(err));
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int positive_int(std::string_view flag, std::string_view text, int hi) {
  int n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 1 || n > hi)
    throw std::invalid_argument("--" + std::string(flag) + ": expected an integer from 1 to " + std::to_string(hi) +
                                ", got '" + std::string(text) + "'");
  return n;
}

double positive_double(const Args& args, const std::string& flag, double def) {
  const double x = args.get_double(flag, def);
  if (!(x > 0)) throw std::invalid_argument("--" + flag + ": must be greater than 0");
  return x;
}

StreamResult run_streamed(const Url& url, const std::string& path, const json::object& body,
                          std::chrono::milliseconds timeout, const std::string& api_key) {
  StreamResult r;
  SseReader sse;
  std::string raw;  // the start of the body, to explain a non-200 answer
  std::optional<BenchClock::time_point> first;
  bool usage_seen = false, done = false;
  const auto start = BenchClock::now();
  auto on_event = [&](std::string_view data) {
    if (data == "[DONE]") {
      done = true;
      return;
    }
    json::error_code ec;
    const json::value v = json::parse(data, ec);
    if (ec || !v.is_object()) {
      if (r.error.empty()) r.error = "bad SSE data: " + std::string(data.substr(0, 200));
      return;
    }
    const auto& obj = v.as_object();
    if (obj.contains("error")) {
      if (r.error.empty()) r.error = error_message(v);
      return;
    }
    if (const auto* ch = obj.if_contains("choices"); ch && ch->is_array())
      for (const auto& c : ch->as_array()) {
        if (!c.is_object()) continue;
        const std::string text = choice_text(c.as_object());
        if (!text.empty() && !first) first = BenchClock::now();
        r.text += text;
        if (const auto* f = c.as_object().if_contains("finish_reason"); f && f->is_string())
          r.finish_reason = std::string(f->as_string());
      }
    if (const auto* u = obj.if_contains("usage"); u && u->is_object()) {
      const auto& uo = u->as_object();
      if (const auto* n = uo.if_contains("completion_tokens"); n && n->is_int64()) {
        r.completion_tokens = static_cast<int>(n->as_int64());
        usage_seen = true;
      }
      if (const auto* n = uo.if_contains("prompt_tokens"); n && n->is_int64())
        r.prompt_tokens = static_cast<int>(n->as_int64());
    }
  };
  try {
    const HttpReply reply = http_request_streamed(
        url, "POST", path, json::serialize(body),
        [&](std::string_view bytes) {
          if (raw.size() < 2048) raw.append(bytes.substr(0, 2048 - raw.size()));
          sse.feed(bytes, on_event);
        },
        timeout, api_key);
    const auto end = BenchClock::now();
    r.e2e_s = seconds(end - start);
    if (reply.status != 200) {
      json::error_code ec;
      const json::value v = json::parse(raw, ec);
      r.error = "HTTP " + std::to_string(reply.status) + ": " + (ec ? raw.substr(0, 200) : error_message(v));
      return r;
    }
    if (r.error.empty() && !done) r.error = "the stream ended without [DONE]";
    if (r.error.empty() && !usage_seen) r.error = "the stream carried no usage (stream_options.include_usage)";
    if (r.error.empty() && !first) r.error = "the stream carried no text";
    if (!r.error.empty()) return r;
    r.ttft_s = seconds(*first - start);
    if (const double decode = seconds(end - *first); r.completion_tokens > 1 && decode > 0)
      r.decode_tps = (r.completion_tokens - 1) / decode;
    r.ok = true;
  } catch (const std::exception& e) {
    r.e2e_s = seconds(BenchClock::now() - start);
    r.error = e.what();
  }
  return r;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

json::value stat(const std::vector<double>& v) {
  if (v.empty()) return nullptr;
  return json::object{{"mean", mean(v)}, {"p50", percentile(v, 50)}, {"p99", percentile(v, 99)}};
}

json::object machine() {
  return {{"cpu", first_line_with("/proc/cpuinfo", "model name", ":")},
          {"cores", std::thread::hardware_concurrency()},
          {"memory", first_line_with("/proc/meminfo", "MemTotal", ":")},
          {"os", first_line_with("/etc/os-release", "PRETTY_NAME", "=")}};
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void wait_ready(const Url& url, std::chrono::milliseconds timeout) {
  const auto deadline = BenchClock::now() + timeout;
  std::string last;
  for (;;) {
    try {
      const HttpReply r = http_request(url, "GET", "/health/ready", {}, std::chrono::seconds(5));
      if (r.status == 200) return;
      last = "/health/ready answered " + std::to_string(r.status);
    } catch (const std::runtime_error& e) {
      last = e.what();
    }
    if (BenchClock::now() >= deadline)
      throw std::runtime_error("the daemon was not ready within " + std::to_string(timeout.count() / 1000) +
                               " s: " + last);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

json::object served_model(const Url& url, const std::string& api_key) {
  const HttpReply r = http_request(url, "GET", "/v1/models", {}, std::chrono::seconds(10), api_key);
  if (r.status == 401) throw std::runtime_error("/v1/models answered 401: pass the daemon's key with --api-key");
  json::error_code ec;
  const json::value v = json::parse(r.body, ec);
  if (r.status != 200 || ec || !v.is_object())
    throw std::runtime_error("/v1/models answered " + std::to_string(r.status) + ": " + r.body.substr(0, 200));
  const auto* data = v.as_object().if_contains("data");
  if (!data || !data->is_array() || data->as_array().empty() || !data->as_array().front().is_object())
    throw std::runtime_error("/v1/models lists no model");
  return data->as_array().front().as_object();
}

std::string model_id(const json::object& model) {
  const auto* id = model.if_contains("id");
  return id && id->is_string() ? std::string(id->as_string()) : "";
}

int max_model_len(const json::object& model) {
  const auto* m = model.if_contains("max_model_len");
  return m && m->is_int64() ? static_cast<int>(m->as_int64()) : 0;
}

json::object model_summary(const json::object& model) {
  json::object out{{"id", model_id(model)}};
  for (const char* key : {"max_model_len", "root"})
    if (const auto* v = model.if_contains(key)) out[key] = *v;
  return out;
}

std::string metrics_text(const Url& url) {
  const HttpReply r = http_request(url, "GET", "/metrics", {}, std::chrono::seconds(10));
  if (r.status != 200) throw std::runtime_error("/metrics answered " + std::to_string(r.status));
  return r.body;
}

std::optional<double> metric_sum(const std::string& metrics, const std::string& name) {
  std::optional<double> sum;
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with(name) || line.size() == name.size()) continue;
    const char next = line[name.size()];
    if (next != '{' && next != ' ') continue;  // another series sharing the prefix
    const size_t value_at = line.rfind(' ');
    sum = sum.value_or(0) + std::strtod(line.c_str() + value_at + 1, nullptr);
  }
  return sum;
}

std::map<std::string, double> metric_by_label(const std::string& metrics, const std::string& name,
                                              const std::string& label) {
  std::map<std::string, double> by;
  const std::string key = label + "=\"";
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with(name + "{")) continue;
    const size_t at = line.find(key, name.size());
    const size_t end = at == std::string::npos ? at : line.find('"', at + key.size());
    if (end == std::string::npos) continue;
    by[line.substr(at + key.size(), end - at - key.size())] += std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
  }
  return by;
}

int write_and_plot(const std::string& who, const json::object& doc, const std::string& out, const std::string& png,
                   const std::string& script) {
  const std::string text = json::serialize(doc) + "\n";
  std::string json_path = out;
  if (!out.empty()) {
    std::ofstream f(out);
    if (!(f << text)) throw std::runtime_error("cannot write " + out);
  } else {
    std::cout << text << std::flush;
  }
  if (png.empty()) return 0;
  if (json_path.empty()) {  // the plot script reads a file
    char tmpl[] = "/tmp/inferctl-bench-XXXXXX.json";
    const int fd = mkstemps(tmpl, 5);
    if (fd < 0) throw std::runtime_error("cannot create a temporary file for the plot");
    close(fd);
    json_path = tmpl;
    std::ofstream(json_path) << text;
  }
  const int rc = run_plot(who, script, json_path, png);
  if (out.empty() && rc == 0) std::remove(json_path.c_str());
  return rc;
}

}  // namespace inferd::tools
