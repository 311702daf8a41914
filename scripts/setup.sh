#!/usr/bin/env bash
# Installs what attn's build needs on a fresh Debian/Ubuntu machine (the CUDA
# toolkit with nvcc is assumed present), then configures and builds everything.
# Usage: bash scripts/setup.sh [build-dir]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}

bash scripts/install_deps.sh build   # cmake, ninja, g++, ccache, GoogleTest, CLI11 where missing

if ! command -v nvcc >/dev/null; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
  else
    echo "setup: nvcc not found: install the CUDA toolkit (13.x) first" >&2
    exit 1
  fi
fi

# cudnn-frontend: header-only, pinned; only its include/ is used (no Python module).
fe_version=1.32.0
fe_dir=.deps/cudnn_frontend
if [ "$(cat "$fe_dir/VERSION" 2>/dev/null)" != "$fe_version" ]; then
  echo "setup: fetching cudnn-frontend $fe_version headers"
  rm -rf "$fe_dir" .deps/wheels && mkdir -p .deps/wheels
  python3 -m pip download -q --no-deps --only-binary=:all: -d .deps/wheels "nvidia-cudnn-frontend==$fe_version"
  python3 - "$fe_dir" .deps/wheels/nvidia_cudnn_frontend-*.whl <<'PY'
import sys, zipfile
dest, wheel = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    z.extractall(dest, [n for n in z.namelist() if n.startswith("include/")])
PY
  echo "$fe_version" > "$fe_dir/VERSION"
fi

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build_dir" -j "$(nproc)"
