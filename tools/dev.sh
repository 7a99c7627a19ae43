#!/usr/bin/env bash
# The two set-up commands of the README:
#   tools/dev.sh serve [inferd flags...]   install, build, start inferd on the default model
#   tools/dev.sh test  [meson test args]   install, build, run every test
# They build in separate directories: tests need fault points (-Dfaults=true,
# in build/), a daemon that serves must not have them (build-serve/).
# INFERD_BUILD names another directory for either.
# `test` without arguments (what CI runs) then runs each libFuzzer target for
# 30 s (clang, build-fuzz/: INFERD_FUZZ_BUILD), compiles the CUDA kernels where
# nvcc is (build-cuda/: INFERD_CUDA_BUILD), and the kernels and unit suites
# again under ASan+UBSan in build-asan/ (INFERD_ASAN_BUILD; docs/OPERATIONS.md,
# "Sanitizers"); INFERD_ASAN=0 skips that stage. With arguments it runs only
# `meson test ARGS` in the first build.
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
    [ $# -eq 0 ] || exit 0
    # The whole check (no arguments) also runs each libFuzzer target briefly:
    # clang, in a build directory of its own (docs/OPERATIONS.md, "Fuzzing").
    FUZZ=${INFERD_FUZZ_BUILD:-build-fuzz}
    [ -f "$FUZZ/build.ninja" ] ||
      CXX=clang++ CC=clang meson setup "$FUZZ" -Dfuzz=true -Dcuda=disabled -Dbuildtype=debugoptimized >/dev/null
    meson test -C "$FUZZ" --no-rebuild --print-errorlogs --suite fuzz
    # The CUDA sources compile and link (with cuBLAS) wherever nvcc is, GPU or
    # not, so they cannot rot between runs on a GPU machine (tools/gpu-check
    # builds and runs the GPU tests there). Only the kernels, and the GPU ranks'
    # data plane (NCCL, where it is found): the rest of the tree is the same C++
    # the first build compiled.
    command -v nvcc >/dev/null || [ ! -x /usr/local/cuda/bin/nvcc ] || export PATH=$PATH:/usr/local/cuda/bin
    if command -v nvcc >/dev/null; then
      CUDA_BUILD=${INFERD_CUDA_BUILD:-build-cuda}
      [ -f "$CUDA_BUILD/build.ninja" ] || meson setup "$CUDA_BUILD" -Dcuda=enabled -Dfaults=true >/dev/null
      ninja -C "$CUDA_BUILD" tools/bench_cuda daemon/libinferd_daemon.a.p/tensor_parallel_group.cpp.o
    fi
    [ "${INFERD_ASAN:-1}" != 0 ] || exit 0
    # Only the kernels and unit suites: meson builds just their two programs.
    # The integration suite under ASan is a manual run (too slow for CI). At
    # -O1: with the sanitizers, -O3 took twice as long to compile. The unit
    # cases tagged whole_model (the default model run end to end dozens of
    # times: precision against transformers and llama.cpp, tensor parallel,
    # speculative decoding, the warm-up's traced keys) run in the first build
    # only; the same code runs under ASan in their cases on small models.
    ASAN_BUILD=${INFERD_ASAN_BUILD:-build-asan}
    ASAN_OPTS=(-Dcuda=disabled -Dfaults=true -Db_sanitize=address,undefined -Db_lundef=false -Doptimization=1)
    if [ -f "$ASAN_BUILD/build.ninja" ]; then meson setup "$ASAN_BUILD" --reconfigure "${ASAN_OPTS[@]}" >/dev/null
    else meson setup "$ASAN_BUILD" "${ASAN_OPTS[@]}" >/dev/null; fi
    meson test -C "$ASAN_BUILD" --print-errorlogs --test-args=--test-suite-exclude=whole_model kernels unit ;;
esac
