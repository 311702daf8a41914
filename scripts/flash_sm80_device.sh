#!/usr/bin/env bash
# Runs ON the device machine: builds attn (tests, the attn command and the
# Python extension, ptxas reports for the flash kernels), runs the sm80
# primitive tests and the shared GPU grid, then bench/compare.py forward-only.
# Usage there: bash scripts/flash_sm80_device.sh [compare.py args]   (logs in $OUT)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/attn-device-out}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/.carry" \
  -DATTN_PTXAS_VERBOSE=ON -DATTN_BUILD_PYTHON=ON >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build-device -j "$(nproc)" >"$out/build.log" 2>&1 || { grep -E 'error|FAILED' -A3 "$out/build.log" | head -60; exit 1; }
t1=$(date +%s)
# ptxas: registers and spills per flash kernel (entry name, then its line).
grep -E "Compiling entry function '.*flash_fwd_kernel|spill stores|Used [0-9]+ registers" "$out/build.log" |
  grep -B0 -A2 "flash_fwd_kernel" | grep -v '^--' >"$out/ptxas.txt"
build-device/tests/attn_tests --gtest_filter='Sm80*:*BackendGrid*flash_sm80*' >"$out/gpu_tests.log" 2>&1
tests_rc=$?
# compute-sanitizer on a small case of every kind of tile (empty sequence, GQA, window, dropout).
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 build-device/attn check --backend flash_sm80 \
  --format thd --seqlens 5,0,33,170 --heads 4 --kv-heads 2 --head-dim 64 --mask padding_causal --window 40,0 \
  --dropout 0.1 --seed 5 >"$out/memcheck.log" 2>&1
memcheck_rc=$?
t2=$(date +%s)
mkdir -p /tmp/py && rm -rf /tmp/py/attn && cp -r python/attn /tmp/py/attn && cp build-device/python/_C*.so /tmp/py/attn/
PYTHONPATH=/tmp/py PYTHONUNBUFFERED=1 timeout 220 python3 bench/compare.py --out "$out" "$@" >"$out/compare.log" 2>&1
t3=$(date +%s)
echo "== ptxas (flash kernels: sm_80 then sm_90a per instantiation)"
paste - - - <"$out/ptxas.txt" | sed -E "s/.*flash_fwd_kernelI([^E]*)E.*for '(sm_[0-9a]+)'.*(bytes stack frame), ([0-9]+ bytes spill stores).*Used ([0-9]+) registers.*/\1 \2 \4 regs=\5/" | sort | uniq | head -40
echo "== gpu tests"
grep -E "^\[  (PASSED|FAILED) |FAILED|grid cases|Failure|out: |lse: |grid case [0-9]|fwd " "$out/gpu_tests.log" | head -40
echo "== memcheck (rc $memcheck_rc)"
grep -E "ERROR SUMMARY|out |lse |flash_sm80" "$out/memcheck.log" | head -8
echo "== compare"
tail -25 "$out/compare.log"
echo "build $((t1 - t0)) s, tests $((t2 - t1)) s (rc $tests_rc), compare $((t3 - t2)) s"
