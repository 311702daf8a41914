#!/usr/bin/env bash
# Runs ON the device machine: builds attn (tests, the attn command and the
# Python extension; ptxas reports for the flash kernels; no cudnn backend, which
# these checks do not use), runs the sm80 primitive tests, the shared GPU grid
# and the backward tests for flash_sm80, compute-sanitizer (memcheck and
# racecheck) on small forward + backward cases, counts HMMA in the backward's
# SASS, then bench/compare.py --backend flash_sm80, its FlexAttention cases
# included (issue 5 asks 1.1x Flex on the sliding window; --no-flex skips them).
# Usage there: bash scripts/flash_sm80_device.sh [compare.py args]   (logs in $OUT)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh /tmp/attn-device-out  # PATH, $out, build_kernels, stage_python, sanitize
t0=$(date +%s)
build_kernels attn_tests attn_cli _C || exit 1
t1=$(date +%s)
# ptxas: registers and spills per flash kernel (entry name, then its lines).
grep -E "Compiling entry function '.*flash_(fwd|bwd)_kernel|spill stores|Used [0-9]+ registers" "$out/build.log" |
  grep -A2 -E "flash_(fwd|bwd)_kernel" | grep -v '^--' >"$out/ptxas.txt"
build-kernels/tests/attn_tests --gtest_filter='Sm80*:*BackendGrid*flash_sm80*:FlashSm80*' >"$out/gpu_tests.log" 2>&1
tests_rc=$?
# The grid again with d 256's grid in chunks of 3 pairs for every case (short last chunks, MHA too).
ATTN_SM80_BWD_GROUP_CHUNK=3 build-kernels/tests/attn_tests --gtest_filter='*BackendGrid*flash_sm80*' \
  >"$out/gpu_tests_chunk3.log" 2>&1
tests_rc=$((tests_rc + $?))
small="--backend flash_sm80 --format thd --seqlens 5,0,33,170 --heads 4 --kv-heads 2 --head-dim 64 --mask padding_causal --window 40,0 --dropout 0.1 --seed 5 --backward"
memcheck_rc=0 racecheck_rc=0  # sanitize() (device_env.sh) adds to them
sanitize "" "$small"
# The same case on a simulated sm86 (99 KiB: the d 64 backward's dropout build, 64-row tiles, also
# without dropout there).
sanitize -compact "$small" ATTN_SIMULATE_DEVICE=sm86
# d 256 on this GPU's forward build (the narrow 64 x 64 one on Hopper) and d 128 (the forward's 128 x 32
# dropout build); the backward's dropout builds of both, then their main builds (no dropout).
sanitize -d256 "${small/--head-dim 64/--head-dim 256}"
sanitize -d128 "${small/--head-dim 64/--head-dim 128}"
nodrop=${small/--dropout 0.1 /}
sanitize -d256main "${nodrop/--head-dim 64/--head-dim 256}"
sanitize -d128main "${nodrop/--head-dim 64/--head-dim 128}"
# Causal GQA without a window at d 128: the grid with the KV tiles slowest (bwd_config.h).
sanitize -gqa "--backend flash_sm80 --batch 2 --seqlen 300 --heads 4 --kv-heads 1 --head-dim 128 --mask causal --seed 7 --backward"
# d 256's chunked grid (bwd_config.h): 6 (KV head, sequence) pairs in chunks of 4, so the last chunk is short.
sanitize -gqa256 "--backend flash_sm80 --batch 3 --seqlen 300 --heads 8 --kv-heads 2 --head-dim 256 --mask causal --seed 7 --backward" ATTN_SM80_BWD_GROUP_CHUNK=4
obj=$(find build-kernels -name 'bwd_instantiate.cu.o' -path '*bwd_128_128*' | head -1)
hmma=$(cuobjdump -sass "$obj" 2>/dev/null | grep -c HMMA)
t2=$(date +%s)
stage_python build-kernels
PYTHONPATH=/tmp/py PYTHONUNBUFFERED=1 timeout 420 python3 bench/compare.py --backend flash_sm80 --out "$out" "$@" >"$out/compare.log" 2>&1
t3=$(date +%s)
echo "== ptxas (flash kernels: sm_80 then sm_90a per instantiation)"
paste - - - <"$out/ptxas.txt" | sed -E "s/.*flash_(fwd|bwd)_kernelI([^E]*)E.*for '(sm_[0-9a]+)'.*(bytes stack frame), ([0-9]+ bytes spill stores).*Used ([0-9]+) registers.*/\1 \2 \3 \5 regs=\6/" | grep sm_90a | sort | uniq | head -40
echo "== gpu tests (rc $tests_rc; the grid with ATTN_SM80_BWD_GROUP_CHUNK=3: $(grep -cE '^\[  PASSED' "$out/gpu_tests_chunk3.log") passed line)"
grep -E "^\[  (PASSED|FAILED) |FAILED|grid cases|Failure|out: |lse: |dq: |dk: |dv: |differs|grid case [0-9]|^(fwd|bwd) " "$out/gpu_tests.log" | head -60
echo "== memcheck (rc $memcheck_rc), racecheck (rc $racecheck_rc), HMMA in bwd 128 SASS: $hmma"
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out"/memcheck*.log "$out"/racecheck*.log
echo "== compare"
tail -49 "$out/compare.log"
echo "build $((t1 - t0)) s, tests $((t2 - t1)) s, compare $((t3 - t2)) s"
