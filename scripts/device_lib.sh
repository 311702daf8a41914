# shellcheck shell=bash
# Sourced by scripts/device.sh, ON the device machine: the steps its suites
# share, each written once. Sourcing it sets up the environment:
#   - the CUDA toolkit on PATH; cuDNN and NCCL, which live in PyTorch's pip
#     packages there, as CUDNN_ROOT / NCCL_ROOT (CMake reads them) and on
#     LD_LIBRARY_PATH; NVLink multicast off (KINDS.md: it can take the host's
#     shared GPUs out of service);
#   - $out_root: $OUT when the device tool sets it, else /tmp/attn-device-out;
#   - $commit: the commit prepare_device.sh wrote into .carry/.
# Then per suite (begin_suite .. end_suite): $log, the suite's log folder,
# and its summary table.

out_root=${OUT:-/tmp/attn-device-out}
mkdir -p "$out_root"
export PATH=/usr/local/cuda/bin:$PATH
_pip_package() { python3 -c "import nvidia.$1 as m; print(list(m.__path__)[0])" 2>/dev/null; }
CUDNN_ROOT=${CUDNN_ROOT:-$(_pip_package cudnn)}
NCCL_ROOT=${NCCL_ROOT:-$(_pip_package nccl)}
export CUDNN_ROOT NCCL_ROOT
export LD_LIBRARY_PATH=${CUDNN_ROOT:+$CUDNN_ROOT/lib:}${NCCL_ROOT:+$NCCL_ROOT/lib:}${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1} \
  NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
commit=$(cat .carry/commit 2>/dev/null || echo unknown)

# ---- a suite's log folder and summary ----------------------------------------
# begin_suite NAME [N]: $log = $out_root/NAME (NAME-N for the Nth run of the
# suite in one call), emptied; an empty summary with the device and commit.
begin_suite() {
  suite=$1
  log=$out_root/$1
  [ "${2:-1}" -eq 1 ] || log=$log-$2
  rm -rf "$log" "$log-logs.tgz" && mkdir -p "$log"
  _rows=() _failed=()
  _suite_t0=$(date +%s)
  note device "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
    head -1) x$(gpu_count)"
  note commit "$commit"
}
# note KEY TEXT: one line of the summary table.
note() { _rows+=("$(printf '%-16s %s' "$1" "$2")"); }
# verdict KEY RC TEXT: a line that counts: "ok TEXT", or "FAIL TEXT (rc RC)"
# and the suite fails.
verdict() {
  local key=$1 rc=$2
  shift 2
  if [ "$rc" -eq 0 ]; then note "$key" "ok   $*"; else fail "$key" "$* (rc $rc)"; fi
}
# fail KEY TEXT: a "FAIL TEXT" line; the suite fails.
fail() {
  note "$1" "FAIL $2"
  _failed+=("$1")
}
# end_suite RC: prints the summary table (the last lines of the suite's
# output), then packs the logs. Returns non-zero when RC or a verdict failed.
end_suite() {
  [ "$1" -eq 0 ] || [ ${#_failed[@]} -gt 0 ] || verdict "$suite" "$1" "stopped early"
  echo "== $suite: summary"
  printf '%s\n' "${_rows[@]}"
  printf '%-16s %s\n' time "$(($(date +%s) - _suite_t0)) s" result "$([ ${#_failed[@]} -eq 0 ] && echo ok || echo "FAILED: ${_failed[*]}")"
  pack_logs
  [ ${#_failed[@]} -eq 0 ]
}
# pack_logs: a device call brings back at most 8 files, so $log's logs go back
# as one archive, $log-logs.tgz; the figures stay loose: every *.json, and the
# *.png directly in $log.
pack_logs() {
  (cd "$log" && find . -type f ! -name '*.json' ! \( -path './*.png' ! -path './*/*' \) -print0 |
    tar czf "$log-logs.tgz" --null -T - --remove-files)
  find "$log" -depth -type d -empty -delete
}
gpu_count() { nvidia-smi -L 2>/dev/null | grep -c '^GPU'; }
# since T0: seconds from T0 (date +%s) to now.
since() { echo $(($(date +%s) - $1)); }

# ---- configure and build -------------------------------------------------------
# configure_attn PROFILE: configures that profile's build folder (log
# $log/configure.log) and sets $build:
#   full     build-device   everything, cuDNN on and required (a run without
#                           it would pass with the cudnn tests missing)
#   kernels  build-kernels  cuDNN off (the kernel checks don't use it), ptxas's
#                           register and spill report in the build log
#   ab       build-ab       as kernels, its own folder: a variant's objects must
#                           not stay where another suite builds
#   ext      build-ext      the Python extension's build alone (as pip builds it),
#                           cuDNN on and required, for ${ATTN_ARCHS:-90a-real}
# One folder per profile: a warm machine keeps CMake's caches, and a suite
# that reconfigured another's folder (cuDNN off in build-device) once dropped
# the cudnn tests from the next test run without a failure.
configure_attn() {
  local args=()
  case $1 in
    full) build=build-device args=(-DATTN_WITH_CUDNN=ON) ;;
    kernels | ab) build=build-$1 args=(-DATTN_WITH_CUDNN=OFF -DATTN_PTXAS_VERBOSE=ON) ;;
    ext) build=build-ext args=(-DATTN_WITH_CUDNN=ON -DATTN_BUILD_TESTS=OFF -DATTN_BUILD_TOOLS=OFF
      "-DCMAKE_CUDA_ARCHITECTURES=${ATTN_ARCHS:-90a-real}") ;;
    *) echo "configure_attn: no profile $1" >&2; return 2 ;;
  esac
  if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/.carry" \
      -DATTN_BUILD_PYTHON=ON "${args[@]}" >"$log/configure.log" 2>&1; then
    tail -30 "$log/configure.log"
    verdict configure 1 "$build"
    return 1
  fi
  if [ "${args[0]}" = -DATTN_WITH_CUDNN=ON ] && ! grep -q "backend cudnn: *built" "$log/configure.log"; then
    echo "configure_attn: the cudnn backend is not configured in $build:"
    grep -i cudnn "$log/configure.log"
    verdict configure 1 "$build without cuDNN"
    return 1
  fi
}
# build_targets [TARGET ...]: builds them in $build (default: everything) with
# every core; log ${BUILD_LOG:-$log/build.log}, summary line ${BUILD_KEY:-build}.
# On failure prints the errors.
build_targets() {
  local blog=${BUILD_LOG:-$log/build.log} t0
  t0=$(date +%s)
  if ! cmake --build "$build" -j "$(nproc)" ${1:+--target "$@"} >"$blog" 2>&1; then
    grep -E 'error|FAILED' -A3 "$blog" | head -60
    verdict "${BUILD_KEY:-build}" 1 "$build${1:+: $*}"
    return 1
  fi
  note "${BUILD_KEY:-build}" "$(since "$t0") s ($build${1:+: $*})"
}
# build_attn PROFILE [TARGET ...]: configure_attn, then build_targets.
build_attn() {
  local profile=$1
  shift
  configure_attn "$profile" && build_targets "$@"
}
# stage_python [BUILD_DIR]: the Python package with the extension built in
# BUILD_DIR (default $build) -> /tmp/py/attn, so that PYTHONPATH=/tmp/py
# imports this build. (`pip install .`, what CI and test_python.sh run, would
# build the extension a second time.)
stage_python() {
  mkdir -p /tmp/py && rm -rf /tmp/py/attn && cp -r python/attn /tmp/py/attn &&
    cp "${1:-$build}"/python/_C*.so /tmp/py/attn/
}

# ---- what the build says about a kernel ------------------------------------------
# ptxas_report NAME_REGEX [ARCH_REGEX]: one line per compiled kernel whose
# demangled name matches NAME_REGEX, from the build log of the kernels or ab
# profile (ptxas -v): arch, registers, stack frame and spill-store bytes,
# kernel<template arguments>; only ARCH_REGEX's arch (e.g. sm_90a) when given.
ptxas_report() {
  awk -v q="'" '
    /Compiling entry function/ { split($0, p, q); name = p[2]; arch = p[4]; props = 0; next }
    /Function properties for/ { props = name != "" && index($0, name) > 0; next }
    props && /bytes spill stores/ { stack = $1; spill = $5; props = 0; next }
    name != "" && match($0, /Used [0-9]+ registers/) {
      split(substr($0, RSTART, RLENGTH), u, " ")
      printf "%-7s regs=%-4s stack=%-5s spill=%-5s %s\n", arch, u[2], stack, spill, name
      name = ""
    }' "${BUILD_LOG:-$log/build.log}" |
    c++filt | sed -E 's/ void / /; s/\([^()]*\)$//; s/[A-Za-z_][A-Za-z_0-9]*:://g' |
    grep -E -- "$1" | grep -E -- "${2:-.}" | sort -u -k5 -k1,1
}
# ptxas_note NAME_REGEX [ARCH_REGEX]: ptxas_report's kernels in one summary
# line: how many, how many spill, the most registers and spill bytes.
ptxas_note() {
  note ptxas "$(ptxas_report "$@" | awk '{ n++; r = substr($2, 6) + 0; s = substr($4, 7) + 0
      if (r > regs) regs = r; if (s > 0) spilled++; if (s > most) most = s }
    END { printf "%d kernels (%s), %d spill (max %d B), max %d regs", n, "'"${2:-all archs}"'", spilled, most, regs }')"
}
# sass_counts NAME OBJECT_PATH_GLOB OPCODE_REGEX: the SASS of the first
# object in $build whose path matches the glob ($log/sass-NAME.txt), and how
# often each opcode matching the regex occurs in it, on one line.
sass_counts() {
  local obj
  obj=$(find "$build" -name '*.o' -path "$2" | head -1)
  [ -n "$obj" ] || { echo "(no object matches $2)"; return 1; }
  cuobjdump -sass "$obj" >"$log/sass-$1.txt" 2>&1
  grep -oE "$3" "$log/sass-$1.txt" | sort | uniq -c | awk '{printf "%s %s  ", $2, $1}'
}

# ---- tests, checks, sanitizers ------------------------------------------------------
# run_gtests NAME FILTER LIMIT [ENV=VALUE ...]: $build's attn_tests with that
# filter under LIMIT seconds (ENV set), output in $log/NAME.log; its rc.
run_gtests() {
  env "${@:4}" timeout "$3" "$build/tests/attn_tests" --gtest_filter="$2" >"$log/$1.log" 2>&1
}
# gtest_lines LOG: the lines worth reading of a GoogleTest log (verdicts,
# failures, the figures the GPU tests print per case).
gtest_lines() {
  grep -E '^\[  (PASSED|FAILED) |FAILED|Failure|differs|grid cases|grid case [0-9]|case [0-9]+:|(out|lse|dq|dk|dv): |^(fwd|bwd) ' "$1" | head -60
}
# run_checks FILE LIMIT [ARGS ...]: each `attn check` case of FILE (one a line,
# '#' comments) with ARGS before it, each under LIMIT seconds, so a kernel
# that hangs shows as its case; $log/checks.txt lists them "ok" / "FAIL",
# $log/checks.log has their output. Sets checks_pass and checks_fail.
run_checks() {
  local file=$1 limit=$2 line
  shift 2
  checks_pass=0 checks_fail=0
  : >"$log/checks.txt"
  while IFS= read -r line; do
    case "$line" in '' | '#'*) continue ;; esac
    # shellcheck disable=SC2086  # a case is a list of flags
    if timeout "$limit" "$build/attn" check "$@" $line >>"$log/checks.log" 2>&1; then
      checks_pass=$((checks_pass + 1)) && echo "ok    $line" >>"$log/checks.txt"
    else
      checks_fail=$((checks_fail + 1)) && echo "FAIL  $line" >>"$log/checks.txt"
    fi
  done <"$file"
}
# sanitize NAME TARGET [ENV=VALUE ...]: each compute-sanitizer tool of
# $SANITIZERS (default "memcheck racecheck initcheck": the three the project
# runs on new kernels, on small problems) over TARGET, each run under
# ${SANITIZE_TIMEOUT:-75} s with ENV set. TARGET is an `attn check` case (its
# flags: "--backend flash_sm90 --format thd ..."), a .py file (python3 on the
# staged extension), or else a GoogleTest filter of $build's attn_tests.
# With SANITIZE_IGNORE (a regex of kernel names), a run fails only on reports
# in other kernels. Logs $log/TOOL-NAME.log; a row per target in $log/sanitize.txt;
# sanitize_runs[TOOL] and sanitize_fails[TOOL] count its runs and failures.
declare -A sanitize_runs=() sanitize_fails=()
sanitize() {
  local name=$1 target=$2 tool rc row cmd=()
  shift 2
  case $target in
    -*) read -ra cmd <<<"$target" && cmd=("$build/attn" check "${cmd[@]}") ;;
    *.py) cmd=(python3 "$target") ;;
    *) cmd=("$build/tests/attn_tests" "--gtest_filter=$target") ;;
  esac
  row=$(printf '%-12s' "$name")
  for tool in ${SANITIZERS:-memcheck racecheck initcheck}; do
    # shellcheck disable=SC2086  # SANITIZE_FLAGS: extra compute-sanitizer options, split into words
    env PYTHONPATH=/tmp/py "$@" timeout "${SANITIZE_TIMEOUT:-75}" compute-sanitizer --tool "$tool" ${SANITIZE_FLAGS:-} \
      --error-exitcode 9 "${cmd[@]}" >"$log/$tool-$name.log" 2>&1
    rc=$?
    [ "$rc" = 9 ] && [ -n "${SANITIZE_IGNORE:-}" ] && rc=$(unignored_reports "$log/$tool-$name.log")
    sanitize_runs[$tool]=$((${sanitize_runs[$tool]:-0} + 1))
    sanitize_fails[$tool]=$((${sanitize_fails[$tool]:-0} + (rc != 0)))
    case $rc in 0) row+=" $tool ok" ;; 124) row+=" $tool TIMEOUT" ;; *) row+=" $tool FAIL(rc $rc)" ;; esac
  done
  echo "$row  [${*:+$* }$target]" >>"$log/sanitize.txt"
}
# unignored_reports LOG: 0 when every report in LOG lies in a kernel matching
# $SANITIZE_IGNORE (each report's first frame, its "at" line), else 9. A line
# per kernel with its report count is appended to LOG. Reports without a device
# frame (API errors) count as ours.
unignored_reports() {
  local frames ours
  frames=$(grep -A1 -E '^========= [A-Z]' "$1" | grep -E '^=========     at ' | sed -E 's/^=========     at //; s/\+0x[0-9a-f]+.*//')
  ours=$(grep -E '^========= [A-Z]' "$1" | grep -cvE 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY|COMPUTE-SANITIZER')
  { echo "== reports per kernel (ignored: $SANITIZE_IGNORE)"; sort <<<"$frames" | uniq -c; } >>"$1"
  ours=$((ours - $(grep -cE "$SANITIZE_IGNORE" <<<"$frames")))
  [ "$ours" -gt 0 ] && echo 9 || echo 0
}
# sanitize_report: the sanitizer runs so far (one row per target, the tools'
# error summaries), and a summary verdict per tool.
sanitize_report() {
  local tool
  echo "== compute-sanitizer (${SANITIZE_TIMEOUT:-75} s per run)"
  cut -c1-160 "$log/sanitize.txt"
  grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$log"/*check-*.log 2>/dev/null | sort | uniq -c
  for tool in memcheck racecheck initcheck synccheck; do
    [ -n "${sanitize_runs[$tool]:-}" ] || continue
    if [ "${sanitize_fails[$tool]}" -eq 0 ]; then
      note "$tool" "ok   clean on ${sanitize_runs[$tool]} targets"
    else
      fail "$tool" "on ${sanitize_fails[$tool]} of ${sanitize_runs[$tool]} targets"
    fi
  done
}
