#!/usr/bin/env bash
# Installs what attn's Python tests need (pip: nanobind, scikit-build-core,
# numpy, pytest, PyPI's PyTorch wheel, HuggingFace transformers when PyTorch is
# there, JAX for the CPU) into a project-local virtual environment (.venv),
# builds and installs the package there the way a user does (`pip install .`,
# incremental in build-py/), then runs tests/python with pytest. GPU tests
# skip without a GPU or a GPU backend.
# Usage: bash scripts/test_python.sh [pytest args]
#   PYTHON=python3.12      the interpreter to use (default python3)
#   ATTN_PY_VENV=0         no virtual environment: install into $PYTHON's own
#   ATTN_PY_VENV_DIR=dir   the virtual environment's folder (default .venv)
#   ATTN_PY_TORCH=0        do not install PyTorch (its tests then skip)
#   ATTN_PY_TRANSFORMERS=0 do not install transformers (its tests then skip)
#   ATTN_PY_JAX=0          do not install JAX (its tests then skip)
# Offline (the GPU machine): nothing is installed that is already importable.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
t0=$(date +%s)

# The virtual environment sees the interpreter's own packages
# (--system-site-packages), so a machine that already has PyTorch (the GPU
# machine, offline) uses it; what is missing goes into the environment.
if [ "${ATTN_PY_VENV:-1}" != 0 ]; then
  venv=${ATTN_PY_VENV_DIR:-.venv}
  if [ ! -x "$venv/bin/python" ]; then
    echo "test_python: creating the virtual environment $venv"
    "$py" -m venv --system-site-packages "$venv"
  fi
  py="$venv/bin/python"
fi

# Pinned as in pyproject.toml's build-system requires; torch as on the GPU machine.
want=("nanobind==3.1.0" "scikit-build-core==1.1.2" "numpy" "pytest")
missing=()
for spec in "${want[@]}"; do
  mod=${spec%%=*}
  mod=${mod//-/_}
  "$py" -c "import $mod" 2>/dev/null || missing+=("$spec")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "test_python: pip install ${missing[*]}"
  "$py" -m pip install -q "${missing[@]}"
fi
# Optional frameworks: their tests skip when they are missing, so a failed
# install (no disk space, no network) is reported, not fatal.
free_gb=$(df -Pk . | awk 'NR==2 {print int($4 / 1048576)}')
if [ "${ATTN_PY_TORCH:-1}" != 0 ] && ! "$py" -c "import torch" 2>/dev/null; then
  if [ "$free_gb" -ge 12 ]; then  # PyPI's CUDA wheel: ~1 min, ~5.3 GB
    "$py" -m pip install -q "torch==2.11.0" || echo "test_python: torch did not install; its tests skip" >&2
  else
    echo "test_python: only ${free_gb} GB free, not installing torch; its tests skip" >&2
  fi
fi
# transformers as on the GPU machine (5.17.0): attn.integrations.transformers' tests.
if [ "${ATTN_PY_TRANSFORMERS:-1}" != 0 ] && "$py" -c "import torch" 2>/dev/null \
    && ! "$py" -c "import transformers" 2>/dev/null; then  # ~140 MB installed
  "$py" -m pip install -q "transformers==5.17.0" || echo "test_python: transformers did not install; its tests skip" >&2
fi
if [ "${ATTN_PY_JAX:-1}" != 0 ] && ! "$py" -c "import jax" 2>/dev/null; then
  "$py" -m pip install -q jax || echo "test_python: jax did not install; its tests skip" >&2  # CPU: ~10 s, ~350 MB
fi
t1=$(date +%s)

# The build needs nvcc (the core is a CUDA project), not a GPU.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
# --no-build-isolation: build with the nanobind/scikit-build-core checked above
# (works offline); build-dir (pyproject) keeps the build incremental.
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
log=$(mktemp)
if ! "$py" -m pip install --no-build-isolation --no-deps -v . >"$log" 2>&1; then
  grep -E 'error|Error|FAILED' -A3 "$log" | head -60 || tail -60 "$log"
  echo "test_python: pip install . failed (full log: $log)" >&2
  exit 1
fi
rm -f "$log"
t2=$(date +%s)

# From the repository root `import attn` finds the installed package (the
# sources live in python/attn, not ./attn).
set +e
"$py" -m pytest -q -rs tests/python "$@"
rc=$?
set -e
t3=$(date +%s)
echo "test_python: deps $((t1 - t0)) s, build+install $((t2 - t1)) s, pytest $((t3 - t2)) s"
exit $rc
