#!/usr/bin/env bash
# The one entry point ON the device machine (docs/DEVICE.md): runs suites in
# one call and prints each suite's summary table last. The steps the suites
# share (environment, configure and build, ptxas report, staging the Python
# extension, checks, sanitizers, summary, log packing) are scripts/device_lib.sh.
#
# Usage there:  bash scripts/device.sh [SUITE [ARGS ...]] [+ SUITE [ARGS ...]] ...
#   (no suite: test). From the session, after `bash scripts/prepare_device.sh`
#   here: run(command="bash scripts/device.sh flash_sm90 --quick", carry=[".carry"]).
#   bash scripts/device.sh list          the suites, one line each; runs nothing
#   bash scripts/device.sh --dry-run ... what would run, with its arguments
#
# Suites (build folder in brackets; a warm machine keeps them between calls):
#   test                      [build-device] everything built with cuDNN, ctest
#                             (GPU tests, 240 s guard), the `attn check` cases of
#                             scripts/gpu_checks.txt, pytest tests/python on this
#                             build's extension (240 s guard).
#   sanitize [TARGET ...]     [build-device] $SANITIZERS over each TARGET: an
#                             `attn check` case ("--backend X --format thd ..."
#                             as one word), a .py file, or a GoogleTest filter.
#                             Default: the reduced grid, every GPU backend
#                             forced on a causal GQA bshd case and a packed
#                             windowed case with empty and length-1 sequences,
#                             forward and backward, under memcheck, racecheck,
#                             initcheck and synccheck; the CUDA graph tests and
#                             UncheckedSeqlens.* under memcheck; all four tools
#                             on tests/python/sanitize_rotary.py.
#   flash_sm80 [COMPARE ...]  [build-kernels] ptxas report, the sm80 primitive,
#                             grid and backward tests (the grid again with
#                             ATTN_SM80_BWD_GROUP_CHUNK=3), sanitizers on eight
#                             small cases (sm86 simulated on one), HMMA in the
#                             d 128 backward's SASS, then bench/compare.py
#                             --backend flash_sm80 COMPARE (420 s guard).
#   flash_sm90 [COMPARE ...]  [build-kernels] per pass in $ATTN_PASS (fwd, bwd,
#                             default both): ptxas report and SASS counts of the
#                             d 128 kernel (bwd: d 256's too); fwd: the edge cases of
#                             scripts/sm90_checks.txt first (a failure stops the
#                             suite unless ATTN_KEEP_GOING=1); the grid and the
#                             pass's tests; sanitizers on small cases (150 s per
#                             run); then bench/compare.py --backend flash_sm90
#                             (fwd: --fwd-only; bwd: --dims 128 --no-flex) COMPARE.
#   ab BACKEND VARIANT ...    [build-ab] an A/B of kernel variants in one call:
#                             each VARIANT is a folder .variants/NAME/ (git-ignored:
#                             name ".variants" in carry) of files replacing their
#                             namesakes in src/backends/BACKEND/, and under
#                             .variants/NAME/src/ files replacing theirs in src/
#                             (a shared primitive); NAME may join folders with '+'
#                             (applied left to right); a missing folder = the tree
#                             as it is. Per variant: only the changed objects are
#                             rebuilt (the extension), then bench/compare.py
#                             --backend BACKEND $COMPARE_ARGS, timed against the
#                             same-run peers. No correctness checks: the winner
#                             goes through its backend's suite. src/ is the tree
#                             again afterwards, so a later build in the same
#                             command is the tree's (AB_KEEP_LAST=1: the last
#                             variant's, for checks on its build).
#   builds [BACKEND ...]      [build-kernels, build-base] this tree against the
#                             library in .carry/base (prepare_device.sh --base
#                             REV): per flash kernel object, whether its SASS is
#                             the same and the two ptxas reports side by side;
#                             then bench/diagnostics/ab_builds.py (both builds in
#                             one process, an A/A pair) for each BACKEND
#                             (default flash_sm90 flash_sm80), $AB_BUILDS_ARGS.
#   cp                        [build-ext] multi-GPU (kind nvidia-h200-x2/-x4 or
#                             nvidia-h100-x2/-x4): the context-parallel tests under
#                             torchrun, every case ATTN_CP_REPEAT times (420 s),
#                             bench/cp.py (240 s, two GPUs or more), test_cp.py's CPU parts.
#   python_bench              [build-ext] bench/overhead.py and bench/layer.py,
#                             JSON beside their logs.
#   profile [PASS:D ...]      [build-kernels] ncu metrics (time, tensor pipe,
#                             issue, stall latencies, bank conflicts) of the
#                             backend's kernel and its peer's on the problem of
#                             bench/diagnostics/stalls.py; default bwd:64 bwd:128.
#   stalls [PASS:D ...]       [build-kernels] ncu's warp-state sampling of the
#                             same kernels: stall reasons and the hottest SASS
#                             lines (stalls.py report); default bwd:128 fwd:256
#                             (flash_sm80), bwd:128 (flash_sm90).
#   PASS:D is fwd:D or bwd:D (a bare D means bwd:D).
#
# Environment (all optional):
#   COMPARE_ARGS         ab: bench/compare.py's arguments (e.g. "--quick --no-flex
#                        --dims 64,128", "--fwd-only")
#   AB_BENCH, AB_GREP    ab: a shell command timed instead of compare.py (e.g.
#                        "python3 bench/diagnostics/profile_one.py --backward"),
#                        and the regex of its output lines to show
#   AB_TIMEOUT           ab: seconds per variant's bench (300)
#   AB_KEEP_LAST=1       ab: leave the last variant's files in src/ (the tree's are
#                        restored otherwise, and a later build would test the tree)
#   ATTN_PASS            flash_sm90: fwd, bwd or both (both)
#   ATTN_SKIP_BENCH=1    flash_sm80, flash_sm90: stop after the checks
#   ATTN_KEEP_GOING=1    flash_sm90: go on after a failed edge case
#   SANITIZERS           compute-sanitizer tools (memcheck racecheck initcheck;
#                        sanitize's default grid adds synccheck)
#   SANITIZE_BACKENDS    sanitize: the default grid's backends (all four GPU ones)
#   SANITIZE_EXTRAS=0    sanitize: the default grid without its gtest and rotary targets
#   SANITIZE_TIMEOUT     seconds per sanitizer run (75; flash_sm90 150)
#   ATTN_CP_TESTS_ONLY=1 / ATTN_CP_BENCH_ONLY=1   cp: one half only
#   ATTN_CP_REPEAT       cp: repetitions of every cp_worker.py case, ranks out of step (20)
#   ATTN_BENCH           python_bench: overhead, layer, all (all), sinks
#                        (bench/sinks.py, $ATTN_SINKS_ARGS, then bench/layer.py --gptoss),
#                        or none (build and stage /tmp/py for a command after it)
#   ATTN_LAYER_ARGS      python_bench: bench/layer.py's arguments
#   ATTN_PYTEST          python_bench: pytest these paths first; test: these paths instead of
#                        tests/python (a shorter suite when little device time is left)
#   ATTN_ARCHS           cp, python_bench: CUDA architectures (90a-real)
#   ATTN_STALLS_BACKEND  profile, stalls: flash_sm80 (default) or flash_sm90
#   ATTN_STALLS_PEER     profile, stalls: fa2 or cudnn (default fa2 beside
#                        flash_sm80, cudnn beside flash_sm90)
#   SEQLEN               profile, stalls: sequence length (4096)
#   ATTN_STALLS_CAUSAL   profile, stalls: 1 for a causal problem (default non-causal)
# Logs: $OUT/SUITE/ while it runs, then $OUT/SUITE-logs.tgz (a device call
# brings back at most 8 files); figures (*.json, *.png) stay in $OUT/SUITE/.
# Clocks and other card settings are left alone (METHOD.md).
# shellcheck disable=SC2317,SC2119  # suites are called by name ("suite_$s"); stage_python's argument is optional
set -uo pipefail
cd "$(dirname "$0")/.." || exit

suites_help() {
  cat <<'LIST'
test                      build everything (cuDNN on), ctest, gpu_checks.txt, pytest (default)
sanitize [TARGET ...]     compute-sanitizer over attn check cases, .py files or gtest filters
flash_sm80 [COMPARE ...]  flash_sm80: ptxas, tests, sanitizers, HMMA count, compare.py
flash_sm90 [COMPARE ...]  flash_sm90 ($ATTN_PASS fwd/bwd/both): ptxas, SASS, checks, tests, sanitizers, compare.py
ab BACKEND VARIANT ...    A/B of .variants/ folders, compare.py ($COMPARE_ARGS) or $AB_BENCH per variant
builds [BACKEND ...]      this tree against .carry/base: SASS and ptxas per kernel, ab_builds.py timing
cp                        multi-GPU: context-parallel tests under torchrun, bench/cp.py
python_bench              bench/overhead.py and bench/layer.py ($ATTN_BENCH)
profile [PASS:D ...]      ncu metrics of a backend's kernel beside its peer's ($ATTN_STALLS_BACKEND)
stalls [PASS:D ...]       ncu stall sampling of the same kernels, hottest SASS lines
LIST
}

# ---- test ------------------------------------------------------------------------
suite_test() {
  build_attn full || return 1
  local t0 ctest_rc py_rc
  # Time guards keep the suite inside one device call (10 minutes), so the
  # summary always prints; a guard that fires reads as a failure.
  t0=$(date +%s)
  timeout 240 ctest --test-dir "$build" -V -j 4 >"$log/ctest.log" 2>&1  # -V: the tests' printed figures too
  ctest_rc=$?
  verdict ctest "$ctest_rc" "$(grep -E 'tests passed|tests failed' "$log/ctest.log") ($(since "$t0") s)"
  t0=$(date +%s)
  run_checks scripts/gpu_checks.txt 120  # every GPU backend that claims the case, against the reference
  verdict checks "$checks_fail" "$checks_pass passed, $checks_fail failed ($(since "$t0") s)"
  # The Python package on the GPU: CUDA tensors from PyTorch, CuPy and JAX.
  t0=$(date +%s)
  stage_python
  # shellcheck disable=SC2086  # a list of paths
  PYTHONPATH=/tmp/py timeout 240 python3 -m pytest -q -rs -p no:cacheprovider ${ATTN_PYTEST:-tests/python} \
    >"$log/python.log" 2>&1
  py_rc=$?
  verdict python "$py_rc" "$(grep -E '[0-9]+ (passed|failed)' "$log/python.log" | tail -1) ($(since "$t0") s)"
  echo "== failures / skips"
  grep -E '\*\*\*|\(Skipped\)|Not Run' "$log/ctest.log" | head -40
  echo "== figures the GPU tests print"
  grep -hE "grid cases compared|forward > backward|cudnn dropout|cudnn plan cache|window boundaries|soak:" "$log/ctest.log" | sort -u
  echo "== attn check cases"
  cat "$log/checks.txt"
  return 0
}

# ---- sanitize --------------------------------------------------------------------
suite_sanitize() {
  build_attn full || return 1
  stage_python
  local i=0 target
  if [ $# -eq 0 ]; then
    local tools=${SANITIZERS:-memcheck racecheck initcheck synccheck} b
    for b in ${SANITIZE_BACKENDS:-flash_sm90 flash_sm80 cudnn unfused}; do
      # cuDNN's own kernels (its generated SDPA kernels, cudnn::fusion's) are
      # not ours to fix: racecheck, initcheck and synccheck report inside them
      # (docs/RELIABILITY.md); attn's kernels around them are checked. memcheck,
      # racecheck and synccheck skip them; initcheck must see their writes
      # (an unchecked kernel's stores leave memory "uninitialized" for the
      # kernels after it), so it runs them and ignores the reports inside them.
      local case tool flags ignore
      for case in "gqa|--batch 2 --seqlen 130 --heads 4 --kv-heads 2 --head-dim 64 --mask causal --seed 3 --backward" \
        "thd|--format thd --seqlens 5,0,1,170 --heads 4 --kv-heads 2 --head-dim 128 --mask padding_causal --window 40,0 --seed 5 --backward"; do
        for tool in $tools; do
          flags="" ignore=""
          if [ "$b" = cudnn ] && [ "$tool" = initcheck ]; then
            flags="--print-limit 100000" ignore="cudnn_generated|(^| )cudnn::"
          elif [ "$b" = cudnn ]; then
            flags="--kernel-name-exclude kns=cudnn_generated --kernel-name-exclude kns=_ZN5cudnn"
          fi
          SANITIZE_FLAGS=$flags SANITIZE_IGNORE=$ignore SANITIZERS=$tool sanitize "$b-${case%%|*}" "--backend $b ${case#*|}"
        done
      done
    done
    # Unchecked cu_seqlens must not make a kernel read or write outside the
    # tensors (tests/gpu/test_unchecked_seqlens.cpp); captured graphs replayed.
    if [ "${SANITIZE_EXTRAS:-1}" != 0 ]; then
      SANITIZERS=memcheck sanitize unchecked 'UncheckedSeqlens.*'
      SANITIZERS=memcheck sanitize graphs '*CudaGraphs*'
      SANITIZERS=$tools sanitize rotary tests/python/sanitize_rotary.py
    fi
  fi
  for target in "$@"; do
    i=$((i + 1))
    sanitize "target$i" "$target"
  done
  sanitize_report
  return 0
}

# ---- flash_sm80 ------------------------------------------------------------------
suite_flash_sm80() {
  build_attn kernels attn_tests attn_cli _C || return 1
  local t0 rc small nodrop hmma
  ptxas_report 'flash_(fwd|bwd)_kernel<' >"$log/ptxas.txt"
  ptxas_note 'flash_(fwd|bwd)_kernel<' sm_90a
  t0=$(date +%s)
  run_gtests gpu_tests 'Sm80*:*BackendGrid*flash_sm80*:FlashSm80*' 400
  rc=$?
  # The grid again with d 256's grid in chunks of 3 pairs for every case (short last chunks, MHA too).
  run_gtests gpu_tests_chunk3 '*BackendGrid*flash_sm80*' 300 ATTN_SM80_BWD_GROUP_CHUNK=3
  rc=$((rc + $?))
  verdict "gpu tests" "$rc" "$(grep -cE '^\[  PASSED' "$log/gpu_tests.log") + $(grep -cE '^\[  PASSED' \
    "$log/gpu_tests_chunk3.log") PASSED lines (the second: ATTN_SM80_BWD_GROUP_CHUNK=3) ($(since "$t0") s)"
  t0=$(date +%s)
  small="--backend flash_sm80 --format thd --seqlens 5,0,33,170 --heads 4 --kv-heads 2 --head-dim 64 --mask padding_causal --window 40,0 --dropout 0.1 --seed 5 --backward"
  nodrop=${small/--dropout 0.1 /}
  sanitize d64 "$small"
  # The same case on a simulated sm86 (99 KiB: the d 64 backward's dropout
  # build, 64-row tiles, also without dropout there).
  sanitize d64-sm86 "$small" ATTN_SIMULATE_DEVICE=sm86
  # d 256 on this GPU's forward build (the narrow 64 x 64 one on Hopper) and
  # d 128 (the forward's 128 x 32 dropout build); the backward's dropout
  # builds of both, then their main builds (no dropout).
  sanitize d256 "${small/--head-dim 64/--head-dim 256}"
  sanitize d128 "${small/--head-dim 64/--head-dim 128}"
  sanitize d256main "${nodrop/--head-dim 64/--head-dim 256}"
  sanitize d128main "${nodrop/--head-dim 64/--head-dim 128}"
  # Causal GQA without a window at d 128: the grid with the KV tiles slowest (bwd_config.h).
  sanitize gqa "--backend flash_sm80 --batch 2 --seqlen 300 --heads 4 --kv-heads 1 --head-dim 128 --mask causal --seed 7 --backward"
  # d 256's chunked grid (bwd_config.h): 6 (KV head, sequence) pairs in chunks of 4, so the last chunk is short.
  sanitize gqa256 "--backend flash_sm80 --batch 3 --seqlen 300 --heads 8 --kv-heads 2 --head-dim 256 --mask causal --seed 7 --backward" \
    ATTN_SM80_BWD_GROUP_CHUNK=4
  note sanitizers "$(since "$t0") s"
  hmma=$(sass_counts bwd128 '*attn_flash_sm80_bwd_128_128.dir/*' 'HMMA')
  note sass "d 128 backward: ${hmma:-none}"
  bench flash_sm80 420 "$@"
  echo "== ptxas (flash_sm80 kernels on sm_90a; sm_80 too in ptxas.txt)"
  grep sm_90a "$log/ptxas.txt" | head -40
  echo "== gpu tests"
  gtest_lines "$log/gpu_tests.log"
  sanitize_report
  bench_tail 49
  return 0
}

# bench BACKEND LIMIT [COMPARE ...]: bench/compare.py --backend BACKEND on
# the staged extension, under LIMIT seconds, unless ATTN_SKIP_BENCH=1; JSON and
# PNG in $log.
bench() {
  local backend=$1 limit=$2 t0
  shift 2
  if [ "${ATTN_SKIP_BENCH:-0}" = 1 ]; then
    note compare "skipped (ATTN_SKIP_BENCH=1)"
    return
  fi
  t0=$(date +%s)
  stage_python
  PYTHONPATH=/tmp/py PYTHONUNBUFFERED=1 timeout "$limit" python3 bench/compare.py --backend "$backend" \
    --out "$log" "$@" >"$log/compare.log" 2>&1
  verdict compare $? "compare.py --backend $backend $* ($(since "$t0") s)"
}
bench_tail() {
  [ -f "$log/compare.log" ] || return 0
  echo "== compare"
  tail -"$1" "$log/compare.log"
}

# ---- flash_sm90 ------------------------------------------------------------------
suite_flash_sm90() {
  local pass=${ATTN_PASS:-both} fwd=0 bwd=0 t0 rc filter="" compare=() sass
  case $pass in
    fwd) fwd=1 compare=(--fwd-only) ;;
    bwd) bwd=1 compare=(--dims 128 --no-flex) ;;
    both) fwd=1 bwd=1 ;;
    *) fail ATTN_PASS "is fwd, bwd or both, not $pass"; return 2 ;;
  esac
  build_attn kernels attn_tests attn_cli _C || return 1
  ptxas_note "flash_($([ "$fwd" = 1 ] && echo fwd)|$([ "$bwd" = 1 ] && echo bwd))_sm90_kernel<"
  : "${SANITIZE_TIMEOUT:=150}"  # each run's limit here, unless the caller set one
  if [ "$fwd" = 1 ]; then
    sass=$(sass_counts fwd128 '*attn_flash_sm90_fwd_128_128.dir/*' 'HGMMA|UTMALDG|USETMAXREG|LDL|STL')
    note sass "d 128 forward: $sass"
    # The edge cases first, each under a short limit.
    t0=$(date +%s)
    run_checks scripts/sm90_checks.txt 30 --backend flash_sm90
    verdict checks "$checks_fail" "$checks_pass passed, $checks_fail failed ($(since "$t0") s)"
    if [ "$checks_fail" -ne 0 ] && [ "${ATTN_KEEP_GOING:-0}" != 1 ]; then
      cat "$log/checks.txt"
      return 1
    fi
  fi
  if [ "$bwd" = 1 ]; then
    sass=$(sass_counts bwd128 '*attn_flash_sm90_bwd_128_128.dir/*' 'HGMMA|UTMALDG|USETMAXREG|REDG|LDL|STL')
    note sass "d 128 backward: $sass"
    sass=$(sass_counts bwd256 '*attn_flash_sm90_bwd_256_256.dir/*' 'HGMMA|UTMALDG|USETMAXREG|REDG|LDL|STL')
    note sass "d 256 backward (the wide tiles): $sass"
  fi
  [ "$fwd" = 1 ] && filter+="Sm90*:"
  [ "$bwd" = 1 ] && filter+="FlashSm90Backward*:CrossPass*:"
  t0=$(date +%s)
  run_gtests gpu_tests "$filter*BackendGrid*flash_sm90*" 400
  rc=$?
  verdict "gpu tests" "$rc" "$(grep -cE '^\[  PASSED' "$log/gpu_tests.log") PASSED line ($(since "$t0") s)"
  t0=$(date +%s)
  if [ "$fwd" = 1 ]; then
    # A small thd case at d 64, and one at d 128 with more work items than
    # SMs, so persistent CTAs take several items (the Q double buffer, the
    # epilogue under the next item's Q.K^T, items with no rows).
    sanitize fwd-d64 "--backend flash_sm90 --format thd --seqlens 5,0,33,170 --heads 4 --kv-heads 2 --head-dim 64 --mask padding_causal --window 40,0 --dropout 0.1 --seed 5"
    sanitize fwd-d128 "--backend flash_sm90 --format thd --seqlens 600,5,0,700 --heads 16 --kv-heads 4 --head-dim 128 --mask padding_causal --seed 6"
  fi
  if [ "$bwd" = 1 ]; then
    sanitize bwd-causal "--backend flash_sm90 --backward --format bshd --batch 2 --seqlen 150 --seqlen-kv 260 --heads 4 --kv-heads 2 --head-dim 128 --mask causal_bottom_right"
    sanitize bwd-window "--backend flash_sm90 --backward --format sbhd --batch 1 --seqlen 300 --heads 2 --head-dim 64 --mask no_mask --window 70,20"
    sanitize bwd-packed "--backend flash_sm90 --backward --format thd --seqlens 130,0,1,200 --heads 4 --kv-heads 2 --head-dim 128 --mask padding_causal"
    # Dropout: d 64 draws a tile's keep bits a tile ahead, across the query
    # heads of GQA 8's head split; d 128 with softcap over packed sequences.
    sanitize bwd-dropout "--backend flash_sm90 --backward --format bshd --batch 1 --seqlen 200 --heads 8 --kv-heads 1 --head-dim 64 --mask causal --dropout 0.15 --seed 14"
    sanitize bwd-drop-mods "--backend flash_sm90 --backward --format thd --seqlens 200,0,1,64 --heads 4 --kv-heads 2 --head-dim 128 --mask padding_causal --softcap 20 --dropout 0.3 --seed 13"
    # The wide tiles' dropout (flash_sm80's score code, 1 / (1 - p) out of the loop).
    sanitize bwd-drop-256 "--backend flash_sm90 --backward --format bshd --batch 1 --seqlen 130 --heads 2 --head-dim 256 --mask causal --dropout 0.2 --seed 15"
  fi
  note sanitizers "$(since "$t0") s"
  bench flash_sm90 420 "${compare[@]}" "$@"
  echo "== ptxas (flash_sm90 kernels)"
  [ "$fwd" = 1 ] && ptxas_report 'flash_fwd_sm90_kernel<'
  [ "$bwd" = 1 ] && ptxas_report 'flash_bwd_sm90_kernel<'
  echo "== gpu tests"
  gtest_lines "$log/gpu_tests.log"
  if [ "$fwd" = 1 ]; then
    echo "== attn check ($checks_pass passed, $checks_fail failed)"
    cat "$log/checks.txt"
    grep -E "FAIL|mismatch|error" "$log/checks.log" | head -20
  fi
  sanitize_report
  bench_tail 40
  return 0
}

# ---- ab --------------------------------------------------------------------------
suite_ab() {
  local backend=$1 dir saved built v part t0 rc i=0 files=()
  shift
  dir=src/backends/$backend
  [ -d "$dir" ] || { fail ab "no backend folder $dir"; return 2; }
  configure_attn ab || return 1
  saved=$(mktemp -d)
  cp -r src/. "$saved/"
  # build-ab outlives the call, and this call's tree may be older than its
  # objects: a file that differs from what build-ab last compiled (kept in
  # build-ab/ab-src) gets a new time stamp, so ninja rebuilds what depends on
  # it (without this, a variant left by the previous call was timed as
  # "base"); with no record, every file.
  built=$build/ab-src
  mapfile -t files < <(tree_files src)
  for f in "${files[@]}"; do cmp -s "src/$f" "$built/$f" 2>/dev/null || touch "src/$f"; done
  for v in "$@"; do
    mapfile -t files < <(tree_files "$saved")
    copy_changed "$saved" src "${files[@]}"
    IFS='+' read -ra parts <<<"$v"
    for part in "${parts[@]}"; do
      [ -d ".variants/$part" ] || continue
      mapfile -t files < <(cd ".variants/$part" && find . -maxdepth 1 -type f)
      copy_changed ".variants/$part" "$dir" "${files[@]}"
      if [ -d ".variants/$part/src" ]; then
        mapfile -t files < <(tree_files ".variants/$part/src")
        copy_changed ".variants/$part/src" src "${files[@]}"
      fi
    done
    t0=$(date +%s)
    i=$((i + 1))
    if ! BUILD_LOG=$log/build-$i-$v.log BUILD_KEY="build $v" build_targets _C; then
      echo "######## $v: build failed"
      continue
    fi
    rm -rf "$built" && cp -r src "$built"
    stage_python
    if [ -n "${AB_BENCH:-}" ]; then  # another bench command; AB_GREP picks its lines to show
      PYTHONPATH=/tmp/py timeout "${AB_TIMEOUT:-300}" bash -c "$AB_BENCH" >"$log/compare-$i-$v.log" 2>&1
    else
      # One folder per run, named in what the device tool brings back (no '+').
      mkdir -p "$log/$i-${v//+/_}"
      # shellcheck disable=SC2086  # COMPARE_ARGS is a list of flags
      PYTHONPATH=/tmp/py timeout "${AB_TIMEOUT:-300}" python3 bench/compare.py --backend "$backend" \
        --out "$log/$i-${v//+/_}" ${COMPARE_ARGS:-} >"$log/compare-$i-$v.log" 2>&1
    fi
    rc=$?
    echo "######## $v ($(since "$t0") s, build and bench)"
    grep -E "${AB_GREP:-^ *(64|96|128|192|256) |geomean|ratio}" "$log/compare-$i-$v.log" | cut -c1-150
    verdict "$v" "$rc" "$(since "$t0") s build and bench; $(grep -m1 -E 'geomean' "$log/compare-$i-$v.log" | cut -c1-90)"
  done
  if [ "${AB_KEEP_LAST:-0}" != 1 ]; then
    mapfile -t files < <(tree_files "$saved")
    copy_changed "$saved" src "${files[@]}"
  fi
  rm -rf "$saved"
  return 0
}
# copy_changed FROM TO FILE...: FROM/FILE over TO/FILE where the contents
# differ (a copy gets a new time stamp, which is what makes ninja rebuild).
copy_changed() {
  local from=$1 to=$2 f
  shift 2
  for f in "$@"; do
    cmp -s "$from/$f" "$to/$f" || { mkdir -p "$(dirname "$to/$f")" && cp "$from/$f" "$to/$f"; }
  done
}
tree_files() { (cd "$1" && find . -type f); }

# ---- cp --------------------------------------------------------------------------
suite_cp() {
  local gpus t0 rc
  gpus=$(gpu_count)
  build_attn ext _C || return 1
  grep -E "attn: (context|NCCL|cudnn)" "$log/configure.log"
  stage_python
  export PYTHONPATH=/tmp/py
  t0=$(date +%s)
  if [ "${ATTN_CP_BENCH_ONLY:-0}" = 1 ]; then  # the benchmark alone (tests passed on this commit's code)
    note "cp tests" "skipped (ATTN_CP_BENCH_ONLY=1)"
  else
    ATTN_CP_REPEAT=${ATTN_CP_REPEAT:-20} timeout 420 \
      torchrun --nproc-per-node "$gpus" tests/python/cp_worker.py >"$log/cp_tests.log" 2>&1
    rc=$?
    echo "== cp tests"
    grep -E "^(cp_worker|ok|FAIL)|rank [0-9]+:|Error|error" "$log/cp_tests.log" | head -60
    verdict "cp tests" "$rc" "torchrun x$gpus, ${ATTN_CP_REPEAT:-20} repetitions per case ($(since "$t0") s)"
  fi
  t0=$(date +%s)
  if [ "${ATTN_CP_TESTS_ONLY:-0}" = 1 ] || [ "$gpus" -lt 2 ]; then  # one GPU: a 1-rank ring, no benchmark
    note "cp bench" "skipped ($gpus GPU(s), ATTN_CP_TESTS_ONLY=${ATTN_CP_TESTS_ONLY:-0})"
  else
    timeout 240 torchrun --nproc-per-node "$gpus" bench/cp.py >"$log/cp_bench.log" 2>&1
    rc=$?
    echo "== cp bench"
    grep -vE "^\s*$|W[0-9]{4}|warnings.warn|OMP_NUM_THREADS|\*{5}" "$log/cp_bench.log" | tail -15
    verdict "cp bench" "$rc" "bench/cp.py x$gpus ($(since "$t0") s)"
  fi
  python3 -m pytest -q -p no:cacheprovider tests/python/test_cp.py -k "not two_gpus" >"$log/pytest.log" 2>&1
  verdict pytest $? "test_cp.py's CPU parts: $(tail -1 "$log/pytest.log")"
  return 0
}

# ---- python_bench ----------------------------------------------------------------
suite_python_bench() {
  local which=${ATTN_BENCH:-all}
  build_attn ext _C || return 1
  stage_python
  export PYTHONPATH=/tmp/py
  if [ -n "${ATTN_PYTEST:-}" ]; then  # e.g. ATTN_PYTEST="tests/python/test_rotary.py": the GPU tests first
    # shellcheck disable=SC2086  # a list of paths
    python3 -m pytest -q -p no:cacheprovider $ATTN_PYTEST >"$log/pytest.txt" 2>&1
    verdict pytest $? "$ATTN_PYTEST: $(tail -1 "$log/pytest.txt")"
  fi
  [ "$which" = none ] && return 0  # built and staged for a command after this one
  if [ "$which" = sinks ]; then
    # shellcheck disable=SC2086  # a list of flags
    python3 bench/sinks.py --out "$log" ${ATTN_SINKS_ARGS:-} | tee "$log/sinks.txt"
    verdict sinks "${PIPESTATUS[0]}" "bench/sinks.py ${ATTN_SINKS_ARGS:-}"
    python3 bench/layer.py --out "$log/gptoss.json" --skip-layer --skip-transformers --gptoss --iters 10 \
      >"$log/gptoss.txt" 2>&1
    verdict gptoss $? "bench/layer.py --gptoss: $(grep -m1 'speedup' "$log/gptoss.txt")"
    tail -4 "$log/gptoss.txt"
    return 0
  fi
  if [ "$which" != layer ]; then
    python3 bench/overhead.py --json "$log/overhead.json" | tee "$log/overhead.txt"
    verdict overhead $? "bench/overhead.py"
  fi
  if [ "$which" != overhead ]; then
    # shellcheck disable=SC2086  # a list of flags
    python3 bench/layer.py --out "$log/layer.json" ${ATTN_LAYER_ARGS:-} >"$log/layer.txt" 2>&1
    verdict layer $? "bench/layer.py ${ATTN_LAYER_ARGS:-}"
    tail -45 "$log/layer.txt"
  fi
  return 0
}

# ---- profile, stalls ---------------------------------------------------------------
# The problem is bench/diagnostics/stalls.py's (bf16, batch 16384/SEQLEN, heads
# 2048/D, non-causal), run by the backend (IMPL attn) and by its peer.
diag_setup() {
  diag_backend=${ATTN_STALLS_BACKEND:-flash_sm80}
  case $diag_backend in
    flash_sm80) diag_peer=${ATTN_STALLS_PEER:-fa2} ;;
    flash_sm90) diag_peer=${ATTN_STALLS_PEER:-cudnn} ;;
    *) fail ATTN_STALLS_BACKEND "is flash_sm80 or flash_sm90, not $diag_backend"; return 2 ;;
  esac
  export ATTN_STALLS_BACKEND=$diag_backend
  build_attn kernels _C && stage_python
}
# diag_kernel IMPL PASS: ncu's -k filter for the kernel that IMPL (attn or
# the peer) launches in PASS.
diag_kernel() {
  local who=$1
  [ "$who" = attn ] && who=$diag_backend
  case "$who/$2" in
    flash_sm80/bwd) echo 'regex:flash_bwd_kernel' ;;
    flash_sm80/fwd | fa2/fwd) echo 'regex:flash_fwd_kernel' ;;  # FA2's has the same name; one runs per process
    fa2/bwd) echo 'regex:^flash_bwd_dq_dk_dv' ;;
    flash_sm90/fwd) echo 'regex:flash_fwd_sm90' ;;
    flash_sm90/bwd) echo 'regex:flash_bwd_sm90' ;;
    cudnn/fwd) echo 'regex:cudnn' ;;
    cudnn/bwd) echo 'regex:cudnn_generated.*bprop' ;;
  esac
}
# diag_jobs DEFAULT [PASS:D ...]: the jobs as "PASS D" lines (a bare D is bwd).
diag_jobs() {
  local default=$1 job jobs
  shift
  if [ $# -gt 0 ]; then jobs=("$@"); else read -ra jobs <<<"$default"; fi
  for job in "${jobs[@]}"; do
    case $job in
      *:*) echo "${job%%:*} ${job##*:}" ;;
      *) echo "bwd $job" ;;
    esac
  done
}
suite_profile() {
  diag_setup || return 1
  local pass d impl rep rc
  local metrics="gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,\
sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_eligible.avg.per_cycle_active,\
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,\
l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed_op_ldsm.sum,launch__registers_per_thread,\
smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,\
smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,\
smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio,smsp__average_warp_latency_issue_stalled_wait.ratio,\
smsp__average_warp_latency_issue_stalled_not_selected.ratio,smsp__average_warp_latency_issue_stalled_lg_throttle.ratio,\
smsp__average_warp_latency_issue_stalled_dispatch_stall.ratio,smsp__average_warp_latency_issue_stalled_selected.ratio,\
smsp__average_warp_latency_issue_stalled_membar.ratio,smsp__average_warp_latency_issue_stalled_drain.ratio"
  while read -r pass d; do
    for impl in attn "$diag_peer"; do
      rep=$log/ncu-$pass-$d-$impl.log
      PYTHONPATH=/tmp/py timeout 240 ncu --clock-control none -k "$(diag_kernel "$impl" "$pass")" --launch-skip 2 \
        --launch-count 1 --metrics "$metrics" python3 bench/diagnostics/stalls.py run "$impl" "$pass" "$d" \
        "${SEQLEN:-4096}" >"$rep" 2>&1
      rc=$?
      echo "######## $pass d $d $impl (ncu rc $rc)"
      grep -E "^\s+(gpu__|sm__|smsp__|l1tex__|launch__)" "$rep" | sed -E 's/ +/ /g' | cut -c1-120
      verdict "$pass d$d ${impl/attn/$diag_backend}" "$rc" "$(awk '/gpu__time_duration.sum/ {print $3, $2; exit}' "$rep")"
    done
  done < <(diag_jobs "bwd:64 bwd:128" "$@")
  return 0
}
suite_stalls() {
  diag_setup || return 1
  local default="bwd:128 fwd:256" pass d impl rep rc
  [ "$diag_backend" = flash_sm90 ] && default="bwd:128"
  while read -r pass d; do
    for impl in attn "$diag_peer"; do
      rep=$log/stalls-$pass-$d-$impl
      PYTHONPATH=/tmp/py timeout 200 ncu --clock-control none -k "$(diag_kernel "$impl" "$pass")" --launch-skip 2 \
        --launch-count 1 --section SourceCounters --section WarpStateStats --section LaunchStats \
        --section SpeedOfLight --section ComputeWorkloadAnalysis -f -o "$rep" \
        python3 bench/diagnostics/stalls.py run "$impl" "$pass" "$d" "${SEQLEN:-4096}" >"$rep.log" 2>&1
      rc=$?
      echo "######## $pass d $d $impl (ncu rc $rc)"
      ncu -i "$rep.ncu-rep" --page source --csv --print-source sass >"$rep.csv" 2>"$rep.err"
      ncu -i "$rep.ncu-rep" --page details --csv >"$rep-details.csv" 2>>"$rep.err"
      python3 bench/diagnostics/stalls.py report "$rep.csv" "$rep-details.csv" | tee "$rep.txt" ||
        tail -5 "$rep.err" "$rep.log"
      rm -f "$rep.ncu-rep"
      verdict "$pass d$d ${impl/attn/$diag_backend}" "$rc" "$(grep -m1 -E ' Duration ' "$rep.txt" | sed -E 's/.* Duration +//')"
    done
  done < <(diag_jobs "$default" "$@")
  return 0
}

# ---- builds ----------------------------------------------------------------------
# normalized_sass OBJECT: its instructions without addresses and encodings,
# one per line (kernel names left out: a type's namespace is in them).
normalized_sass() {
  cuobjdump -sass "$1" 2>/dev/null | sed -nE 's#^\s+/\*[0-9a-f]{4,}\*/\s*##p' |
    sed -E 's#\s*/\* 0x[0-9a-f]+ \*/##; s#\s+# #g'
}
suite_builds() {
  [ -f .carry/base/CMakeLists.txt ] || { fail base "no .carry/base: run prepare_device.sh --base REV here"; return 1; }
  note base "$(cat .carry/base/commit 2>/dev/null)"
  BUILD_LOG=$log/build.log build_attn kernels _C || return 1
  local new=$build
  build=build-base
  # Its own nanobind domain, so that both extensions load in one process.
  grep -q NB_DOMAIN .carry/base/python/CMakeLists.txt ||
    sed -i 's/nanobind_add_module(_C NB_STATIC/nanobind_add_module(_C NB_STATIC NB_DOMAIN attn_base/' .carry/base/python/CMakeLists.txt
  cmake -S .carry/base -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/.carry" \
    -DATTN_BUILD_PYTHON=ON -DATTN_BUILD_TESTS=OFF -DATTN_BUILD_TOOLS=OFF -DATTN_WITH_CUDNN=OFF \
    -DATTN_PTXAS_VERBOSE=ON >"$log/configure-base.log" 2>&1 || { verdict configure 1 build-base; return 1; }
  BUILD_LOG=$log/build-base.log BUILD_KEY=build-base build_targets _C || return 1
  # SASS per kernel object (a row of a kernel table), by its object library's name.
  local same=0 differ=0 o name
  : >"$log/sass.txt"
  while IFS= read -r o; do
    name=$(basename "$(dirname "$o")")  # attn_flash_sm90_fwd_128_128.dir
    local b
    b=$(find build-base -path "*/$name/*" -name '*.o' | head -1)
    if [ -z "$b" ]; then echo "new   $name" >>"$log/sass.txt"; continue; fi
    if cmp -s <(normalized_sass "$o") <(normalized_sass "$b"); then
      same=$((same + 1)); echo "same  $name" >>"$log/sass.txt"
    else
      differ=$((differ + 1))
      echo "DIFF  $name: $(diff <(normalized_sass "$b") <(normalized_sass "$o") | grep -c '^[<>]') lines" >>"$log/sass.txt"
    fi
  done < <(find "$new" -path '*attn_flash_*' -name '*.o' | sort)
  note sass "$same objects the same, $differ differ ($log/sass.txt)"
  # ptxas per kernel: base then this tree.
  BUILD_LOG=$log/build-base.log ptxas_report flash_ >"$log/ptxas-base.txt"
  BUILD_LOG=$log/build.log ptxas_report flash_ >"$log/ptxas-new.txt"
  diff "$log/ptxas-base.txt" "$log/ptxas-new.txt" >"$log/ptxas-diff.txt"
  if [ -s "$log/ptxas-new.txt" ] && [ -s "$log/ptxas-base.txt" ]; then
    note ptxas "$(grep -c '^>' "$log/ptxas-diff.txt") of $(wc -l <"$log/ptxas-new.txt") kernel lines differ ($log/ptxas-diff.txt)"
  else  # a warm machine's builds were up to date: ptxas did not run
    note ptxas "no report: the kernels were not recompiled (a fresh machine, or touch the sources)"
  fi
  # Both builds staged as packages attn and attn_base.
  stage_python "$new"
  rm -rf /tmp/py-base && mkdir -p /tmp/py-base && cp -r .carry/base/python/attn /tmp/py-base/attn_base &&
    cp build-base/python/_C*.so /tmp/py-base/attn_base/
  local backends=("$@") backend rc
  [ ${#backends[@]} -gt 0 ] || backends=(flash_sm90 flash_sm80)
  for backend in "${backends[@]}"; do
    # shellcheck disable=SC2086  # AB_BUILDS_ARGS is a list of arguments
    PYTHONPATH=/tmp/py:/tmp/py-base timeout "${AB_TIMEOUT:-300}" python3 bench/diagnostics/ab_builds.py \
      --backend "$backend" --out "$log" ${AB_BUILDS_ARGS:-} >"$log/ab-$backend.log" 2>&1
    rc=$?
    grep -E '^(fwd|bwd) ' "$log/ab-$backend.log"
    verdict "ab $backend" $rc "$(grep '^summary' "$log/ab-$backend.log")"
  done
  echo "== SASS"
  cat "$log/sass.txt"
  echo "== ptxas (< base, > this tree)"
  grep '^[<>]' "$log/ptxas-diff.txt" | head -40
  return 0
}

# ---- dispatch --------------------------------------------------------------------
# Each suite runs in a subshell (its variables, and ab's changes to src/, end
# with it); "+" separates suites; the same suite may come twice.
plan_suites=() plan_args=() plan_show=()
plan_add() {  # plan_add SUITE [ARGS ...]: checks the suite's arguments, then adds it
  local s=$1
  shift
  case $s in
    test | cp | python_bench)
      [ $# -eq 0 ] || { echo "device.sh: $s takes no arguments (got: $*); separate suites with +" >&2; return 2; } ;;
    ab)
      [ $# -ge 2 ] || { echo "device.sh: ab needs BACKEND VARIANT ... (got: $*)" >&2; return 2; } ;;
    sanitize | flash_sm80 | flash_sm90 | profile | stalls | builds) ;;
    *) echo "device.sh: no suite '$s'; the suites:" >&2 && suites_help >&2 && return 2 ;;
  esac
  plan_suites+=("$s")
  plan_args+=("$([ $# -eq 0 ] || printf '%q ' "$@")")
  plan_show+=("$*")
}

dry_run=0
case ${1:-} in
  list) suites_help; exit 0 ;;
  help | -h | --help) sed -n '2,/^# shellcheck/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  --dry-run) dry_run=1; shift ;;
esac
[ $# -gt 0 ] || set -- test
words=()
for w in "$@" +; do
  if [ "$w" = + ]; then
    [ ${#words[@]} -eq 0 ] || plan_add "${words[@]}" || exit 2
    words=()
  else
    words+=("$w")
  fi
done
[ ${#plan_suites[@]} -gt 0 ] || plan_add test

if [ $dry_run = 1 ]; then
  for i in "${!plan_suites[@]}"; do echo "suite ${plan_suites[$i]}: args ${plan_args[$i]:-(none)}"; done  # shell-quoted
  exit 0
fi

# shellcheck source=scripts/device_lib.sh
source scripts/device_lib.sh
declare -A runs=()
results=() status=0
for i in "${!plan_suites[@]}"; do
  s=${plan_suites[$i]}
  runs[$s]=$((${runs[$s]:-0} + 1))
  t0=$(date +%s)
  (
    begin_suite "$s" "${runs[$s]}"
    eval "set -- ${plan_args[$i]}"
    "suite_$s" "$@"
    end_suite $?
  )
  rc=$?
  [ $rc -eq 0 ] || status=1
  results+=("$(printf '%-14s %-5s %5s s  %s' "$s" "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$(since "$t0")" "${plan_show[$i]}")")
done
if [ ${#plan_suites[@]} -gt 1 ]; then
  echo "== device.sh: ${#plan_suites[@]} suites, commit $commit"
  printf '%s\n' "${results[@]}"
fi
exit $status
