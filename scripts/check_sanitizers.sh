#!/usr/bin/env bash
# The C++ test suites (attn_tests, attn_cli_tests and the attn command's ctest
# cases) built with AddressSanitizer and UndefinedBehaviorSanitizer and run
# with ctest, in a build folder of their own (docs/RELIABILITY.md). Only host
# C++ is instrumented: the .cu files keep the main build's flags, so ccache
# serves them from scripts/setup.sh's build. GPU tests skip where no GPU
# exists, as in the main build. Any sanitizer report fails its test.
# Usage: bash scripts/check_sanitizers.sh [build-dir]   (default: build-asan)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build-asan}
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH

# -Og -g1: reports with file and line, at 60% of -O1's compile time (host C++
# only: CMAKE_CUDA_FLAGS_RELEASE stays the main build's -O3).
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTN_INSTALL=OFF \
  -DATTN_SANITIZE=address,undefined -DCMAKE_CXX_FLAGS_RELEASE="-Og -g1 -DNDEBUG" >/dev/null

# protect_shadow_gap=0: the CUDA driver maps memory inside ASan's shadow gap
# where a GPU exists; detect_leaks stays on (the CPU tests leak nothing).
export ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1:strict_string_checks=1:check_initialization_order=1:abort_on_error=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# The build runs the test binaries to list their tests (gtest_discover_tests):
# the options above apply there too.
cmake --build "$build_dir" -j "$(nproc)" --target attn_tests attn_cli_tests
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
