// inferctl: the operator's command-line tool. Each subcommand lives in its own
// file and is listed once in kCommands below.
#include <algorithm>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "tools/inferctl_commands.hpp"

namespace inferd::tools {

int cmd_status(const Args& args);  // status.cpp
int cmd_bench(const Args& args);   // bench.cpp
int cmd_fabric(const Args& args);  // fabric.cpp

namespace {

struct Command {
  std::string_view name;
  std::string_view summary;
  int (*run)(const Args&);
};

constexpr Command kCommands[] = {
    {"status", "state, activity, uptime and model of a running daemon", cmd_status},
    {"warmup", "print the warm-up plan (--plan) or re-run it on a running daemon", cmd_warmup},
    {"generate", "one prompt through the embedded engine, streamed to stdout", cmd_generate},
    {"draft-head-data", "a draft head's training data: the model's own greedy continuations and features", cmd_draft_head_data},
    {"bench", "benchmarks with JSON output: engine alone, or a daemon over HTTP", cmd_bench},
    {"proof", "the gates a deployment must pass: readiness, probe, context, tools, schema, restart...", cmd_proof},
    {"check-model", "a checkpoint directory against the gate inferd runs while Loading", cmd_check_model},
    {"fabric", "the RDMA ports this node sees and the pre-flight's choice for a master", cmd_fabric},
};

void usage(std::ostream& out) {
  out << "usage: inferctl <command> [options]\n\ncommands:\n";
  size_t width = 0;  // the longest name and two spaces
  for (const auto& c : kCommands) width = std::max(width, c.name.size() + 2);
  for (const auto& c : kCommands) out << "  " << c.name << std::string(width - c.name.size(), ' ') << c.summary << "\n";
  out << "\n'inferctl <command> --help' shows a command's options.\n";
}

}  // namespace

}  // namespace inferd::tools

int main(int argc, char** argv) {
  using namespace inferd::tools;
  if (argc < 2) {
    usage(std::cerr);
    return 2;
  }
  const std::string_view name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    usage(std::cout);
    return 0;
  }
  for (const auto& c : kCommands) {
    if (c.name != name) continue;
    try {
      return c.run(Args(argc, argv, 2));
    } catch (const std::invalid_argument& e) {  // bad flags and values
      std::cerr << "inferctl " << name << ": " << e.what() << "\n";
      return 2;
    } catch (const std::exception& e) {
      std::cerr << "inferctl " << name << ": " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "inferctl: unknown command '" << name << "' (see inferctl --help)\n";
  return 2;
}
