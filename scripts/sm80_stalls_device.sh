#!/usr/bin/env bash
# Runs ON the device machine: where flash_sm80's kernels wait, instruction by
# instruction, beside PyTorch's FlashAttention-2 kernel on the same problem.
# ncu's warp-state sampling (SourceCounters) of one kernel per (pass, d,
# implementation), bf16, ANCHORS shape (batch 16384/seqlen, heads 2048/d,
# non-causal); bench/stalls.py prints each kernel's stall reasons and its
# hottest SASS instructions (with the barriers among them). Clocks are left
# alone (METHOD.md). The CSV pages come back as one archive, $OUT/stalls.tgz
# (a device call returns only a few files).
# Usage there: bash scripts/sm80_stalls_device.sh [pass:d ...]   (default: bwd:128 fwd:256; seqlen $SEQLEN or 4096)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh /tmp/attn-device-out
build_and_stage_python || exit 1
for job in ${@:-bwd:128 fwd:256}; do
  pass=${job%%:*} d=${job##*:}
  for impl in attn fa2; do
    case "$pass/$impl" in
      bwd/attn) k='regex:flash_bwd_kernel' ;;
      bwd/fa2) k='regex:^flash_bwd_dq_dk_dv' ;;
      fwd/*) k='regex:flash_fwd_kernel' ;;  # FA2's forward has the same name; one implementation runs per process
    esac
    rep="/tmp/stalls/stalls-$pass-$d-$impl"
    mkdir -p /tmp/stalls
    PYTHONPATH=/tmp/py timeout 200 ncu --clock-control none -k "$k" --launch-skip 2 --launch-count 1 \
      --section SourceCounters --section WarpStateStats --section LaunchStats -f -o "$rep" \
      python3 bench/stalls.py run "$impl" "$pass" "$d" "${SEQLEN:-4096}" >"$rep.log" 2>&1
    echo "######## $pass d $d $impl (ncu rc $?)"
    ncu -i "$rep.ncu-rep" --page source --csv --print-source sass >"$rep.csv" 2>"$rep.err"
    ncu -i "$rep.ncu-rep" --page details --csv >"$rep-details.csv" 2>>"$rep.err"
    python3 bench/stalls.py report "$rep.csv" "$rep-details.csv" || tail -5 "$rep.err" "$rep.log"
    rm -f "$rep.ncu-rep"
  done
done
tar czf "$out/stalls.tgz" -C /tmp/stalls .
