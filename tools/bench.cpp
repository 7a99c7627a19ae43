// `inferctl bench <engine|serve>`: benchmarks that write JSON.
#include <iostream>

#include "tools/inferctl_commands.hpp"

namespace inferd::tools {

int cmd_bench(const Args& args) {
  const std::string mode = args.positional.empty() ? "" : args.positional[0];
  if (mode == "engine") return cmd_bench_engine(args);
  std::cerr << "usage: inferctl bench engine [--model PATH] [--threads N] [--n-prompt 128,512] [--n-gen 128]\n"
               "                             [--batch 8] [--repetitions 3]\n";
  return 2;
}

}  // namespace inferd::tools
