#!/usr/bin/env bash
# Runs ON the device machine, in one call: configure and build with every core,
# run every test (GPU tests included), print a short summary last.
# From the session: run(command="bash scripts/device.sh", carry=[".carry"]) after
# `bash scripts/prepare_device.sh` here. Logs go to $OUT when it is set.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # PATH, CUDNN_ROOT / NCCL_ROOT (PyTorch's packages there), $out
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

t0=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/.carry" \
  -DATTN_BUILD_PYTHON=ON -DATTN_WITH_CUDNN=ON >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
# Every backend is built here: a run without cuDNN would pass with its tests
# missing.
grep -q "attn: cudnn backend:" "$out/configure.log" ||
  { echo "device.sh: the cudnn backend is not configured:"; grep -i cudnn "$out/configure.log"; exit 1; }
cmake --build build-device -j "$(nproc)" >"$out/build.log" 2>&1 || { grep -E 'error|FAILED' -A3 "$out/build.log" | head -60; exit 1; }
t1=$(date +%s)
# Time guards keep the whole script inside one device call (10 minutes), so
# the summary always prints; a guard that fires reads as a failure.
timeout 240 ctest --test-dir build-device -V -j 4 >"$out/ctest.log" 2>&1  # -V: the tests' printed figures too
ctest_rc=$?
t2=$(date +%s)

# attn check: every GPU backend that claims a case against the reference.
checks_pass=0; checks_fail=0
while IFS= read -r line; do
  case "$line" in ''|'#'*) continue ;; esac
  if build-device/attn check $line >>"$out/checks.log" 2>&1; then
    checks_pass=$((checks_pass + 1)); echo "ok    $line" >>"$out/checks.txt"
  else
    checks_fail=$((checks_fail + 1)); echo "FAIL  $line" >>"$out/checks.txt"
  fi
done < scripts/gpu_checks.txt
t3=$(date +%s)

# The Python package on the GPU: CUDA tensors from PyTorch, CuPy and JAX. The
# extension comes from this build (stage_python); `pip install .` (what CI and
# scripts/test_python.sh run) would build it a second time, minutes here.
stage_python
PYTHONPATH=/tmp/py timeout 240 python3 -m pytest -q -rs -p no:cacheprovider tests/python >"$out/python.log" 2>&1
py_rc=$?
t4=$(date +%s)

echo "== failures / skips"
grep -E '\*\*\*|\(Skipped\)|Not Run' "$out/ctest.log" | head -40
echo "== figures the GPU tests print"
grep -hE "grid cases compared|forward > backward|cudnn dropout|cudnn plan cache|window boundaries" "$out/ctest.log" | sort -u
echo "== attn check cases"
cat "$out/checks.txt"
echo "== summary"
echo "device:  $(cat "$out/gpu.txt")"
echo "commit:  $(cat .carry/commit 2>/dev/null || echo unknown)"
echo "build:   $((t1 - t0)) s"
echo "ctest:   $(grep -E 'tests passed|tests failed' "$out/ctest.log") ($((t2 - t1)) s)"
echo "checks:  $checks_pass passed, $checks_fail failed ($((t3 - t2)) s)"
echo "python:  $(grep -E '[0-9]+ (passed|failed)' "$out/python.log" | tail -1) ($((t4 - t3)) s)"
[ $ctest_rc -eq 0 ] && [ $checks_fail -eq 0 ] && [ $py_rc -eq 0 ]
