#!/usr/bin/env bash
# The two set-up commands of the README:
#   tools/dev.sh serve [inferd flags...]   install, build, start inferd on the default model
#   tools/dev.sh test  [meson test args]   install, build, run every test (and,
#                                          with no args, each fuzz target for 30 s)
# They build in separate directories: tests need fault points (-Dfaults=true,
# in build/), a daemon that serves must not have them (build-serve/).
# INFERD_BUILD names another directory for either.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.local/bin:$PATH"
verb=${1:-}; shift || true
case $verb in
  serve) BUILD=${INFERD_BUILD:-build-serve}; FAULTS=false ;;
  test)  BUILD=${INFERD_BUILD:-build}; FAULTS=true ;;
  *) echo "usage: $0 serve|test" >&2; exit 2 ;;
esac
tools/bootstrap.sh
if [ -f "$BUILD/build.ninja" ]; then meson setup "$BUILD" --reconfigure -Dcuda=disabled -Dfaults=$FAULTS >/dev/null
else meson setup "$BUILD" -Dcuda=disabled -Dfaults=$FAULTS >/dev/null; fi
case $verb in
  serve) ninja -C "$BUILD"; exec "$BUILD/daemon/inferd" --config etc/inferd.toml "$@" ;;
  test)
    meson test -C "$BUILD" --print-errorlogs "$@"
    # The whole check (no arguments) also runs each libFuzzer target briefly:
    # clang, in a build directory of its own (docs/OPERATIONS.md, "Fuzzing").
    if [ $# -eq 0 ]; then
      FUZZ=${INFERD_FUZZ_BUILD:-build-fuzz}
      [ -f "$FUZZ/build.ninja" ] ||
        CXX=clang++ CC=clang meson setup "$FUZZ" -Dfuzz=true -Dcuda=disabled -Dbuildtype=debugoptimized >/dev/null
      meson test -C "$FUZZ" --no-rebuild --print-errorlogs --suite fuzz
    fi ;;
esac
