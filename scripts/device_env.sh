# Sourced by the device scripts, ON the device machine: the CUDA toolkit on
# PATH; cuDNN and NCCL, which live in PyTorch's pip packages there, as
# CUDNN_ROOT / NCCL_ROOT (CMake reads them) and on LD_LIBRARY_PATH; $out, the
# folder for logs ($OUT when the device tool sets it, else $1 or a default).
out=${OUT:-${1:-/tmp/attn-device-out}}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
_pip_package() { python3 -c "import nvidia.$1 as m; print(list(m.__path__)[0])" 2>/dev/null; }
export CUDNN_ROOT=${CUDNN_ROOT:-$(_pip_package cudnn)} NCCL_ROOT=${NCCL_ROOT:-$(_pip_package nccl)}
export LD_LIBRARY_PATH=${CUDNN_ROOT:+$CUDNN_ROOT/lib:}${NCCL_ROOT:+$NCCL_ROOT/lib:}${LD_LIBRARY_PATH:-}
# stage_python [BUILD_DIR]: the Python package with the extension built in
# BUILD_DIR (default build-device) -> /tmp/py/attn, so that PYTHONPATH=/tmp/py
# imports this build.
stage_python() {
  mkdir -p /tmp/py && rm -rf /tmp/py/attn && cp -r python/attn /tmp/py/attn && cp "${1:-build-device}"/python/_C*.so /tmp/py/attn/
}
# configure_python_build DIR [CMAKE ARGS]: configures DIR with the Python
# extension on and cuDNN off (the kernel checks, profiles and A/Bs do not use
# it); log in $out. Returns non-zero (after printing the log's end) on failure.
configure_python_build() {
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/.carry" \
    -DATTN_BUILD_PYTHON=ON -DATTN_WITH_CUDNN=OFF "$@" >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; return 1; }
}
# build_kernels [TARGET ...]: configures build-kernels as above (with ptxas's
# register and spill reports) and builds the targets (default: the Python
# extension); log in $out/build.log. Returns non-zero (after printing the
# errors) when either step fails. The kernel scripts build in build-kernels,
# never in device.sh's build-device: a warm machine keeps CMake's cache, and
# cuDNN off there would silently drop the cudnn tests from device.sh's next
# run. One configuration for all of them, so that alternating scripts on a
# warm machine rebuild nothing.
build_kernels() {
  configure_python_build build-kernels -DATTN_PTXAS_VERBOSE=ON || return 1
  cmake --build build-kernels -j "$(nproc)" --target "${@:-_C}" >"$out/build.log" 2>&1 ||
    { grep -E 'error|FAILED' -A3 "$out/build.log" | head -60; return 1; }
}
# The extension built in build-kernels, staged (stage_python).
build_and_stage_python() {
  build_kernels _C && stage_python build-kernels
}
# ptxas_report KERNEL: one line per instantiation of the kernel named KERNEL
# (its template arguments, spill stores, registers) from $out/build.log, as
# build_kernels writes it (ptxas -v).
ptxas_report() {
  grep -E "Compiling entry function '.*$1|spill stores|Used [0-9]+ registers" "$out/build.log" |
    grep -A2 -E "$1" | grep -v '^--' | paste - - - |
    sed -E "s/.*$1I([^E]*)E.*(bytes stack frame), ([0-9]+ bytes spill stores).*Used ([0-9]+) registers.*/\1 \3 regs=\4/" |
    sort -u
}
# sanitize NAME "CHECK ARGS" [ENV=VALUE ...]: memcheck and racecheck of one
# `attn check` case (build-kernels), logs $out/memcheckNAME.log and
# $out/racecheckNAME.log, each run under ${SANITIZE_TIMEOUT:-75} s; each tool's
# exit code is added to memcheck_rc / racecheck_rc (the caller zeroes them).
sanitize() {
  local name=$1 args=$2 tool rc
  shift 2
  for tool in memcheck racecheck; do
    env "$@" timeout "${SANITIZE_TIMEOUT:-75}" compute-sanitizer --tool $tool --error-exitcode 9 \
      build-kernels/attn check $args >"$out/$tool$name.log" 2>&1
    rc=$?
    if [ $tool = memcheck ]; then memcheck_rc=$((memcheck_rc + rc)); else racecheck_rc=$((racecheck_rc + rc)); fi
  done
}
