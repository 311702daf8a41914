#!/usr/bin/env bash
# Runs ON the device machine (an H100 or H200), in one call: builds attn
# (tests, the attn command, the Python extension; ptxas reports), then
# flash_sm90's backward: its ptxas report and SASS counts, the GPU tests
# (FlashSm90Backward, the shared grid's and the cross-pass tests' flash_sm90
# cases), compute-sanitizer (memcheck, racecheck) on three small backward
# cases, and bench/compare.py --backend flash_sm90 at d 128 (its backward
# beside SDPA's cuDNN and flash in the same run). Prints a short table last.
# Usage there: bash scripts/sm90_bwd_device.sh [compare.py args]   (logs in $OUT)
# ATTN_SM90_SKIP_BENCH=1 stops after the checks.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh
t0=$(date +%s)
build_kernels attn_tests attn_cli _C || exit 1
t1=$(date +%s)
obj=$(find build-kernels -name 'bwd_instantiate.cu.o' -path '*sm90_bwd_128_128*' | head -1)
cuobjdump -sass "$obj" >"$out/sass_bwd128.txt" 2>&1
sass_counts=$(grep -oE "HGMMA|UTMALDG|USETMAXREG|REDG|LDL|STL" "$out/sass_bwd128.txt" | sort | uniq -c | tr '\n' ' ')
timeout 400 build-kernels/tests/attn_tests \
  --gtest_filter='FlashSm90Backward*:*BackendGrid*flash_sm90*:CrossPass*' >"$out/gpu_tests.log" 2>&1
tests_rc=$?
small_causal="--backend flash_sm90 --backward --format bshd --batch 2 --seqlen 150 --seqlen-kv 260 --heads 4 --kv-heads 2 --head-dim 128 --mask causal_bottom_right"
small_window="--backend flash_sm90 --backward --format sbhd --batch 1 --seqlen 300 --heads 2 --head-dim 64 --mask no_mask --window 70,20"
small_packed="--backend flash_sm90 --backward --format thd --seqlens 130,0,1,200 --heads 4 --kv-heads 2 --head-dim 128 --mask padding_causal"
memcheck_rc=0 racecheck_rc=0  # sanitize() (device_env.sh) adds to them
: "${SANITIZE_TIMEOUT:=150}"
sanitize -causal "$small_causal"
sanitize -window "$small_window"
sanitize -packed "$small_packed"
t2=$(date +%s)
if [ "${ATTN_SM90_SKIP_BENCH:-0}" != 1 ]; then
  stage_python build-kernels
  PYTHONPATH=/tmp/py PYTHONUNBUFFERED=1 timeout 300 python3 bench/compare.py --backend flash_sm90 --dims 128 \
    --no-flex --out "$out" "$@" >"$out/compare.log" 2>&1
fi
t3=$(date +%s)
echo "== ptxas (flash_sm90 backward kernels)"
ptxas_report flash_bwd_sm90_kernel
echo "== SASS of the d128 backward: $sass_counts"
echo "== gpu tests (rc $tests_rc)"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|dq: |dk: |dv: |out: |lse: |case [0-9]+:|grid case" "$out/gpu_tests.log" | head -40
echo "== memcheck (rc $memcheck_rc), racecheck (rc $racecheck_rc)"
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$out"/memcheck*.log "$out"/racecheck*.log | head -8
echo "== compare.py (attn = flash_sm90 both passes)"
tail -30 "$out/compare.log"
echo "== summary: commit $(cat .carry/commit 2>/dev/null || echo unknown), build $((t1 - t0)) s, checks $((t2 - t1)) s, bench $((t3 - t2)) s, $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
