#!/usr/bin/env bash
# Multi-GPU mode of the device run (context parallelism, issue 9), ON the
# device machine: builds the Python extension only (sm_90a), runs the CP tests
# under torchrun, then the CP benchmark; prints a short table last. Logs in $OUT.
# From the session: run(kind="nvidia-h200-x2",
#   command="NCCL_NVLS_ENABLE=0 bash scripts/cp_device.sh", carry=[".carry"]).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh /tmp/attn-cp-out  # PATH, CUDNN_ROOT / NCCL_ROOT, $out
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
gpus=$(nvidia-smi -L | wc -l)

t0=$(date +%s)
nb=$(python3 -m nanobind --cmake_dir)
cmake -S . -B build-cp -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/.carry" \
  -DATTN_BUILD_PYTHON=ON -DATTN_BUILD_TESTS=OFF -DATTN_BUILD_TOOLS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a-real \
  -Dnanobind_ROOT="$nb" >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
grep -E "attn: (context|NCCL|cudnn)" "$out/configure.log"
cmake --build build-cp -j "$(nproc)" --target _C >"$out/build.log" 2>&1 || { grep -E 'error|FAILED' -A3 "$out/build.log" | head -60; exit 1; }
cp build-cp/python/_C*.so python/attn/
export PYTHONPATH=$PWD/python
t1=$(date +%s)

if [ "${ATTN_CP_BENCH_ONLY:-0}" = 1 ]; then  # the benchmark alone (tests passed on this commit's code)
  echo "tests skipped (ATTN_CP_BENCH_ONLY=1)" >"$out/cp_tests.log"; tests_rc=0
else
  timeout 300 torchrun --nproc-per-node "$gpus" tests/python/cp_worker.py >"$out/cp_tests.log" 2>&1
  tests_rc=$?
fi
t2=$(date +%s)
if [ "${ATTN_CP_TESTS_ONLY:-0}" = 1 ] || [ "$gpus" -lt 2 ]; then  # one GPU: a 1-rank ring, no benchmark
  echo "benchmark skipped ($gpus GPU(s), ATTN_CP_TESTS_ONLY=${ATTN_CP_TESTS_ONLY:-0})" >"$out/cp_bench.log"; bench_rc=0
else
  timeout 240 torchrun --nproc-per-node "$gpus" bench/cp.py >"$out/cp_bench.log" 2>&1
  bench_rc=$?
fi
t3=$(date +%s)
python3 -m pytest -q tests/python/test_cp.py -k "not two_gpus" >"$out/pytest.log" 2>&1
py_rc=$?

echo "== cp tests (rc $tests_rc, $((t2 - t1)) s)"
grep -E "^(ok|FAIL)|rank [0-9]+:|Error|error" "$out/cp_tests.log" | head -40
echo "== cp bench (rc $bench_rc, $((t3 - t2)) s)"
grep -vE "^\s*$|W[0-9]{4}|warnings.warn|OMP_NUM_THREADS|\*{5}" "$out/cp_bench.log" | tail -15
echo "== summary"
echo "device: $(head -1 "$out/gpu.txt") x$gpus   commit: $(cat .carry/commit 2>/dev/null || echo unknown)   build: $((t1 - t0)) s"
echo "pytest (CPU parts): $(tail -1 "$out/pytest.log")"
[ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ] && [ $py_rc -eq 0 ]
