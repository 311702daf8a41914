#!/usr/bin/env bash
# Runs ON the device machine: where flash_sm90's backward kernel waits,
# instruction by instruction, beside cuDNN's backward (PyTorch SDPA) on the
# same problem: ncu's warp-state sampling of one kernel each, bf16, d 128,
# batch 16384/seqlen, 16 heads, non-causal; bench/stalls.py prints the stall
# reasons and the hottest SASS instructions. The CSV pages come back as one
# archive, $OUT/stalls.tgz.
# Usage there: bash scripts/sm90_bwd_stalls_device.sh   (seqlen $SEQLEN or 4096)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh /tmp/attn-device-out
build_and_stage_python || exit 1
mkdir -p /tmp/stalls
for impl in attn cudnn; do
  case $impl in
    attn) k='regex:flash_bwd_sm90' ;;
    cudnn) k='regex:cudnn_generated.*bprop' ;;
  esac
  rep="/tmp/stalls/stalls-bwd-128-$impl"
  ATTN_STALLS_BACKEND=flash_sm90 PYTHONPATH=/tmp/py timeout 200 ncu --clock-control none -k "$k" --launch-skip 2 \
    --launch-count 1 --section SourceCounters --section WarpStateStats --section LaunchStats \
    --section SpeedOfLight --section ComputeWorkloadAnalysis -f -o "$rep" \
    python3 bench/stalls.py run "$impl" bwd 128 "${SEQLEN:-4096}" >"$rep.log" 2>&1
  echo "######## bwd d 128 $impl (ncu rc $?)"
  ncu -i "$rep.ncu-rep" --page source --csv --print-source sass >"$rep.csv" 2>"$rep.err"
  ncu -i "$rep.ncu-rep" --page details --csv >"$rep-details.csv" 2>>"$rep.err"
  python3 bench/stalls.py report "$rep.csv" "$rep-details.csv" || tail -5 "$rep.err" "$rep.log"
  grep -E '"(SM Busy|Compute \(SM\) Throughput|Duration|Memory Throughput|Issue Slots Busy|Executed Ipc Active)"' \
    "$rep-details.csv" | cut -d, -f13-16 | head -8
  rm -f "$rep.ncu-rep"
done
tar czf "$out/stalls.tgz" -C /tmp/stalls .
