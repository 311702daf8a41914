#!/usr/bin/env bash
# Runs ON the device machine (an H100 or H200): builds attn (tests, the attn
# command and the Python extension; ptxas reports for the flash kernels; no
# cudnn backend, which these checks do not use), counts HGMMA / TMA / setmaxnreg
# in the d128 forward's SASS, runs the shared GPU grid for flash_sm90,
# `attn check` edge cases, compute-sanitizer (memcheck, racecheck) on a small
# thd case, then bench/compare.py --backend flash_sm90 --fwd-only.
# Usage there: bash scripts/flash_sm90_device.sh [compare.py args]   (logs in $OUT)
# ATTN_SM90_SKIP_BENCH=1 stops after the checks; a failed edge check stops the
# run there unless ATTN_SM90_KEEP_GOING=1.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh
t0=$(date +%s)
build_kernels attn_tests attn_cli _C || exit 1
t1=$(date +%s)
obj=$(find build-kernels -name 'fwd_instantiate.cu.o' -path '*sm90_fwd_128_128*' | head -1)
cuobjdump -sass "$obj" >"$out/sass_fwd128.txt" 2>&1
sass_counts=$(grep -oE "HGMMA|UTMALDG|USETMAXREG|LDL|STL" "$out/sass_fwd128.txt" | sort | uniq -c | tr '\n' ' ')
# Checks first, each under a short timeout: a kernel that hangs shows up as
# the failing case, not as the whole run's time limit.
checks_pass=0; checks_fail=0; : >"$out/checks.txt"
while IFS= read -r line; do
  case "$line" in ''|'#'*) continue ;; esac
  if timeout 30 build-kernels/attn check --backend flash_sm90 $line >>"$out/checks.log" 2>&1; then
    checks_pass=$((checks_pass + 1)); echo "ok    $line" >>"$out/checks.txt"
  else
    checks_fail=$((checks_fail + 1)); echo "FAIL  $line" >>"$out/checks.txt"
  fi
done < scripts/sm90_checks.txt
if [ $checks_fail -ne 0 ] && [ "${ATTN_SM90_KEEP_GOING:-0}" != 1 ]; then cat "$out/checks.txt"; exit 1; fi
timeout 300 build-kernels/tests/attn_tests --gtest_filter='Sm90*:*BackendGrid*flash_sm90*' >"$out/gpu_tests.log" 2>&1
tests_rc=$?
# A small thd case at d 64, and one at d 128 with more work items than SMs,
# so persistent CTAs take several items (the Q double buffer, the epilogue
# under the next item's Q.K^T, items with no rows).
small64="--backend flash_sm90 --format thd --seqlens 5,0,33,170 --heads 4 --kv-heads 2 --head-dim 64 --mask padding_causal --window 40,0 --dropout 0.1 --seed 5"
small128="--backend flash_sm90 --format thd --seqlens 600,5,0,700 --heads 16 --kv-heads 4 --head-dim 128 --mask padding_causal --seed 6"
memcheck_rc=0 racecheck_rc=0  # sanitize() (device_env.sh) adds to them
: "${SANITIZE_TIMEOUT:=150}"  # each run's limit here, unless the caller set one (device_env.sh's default is 75)
sanitize -d64 "$small64"
sanitize -d128 "$small128"
t2=$(date +%s)
if [ "${ATTN_SM90_SKIP_BENCH:-0}" != 1 ]; then
  stage_python build-kernels
  PYTHONPATH=/tmp/py PYTHONUNBUFFERED=1 timeout 300 python3 bench/compare.py --backend flash_sm90 --fwd-only --out "$out" "$@" >"$out/compare.log" 2>&1
fi
t3=$(date +%s)
echo "== ptxas (flash_sm90 forward kernels)"
ptxas_report flash_fwd_sm90_kernel
echo "== SASS of the d128 forward: $sass_counts"
echo "== gpu tests (rc $tests_rc)"
grep -E "^\[  (PASSED|FAILED) |FAILED|grid cases|Failure|out: |lse: |differs|grid case [0-9]" "$out/gpu_tests.log" | head -40
echo "== attn check ($checks_pass passed, $checks_fail failed)"
cat "$out/checks.txt"
grep -E "FAIL|mismatch|error" "$out/checks.log" | head -20
echo "== memcheck (rc $memcheck_rc), racecheck (rc $racecheck_rc)"
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|error" "$out"/memcheck*.log "$out"/racecheck*.log | head -10
echo "== compare"
[ -f "$out/compare.log" ] && tail -40 "$out/compare.log"
echo "build $((t1 - t0)) s, tests $((t2 - t1)) s, compare $((t3 - t2)) s"
[ $tests_rc -eq 0 ] && [ $checks_fail -eq 0 ] && [ $memcheck_rc -eq 0 ] && [ $racecheck_rc -eq 0 ]
