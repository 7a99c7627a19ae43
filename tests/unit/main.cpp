// The unit suites' main. SIGPIPE is ignored, as the daemon ignores it
// (daemon/main.cpp): a write to a peer that has gone is then an error its
// caller handles, not the end of the process. A tensor-parallel group re-forming
// test was once killed by SIGPIPE on a loaded machine (exit 141).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <csignal>

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  doctest::Context context(argc, argv);
  return context.run();
}
