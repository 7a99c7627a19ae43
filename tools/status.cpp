// `inferctl status`: where a running daemon stands: lifecycle state, activity
// (load or warm-up progress, shedding, recovery), the model load, uptime and the served model, read from
// /health/ready, /metrics and /v1/models; and, where /admin/supervisor answers
// (with --admin-api-key, or at --admin-url on the admin listener), the monitors
// and the supervisor's last decision; for the head of a tensor-parallel group,
// a line per rank.
// Exit 0 when the daemon answered, 1 when it could not be reached.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include "tools/http_client.hpp"
#include "tools/inferctl_commands.hpp"

namespace inferd::tools {

namespace {

constexpr const char* kUsage =
    "usage: inferctl status [--url http://127.0.0.1:8000] [--timeout SECONDS] [--api-key KEY]\n"
    "                       [--admin-url URL] [--admin-api-key KEY]\n"
    "Prints the daemon's lifecycle state, activity, model load, uptime, served model and health;\n"
    "at the head of a tensor-parallel group, each rank (joined, steps, last heard, health,\n"
    "fabric choice).\n"
    "Health comes from /admin/supervisor, asked at --admin-url (default: --url; the daemon's\n"
    "admin listener needs no key) with --admin-api-key when the daemon has an admin key.\n";

// The value of an unlabelled sample, e.g. "inferd_uptime_seconds 12.5".
std::optional<double> metric_value(const std::string& text, std::string_view name) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.size() > name.size() && line.starts_with(name) && line[name.size()] == ' ') {
      try {
        return std::stod(line.substr(name.size() + 1));
      } catch (const std::exception&) {
        return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

// Each sample of `name` by its one label's value, e.g. inferd_tp_rank_joined{rank="1"} 1.
std::map<std::string, double> labeled_values(const std::string& text, std::string_view name, std::string_view label) {
  const std::string head = std::string(name) + "{" + std::string(label) + "=\"";
  std::map<std::string, double> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.starts_with(head)) continue;
    const auto end = line.find("\"} ", head.size());
    if (end == std::string::npos) continue;
    try {
      out[line.substr(head.size(), end - head.size())] = std::stod(line.substr(end + 3));
    } catch (const std::exception&) {
    }
  }
  return out;
}

// inferd_tp_rank_fabric{rank="1",choice="interface ..."} 1 -> {"1": "interface ..."}.
std::map<std::string, std::string> rank_fabric(const std::string& text) {
  const std::string head = "inferd_tp_rank_fabric{rank=\"", mid = "\",choice=\"";
  std::map<std::string, std::string> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.starts_with(head)) continue;
    const auto m = line.find(mid, head.size());
    const auto end = line.rfind("\"}");
    if (m == std::string::npos || end == std::string::npos || end < m) continue;
    out[line.substr(head.size(), m - head.size())] = line.substr(m + mid.size(), end - m - mid.size());
  }
  return out;
}

std::string format_duration(double s) {
  if (s < 60) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1fs", s);
    return buf;
  }
  long total = std::lround(s);
  const long d = total / 86400, h = total % 86400 / 3600, m = total % 3600 / 60, sec = total % 60;
  std::string out;
  if (d) out += std::to_string(d) + "d ";
  if (d || h) out += std::to_string(h) + "h ";
  out += std::to_string(m) + "m " + std::to_string(sec) + "s";
  return out;
}

// "94 MiB in 0.4s" once the model is loaded, "40% of 94 MiB" while it loads, "-" before.
std::string describe_load(const std::string& metrics) {
  const auto bytes = metric_value(metrics, "inferd_model_weights_bytes");
  const auto seconds = metric_value(metrics, "inferd_load_seconds");
  const auto progress = metric_value(metrics, "inferd_load_progress");
  if (!bytes || !seconds || !progress || *bytes <= 0) return "-";
  const std::string mib = std::to_string(std::lround(*bytes / 1048576)) + " MiB";
  if (*seconds > 0) return mib + " in " + format_duration(*seconds);
  return std::to_string(static_cast<int>(*progress * 100)) + "% of " + mib;
}

std::string string_field(const boost::json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

// A tensor-parallel group's ranks as the head's /metrics show them, with each
// worker's health from /admin/supervisor's "rankN" monitor where it was read:
// {"rank 0:   joined (head)", "rank 1:   joined, 812 steps, heard 0.3s ago, ok"}.
std::vector<std::string> describe_ranks(const std::string& metrics, const boost::json::value& supervisor) {
  const auto joined = labeled_values(metrics, "inferd_tp_rank_joined", "rank");
  const auto steps = labeled_values(metrics, "inferd_tp_rank_steps_total", "rank");
  const auto heard = labeled_values(metrics, "inferd_tp_rank_heard_seconds", "rank");
  const auto fabric = rank_fabric(metrics);
  std::map<std::string, std::string> health;  // "1" -> "ok" or "shed (log: ...)"
  if (const auto* o = supervisor.if_object())
    if (const auto* ms = o->if_contains("monitors"); ms && ms->is_array())
      for (const auto& m : ms->as_array()) {
        if (!m.is_object()) continue;
        const std::string name = string_field(m.as_object(), "monitor"), level = string_field(m.as_object(), "level");
        if (name.starts_with("rank"))
          health[name.substr(4)] = level == "ok" ? level : level + " (" + string_field(m.as_object(), "reason") + ")";
      }
  std::vector<std::pair<int, std::string>> rows;
  for (const auto& [rank, j] : joined) {
    std::string row = j > 0 ? "joined" : "not joined";
    if (rank == "0") row += " (head)";
    if (auto it = steps.find(rank); it != steps.end()) row += ", " + std::to_string(std::llround(it->second)) + " steps";
    if (auto it = heard.find(rank); it != heard.end() && j > 0) row += ", heard " + format_duration(it->second) + " ago";
    if (auto it = health.find(rank); it != health.end()) row += ", " + it->second;
    if (auto it = fabric.find(rank); it != fabric.end() && it->second != "none") row += "; fabric: " + it->second;
    rows.emplace_back(std::atoi(rank.c_str()), std::move(row));
  }
  std::sort(rows.begin(), rows.end());
  std::vector<std::string> out;
  for (auto& [rank, row] : rows) {
    std::string head = "rank " + std::to_string(rank) + ":";
    head.resize(std::max<size_t>(head.size() + 1, 10), ' ');
    out.push_back(head + row);
  }
  return out;
}

// From /admin/supervisor: "ok" or the monitors not ok, the recovery budget, and
// the last decision: {"health: ...", "last:   ..."}; empty when it cannot be read.
std::vector<std::string> describe_supervisor(const std::string& body) {
  boost::json::error_code ec;
  const boost::json::value v = boost::json::parse(body, ec);
  if (ec || !v.is_object()) return {};
  const auto& o = v.as_object();
  auto num = [&](std::string_view k) {
    const auto* x = o.if_contains(k);
    return x && x->is_number() ? x->to_number<long>() : 0L;
  };
  if (const auto* on = o.if_contains("enabled"); on && on->is_bool() && !on->as_bool()) return {"off (--no-supervise)"};
  std::string monitors;
  if (const auto* ms = o.if_contains("monitors"); ms && ms->is_array())
    for (const auto& m : ms->as_array())
      if (m.is_object() && string_field(m.as_object(), "level") != "ok")
        monitors += (monitors.empty() ? "" : ", ") + string_field(m.as_object(), "monitor") + " " +
                    string_field(m.as_object(), "level") + " (" + string_field(m.as_object(), "reason") + ")";
  std::vector<std::string> out{(monitors.empty() ? "ok" : monitors) + "; recoveries " +
                               std::to_string(num("recoveries_in_window")) + " of " +
                               std::to_string(num("max_recoveries")) + " in " +
                               std::to_string(num("recovery_window_s")) + " s"};
  if (const auto* ds = o.if_contains("decisions"); ds && ds->is_array() && !ds->as_array().empty()) {
    const auto& d = ds->as_array().back();
    if (d.is_object()) {
      const auto& r = d.as_object();
      out.push_back("#" + std::to_string(r.if_contains("id") ? r.at("id").to_number<long>() : 0) + " " +
                    string_field(r, "action") + ": " + string_field(r, "reason") + " -> " + string_field(r, "outcome"));
    }
  }
  return out;
}

}  // namespace

int cmd_status(const Args& args) {
  if (args.has("help")) {
    std::cout << kUsage;
    return 0;
  }
  if (!args.positional.empty()) {
    std::cerr << "inferctl status: unexpected argument '" << args.positional.front() << "'\n" << kUsage;
    return 2;
  }
  const Url url = parse_url(args.get("url", "http://127.0.0.1:8000"));
  const auto timeout = std::chrono::milliseconds(std::lround(args.get_double("timeout", 5.0) * 1000));

  const HttpReply ready = http_request(url, "GET", "/health/ready", {}, timeout);
  boost::json::error_code ec;
  const boost::json::value v = boost::json::parse(ready.body, ec);
  if (ec || !v.is_object() || !v.as_object().contains("state")) {
    std::cerr << "inferctl status: " << url.text() << "/health/ready answered " << ready.status
              << " without a JSON state; is this an inferd daemon?\n";
    return 1;
  }
  const auto& health = v.as_object();
  const std::string state = string_field(health, "state");
  const std::string activity = string_field(health, "activity");

  std::string uptime = "unknown", load = "-", metrics;
  if (const HttpReply m = http_request(url, "GET", "/metrics", {}, timeout); m.status == 200) {
    if (auto s = metric_value(m.body, "inferd_uptime_seconds")) uptime = format_duration(*s);
    load = describe_load(m.body);
    metrics = m.body;
  }
  std::string model = "none loaded";
  if (const HttpReply r = http_request(url, "GET", "/v1/models", {}, timeout, args.get("api-key", "")); r.status == 200) {
    const boost::json::value list = boost::json::parse(r.body, ec);
    if (!ec && list.is_object()) {
      if (const auto* data = list.as_object().if_contains("data"); data && data->is_array() && !data->as_array().empty())
        if (data->as_array().front().is_object()) model = string_field(data->as_array().front().as_object(), "id");
    }
  }

  std::cout << "url:      " << url.text() << "\n"
            << "state:    " << state << "\n"
            << "activity: " << (activity.empty() ? "-" : activity) << "\n"
            << "ready:    " << (ready.status == 200 ? "yes" : "no") << "\n"
            << "load:     " << load << "\n"
            << "uptime:   " << uptime << "\n"
            << "model:    " << model << "\n";
  if (ready.status != 200) {
    if (const auto* err = health.if_contains("error"); err && err->is_object())
      std::cout << "reason:   " << string_field(err->as_object(), "message") << "\n";
  }
  const Url admin_url = args.has("admin-url") ? parse_url(args.get("admin-url", "")) : url;
  HttpReply admin;
  try {
    admin = http_request(admin_url, "GET", "/admin/supervisor", {}, timeout, args.get("admin-api-key", ""));
  } catch (const std::runtime_error&) {
    admin.status = 0;  // no admin listener there: the health line is left out
  }
  boost::json::value supervisor;
  if (const HttpReply& r = admin; r.status == 200) {
    const auto lines = describe_supervisor(r.body);
    if (!lines.empty()) std::cout << "health:   " << lines[0] << "\n";
    if (lines.size() > 1) std::cout << "last:     " << lines[1] << "\n";
    supervisor = boost::json::parse(r.body, ec);
  }
  for (const std::string& line : describe_ranks(metrics, supervisor)) std::cout << line << "\n";
  return 0;
}

}  // namespace inferd::tools
