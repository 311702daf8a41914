#!/usr/bin/env bash
# Builds attn (installing what is missing) and runs every test: the C++ suites
# with ctest, the attn command's end-to-end checks (scripts/check_cli.sh), the
# CMake package (scripts/check_cmake_package.sh: install, build examples/cpp
# against it, configure an add_subdirectory consumer), the Python package's
# (pip install ., pytest), then the wheel in a fresh virtual environment
# (scripts/check_wheel.sh); last, the C++ suites again built with ASan and
# UBSan (scripts/check_sanitizers.sh, build-asan/) and a bounded fuzzing run
# over validation and the CPU reference (scripts/check_fuzz.sh, build-fuzz/;
# it installs clang).
# GPU tests report "skipped" where no GPU exists. Usage: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh build
ctest --test-dir build --output-on-failure -j "$(nproc)"
bash scripts/check_cli.sh build
bash scripts/check_cmake_package.sh build
bash scripts/test_python.sh
bash scripts/check_wheel.sh
bash scripts/check_sanitizers.sh build-asan
bash scripts/check_fuzz.sh build-fuzz
