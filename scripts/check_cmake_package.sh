#!/usr/bin/env bash
# Checks attn's CMake package from a built tree (docs/INSTALL.md):
#   1. cmake --install BUILD_DIR into a temporary prefix; the files are there and
#      each installed header compiles alone (no private or cudnn-frontend include);
#   2. examples/cpp configures with find_package(attn CONFIG), builds against the
#      prefix and runs a forward on the CPU reference (no GPU needed);
#   3. a generated project that takes attn in with add_subdirectory configures:
#      attn finds its own cudnn-frontend and commit, and builds no tests or tools.
#      Only configured: building it would compile every kernel again.
# Exits non-zero on the first failure. Usage: bash scripts/check_cmake_package.sh BUILD_DIR
set -euo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR (a configured and built attn tree)" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "$1" && pwd)"
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  echo "check_cmake_package: $build is not a CMake build folder (no CMakeCache.txt)" >&2
  exit 2
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/attn-package.XXXXXX")"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
generator="$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$build/CMakeCache.txt")"
fail() { echo "check_cmake_package: FAIL: $*" >&2; exit 1; }
step() { echo "== check_cmake_package: $*"; }

step "install $build into $prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1 || { cat "$work/install.log"; fail "cmake --install (is $build built? cmake --build $build)"; }
libdir=lib
[[ -d "$prefix/lib64" ]] && libdir=lib64
for f in "$libdir/libattn.a" include/attn/attn.h "$libdir/cmake/attn/attnConfig.cmake" \
         "$libdir/cmake/attn/attnConfigVersion.cmake" "$libdir/cmake/attn/attnTargets.cmake"; do
  [[ -f "$prefix/$f" ]] || fail "$f not installed"
done
if grep -q '^ATTN_BUILD_TOOLS:BOOL=ON' "$build/CMakeCache.txt"; then
  [[ -x "$prefix/bin/attn" ]] || fail "bin/attn not installed although ATTN_BUILD_TOOLS=ON"
  "$prefix/bin/attn" --help > /dev/null || fail "installed bin/attn does not run"
fi

step "each installed header compiles alone with -I $prefix/include only"
cxx="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")"
for h in "$prefix"/include/attn/*.h; do
  printf '#include <attn/%s>\n' "$(basename "$h")" \
    | "${cxx:-c++}" -std=c++20 -fsyntax-only -I "$prefix/include" -x c++ - \
    || fail "installed header ${h#"$prefix"/} does not compile on its own"
done
if grep -rlE '#include[[:space:]]*[<"](cudnn|nccl|core/|backends/|kernels/)' "$prefix/include"; then
  fail "an installed header includes a private or build-time-only header (above)"
fi

step "examples/cpp: find_package(attn CONFIG) against the prefix, build, run"
cmake -S "$root/examples/cpp" -B "$work/example" ${generator:+-G "$generator"} \
      -DCMAKE_PREFIX_PATH="$prefix" > "$work/example-configure.log" 2>&1 \
  || { cat "$work/example-configure.log"; fail "examples/cpp does not configure against the install"; }
cmake --build "$work/example" > "$work/example-build.log" 2>&1 \
  || { cat "$work/example-build.log"; fail "examples/cpp does not build against the install"; }
output="$("$work/example/example")" || fail "the example exited non-zero"
echo "$output"
[[ "$output" == *"backend reference"*"checksum"* ]] || fail "unexpected output from the example"

step "add_subdirectory(attn) in a generated project: configure only"
mkdir -p "$work/consumer"
cat > "$work/consumer/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.24)
project(attn_consumer LANGUAGES CXX)
add_subdirectory("$root" attn)
add_executable(consumer main.cpp)
target_link_libraries(consumer PRIVATE attn::attn)
CMAKE
printf '#include <attn/attn.h>\nint main() { return attn::version()[0] == 0; }\n' > "$work/consumer/main.cpp"
cmake -S "$work/consumer" -B "$work/consumer/build" ${generator:+-G "$generator"} \
      > "$work/consumer-configure.log" 2>&1 \
  || { cat "$work/consumer-configure.log"; fail "a project with add_subdirectory(attn) does not configure"; }
grep -E '^-- (attn |  )' "$work/consumer-configure.log"
# The backends and the commit must be those of attn's own build, not lost to the parent's paths.
if grep -q '^CUDNN_FRONTEND_INCLUDE_DIR:PATH=/' "$build/CMakeCache.txt"; then
  grep -q '^--   backend cudnn:      built' "$work/consumer-configure.log" \
    || fail "under add_subdirectory the cudnn backend is left out, though $build has it"
fi
if git -C "$root" rev-parse HEAD > /dev/null 2>&1; then
  ! grep -q '(commit unknown)' "$work/consumer-configure.log" || fail "under add_subdirectory the commit reads unknown"
fi
if cmake --build "$work/consumer/build" --target help | grep -qE 'attn_tests|attn_cli'; then
  fail "under add_subdirectory attn's tests or tools are built"
fi
step "OK"
