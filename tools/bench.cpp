// `inferctl bench <engine|serve|single>`: benchmarks that write JSON.
#include <iostream>

#include "tools/inferctl_commands.hpp"

namespace inferd::tools {

int cmd_bench(const Args& args) {
  const std::string mode = args.positional.empty() ? "" : args.positional[0];
  if (mode == "engine") return cmd_bench_engine(args);
  if (mode == "serve") return cmd_bench_serve(args);
  if (mode == "single") return cmd_bench_single(args);
  std::cerr << "usage: inferctl bench engine [--model PATH] [--threads N] [--n-prompt 128,512] [--n-gen 128]\n"
               "                             [--batch 8] [--repetitions 3]   (--help explains them)\n"
               "       inferctl bench serve [--url http://127.0.0.1:8000] [--concurrency 1,2,4,8,16] ...\n"
               "                            (inferctl bench serve --help lists its options)\n"
               "       inferctl bench single [--url http://127.0.0.1:8000] [--trials 3] ...\n"
               "                            (inferctl bench single --help lists its options)\n";
  return 2;
}

}  // namespace inferd::tools
