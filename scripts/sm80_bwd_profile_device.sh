#!/usr/bin/env bash
# Runs ON the device machine: ncu profiles of one flash_sm80 backward kernel
# and of PyTorch's FlashAttention-2 backward kernel on the same problem (bf16,
# ANCHORS shape: batch 16384/seqlen, heads 2048/d, non-causal), side by side:
# duration, tensor-pipe and issue utilisation, stall reasons, shared-memory
# bank conflicts, instruction counts. Clocks are left alone (METHOD.md).
# Usage there: bash scripts/sm80_bwd_profile_device.sh [d ...]   (default: 64 128; seqlen $SEQLEN or 4096)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh /tmp/attn-device-out
build_and_stage_python || exit 1
metrics="gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,\
sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_eligible.avg.per_cycle_active,\
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,\
l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed_op_ldsm.sum,launch__registers_per_thread,\
smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,\
smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,\
smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio,smsp__average_warp_latency_issue_stalled_wait.ratio,\
smsp__average_warp_latency_issue_stalled_not_selected.ratio,smsp__average_warp_latency_issue_stalled_lg_throttle.ratio,\
smsp__average_warp_latency_issue_stalled_dispatch_stall.ratio,smsp__average_warp_latency_issue_stalled_selected.ratio,\
smsp__average_warp_latency_issue_stalled_membar.ratio,smsp__average_warp_latency_issue_stalled_drain.ratio"
for d in ${@:-64 128}; do
  for impl in attn fa2; do
    if [ $impl = attn ]; then k='regex:flash_bwd_kernel'; else k='regex:^flash_bwd_dq_dk_dv'; fi
    PYTHONPATH=/tmp/py timeout 240 ncu --clock-control none -k "$k" --launch-skip 2 --launch-count 1 \
      --metrics "$metrics" python3 bench/stalls.py run $impl bwd $d "${SEQLEN:-4096}" >"$out/ncu-$impl-$d.log" 2>&1
    echo "######## d $d $impl (rc $?)"
    grep -E "^\s+(gpu__|sm__|smsp__|l1tex__|launch__)" "$out/ncu-$impl-$d.log" | sed -E 's/ +/ /g' | cut -c1-120
  done
done
