#!/usr/bin/env bash
# Installs with apt-get (as root, or with sudo) the Debian packages a step
# needs and this machine lacks. setup.sh calls it for the build (cmake,
# ninja, g++, ccache, GoogleTest, CLI11); check_fuzz.sh for the fuzz target
# (clang and its libFuzzer runtime: about 300 MB installed, without
# recommended packages).
# Usage: bash scripts/install_deps.sh [build|fuzz]   (default: build)
set -euo pipefail
what=${1:-build}

install() {
  [ $# -gt 0 ] || return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing $*"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${apt_options[@]}" "$@" >/dev/null
}

need=()
apt_options=()
case $what in
  build)
    command -v cmake >/dev/null || need+=(cmake)
    command -v ninja >/dev/null || need+=(ninja-build)
    command -v g++ >/dev/null || need+=(g++)
    command -v ccache >/dev/null || need+=(ccache)
    [ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
    [ -f /usr/include/CLI/CLI.hpp ] || need+=(libcli11-dev)
    install "${need[@]}"
    ;;
  fuzz)
    apt_options=(--no-install-recommends)  # clang recommends llvm-14-dev, which the fuzz build never uses
    command -v clang++ >/dev/null || install clang
    # Debian 12 ships libFuzzer's runtime apart from clang: probe for it.
    probe=$(mktemp -d)
    trap 'rm -rf "$probe"' EXIT
    echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cpp"
    if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>/dev/null; then
      install "libclang-rt-$(clang++ -dumpversion | cut -d. -f1)-dev"
    fi
    ;;
  *)
    echo "install_deps.sh: unknown step '$what' (build or fuzz)" >&2
    exit 2
    ;;
esac
