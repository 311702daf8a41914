#!/usr/bin/env bash
# Runs ON the device machine, in one call: installs the Python package (pip,
# no network needed: nanobind and scikit-build-core are there), then times the
# host overhead per call (bench/overhead.py) and the layer / transformers
# benchmarks (bench/layer.py), writing JSON to $OUT. Prints a short table last.
# From the session: run(command="bash scripts/python_bench_device.sh", carry=[".carry"]).
# ATTN_BENCH=overhead|layer|all (default all); ATTN_PYTEST="paths" runs those tests first.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # PATH, CUDNN_ROOT / NCCL_ROOT (PyTorch's packages there), $out
export CMAKE_PREFIX_PATH="$PWD/.carry" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
commit=$(cat .carry/commit 2>/dev/null || echo unknown)
t0=$(date +%s)
# Hopper only unless ATTN_ARCHS says otherwise: half the device's compile time.
python3 -m pip install -q --no-build-isolation --no-deps \
  -C cmake.define.CMAKE_CUDA_ARCHITECTURES="${ATTN_ARCHS:-90a-real}" . >"$out/pip.log" 2>&1 || { tail -40 "$out/pip.log"; exit 1; }
t1=$(date +%s)
which=${ATTN_BENCH:-all}
rc=0
if [ -n "${ATTN_PYTEST:-}" ]; then  # e.g. ATTN_PYTEST="tests/python/test_rotary.py": the GPU tests first
  python3 -m pytest -q $ATTN_PYTEST >"$out/pytest.txt" 2>&1 || rc=1
  tail -5 "$out/pytest.txt"
fi
if [ "$which" != layer ]; then
  python3 bench/overhead.py --json "$out/overhead.json" | tee "$out/overhead.txt" || rc=1
fi
if [ "$which" != overhead ]; then
  python3 bench/layer.py --out "$out/layer.json" ${ATTN_LAYER_ARGS:-} >"$out/layer.txt" 2>&1 || rc=1
  tail -45 "$out/layer.txt"
fi
echo "== summary: commit $commit, install $((t1 - t0)) s, device $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
exit $rc
