#!/usr/bin/env bash
# The wheel a user installs: `pip wheel .` (incremental in build-py/, as
# scripts/test_python.sh built it), installed into a fresh virtual environment
# with nothing of the system's (its CUDA libraries come from PyPI's nvidia-*
# packages, which PyTorch's install put in pip's cache), then imported and run
# with no CUDA toolkit on PATH or LD_LIBRARY_PATH: a CPU forward, and the CUDA
# libraries the process loaded must be the environment's.
# Usage: bash scripts/check_wheel.sh   (PYTHON: the interpreter that builds; default .venv's, else python3)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-}
[ -n "$py" ] || { [ -x .venv/bin/python ] && py=.venv/bin/python || py=python3; }
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH  # to build; the test below runs without it
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== check_wheel: pip wheel ."
"$py" -m pip wheel -q --no-build-isolation --no-deps -w "$work/dist" . >"$work/wheel.log" 2>&1 \
  || { tail -40 "$work/wheel.log"; echo "check_wheel: pip wheel . failed" >&2; exit 1; }
wheel=$(ls "$work"/dist/attn-*.whl)
echo "== check_wheel: $(basename "$wheel") ($(du -h "$wheel" | cut -f1)) into a fresh virtual environment"
"$py" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$wheel" \
  || { echo "check_wheel: installing the wheel (and its nvidia-* dependencies from PyPI) failed" >&2; exit 1; }
echo "== check_wheel: import and run without the CUDA toolkit on PATH or LD_LIBRARY_PATH"
env -i HOME="$HOME" PATH=/usr/bin:/bin "$work/venv/bin/python" - <<'PY'
import numpy as np

import attn

info = attn.build_info()
print("attn", info["version"], "commit", info["commit"], "backends", ", ".join(info["backends"]))
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 16, 2, 8), dtype=np.float32) for _ in range(3))
out = attn.forward(q, k, v, mask="causal")
assert out.shape == q.shape and np.isfinite(out).all(), "forward on the CPU reference"
loaded = {line.split()[-1] for line in open("/proc/self/maps") if ".so" in line}
for lib in ("libcudart.so", "libcublas.so", "libcudnn.so", "libnccl.so"):
    paths = sorted(p for p in loaded if lib in p)
    assert paths and all("/nvidia/" in p for p in paths), f"{lib} loaded from {paths}, not the environment's nvidia packages"
    print(f"{lib}: {paths[0]}")
print("check_wheel: OK")
PY
