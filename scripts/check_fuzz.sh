#!/usr/bin/env bash
# Fuzzing (docs/RELIABILITY.md): builds the libFuzzer target of tests/fuzz
# (validation and the CPU reference, with ASan and UBSan) with clang, which
# it installs from Debian's packages when missing (scripts/install_deps.sh,
# as for setup.sh's packages), runs every seed of tests/fuzz/corpus once,
# then fuzzes from them for a bounded time. New inputs stay in the build folder.
# A finding stops the run; the input is saved as <build-dir>/crash-* (replay it
# with ATTN_FUZZ_PRINT=1 <build-dir>/fuzz_attention <file> to see the call).
# Usage: bash scripts/check_fuzz.sh [build-dir]   (default: build-fuzz)
#        ATTN_FUZZ_SECONDS=600 bash scripts/check_fuzz.sh   (default: 60)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build-fuzz}
seconds=${ATTN_FUZZ_SECONDS:-60}

bash scripts/install_deps.sh fuzz   # clang and its libFuzzer runtime where missing

cmake -S tests/fuzz -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build "$build_dir"

export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
fuzzer=$build_dir/fuzz_attention
seeds=(tests/fuzz/corpus/*)
"$fuzzer" "${seeds[@]}" >"$build_dir/seeds.log" 2>&1 || { tail -40 "$build_dir/seeds.log"; exit 1; }
echo "fuzz: ${#seeds[@]} seeds of tests/fuzz/corpus pass"

mkdir -p "$build_dir/corpus"
if ! "$fuzzer" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 -artifact_prefix="$build_dir/" \
     "$build_dir/corpus" tests/fuzz/corpus >"$build_dir/fuzz.log" 2>&1; then
  grep -v '^#' "$build_dir/fuzz.log" | tail -60
  echo "fuzz: a finding; replay: ATTN_FUZZ_PRINT=1 $fuzzer $build_dir/crash-*" >&2
  exit 1
fi
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build_dir/fuzz.log")
added=$(ls "$build_dir/corpus" | wc -l)
cov=$(grep -o 'cov: [0-9]*' "$build_dir/fuzz.log" | tail -1)
echo "fuzz: $runs executions in ${seconds} s, no finding (${cov}; corpus: ${#seeds[@]} seeds, $added new inputs in $build_dir/corpus)"
