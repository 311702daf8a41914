#!/usr/bin/env bash
# Runs ON the device machine: an A/B of kernel variants of one backend in one
# call. Each NAME is a folder .variants/NAME/ (git-ignored: name ".variants"
# in the device call's carry) of files that replace their namesakes in
# src/backends/BACKEND/ for that variant only, and under .variants/NAME/src/
# files that replace theirs at the same path in src/ (a shared primitive);
# NAME may join folders with '+' (applied left to right); a missing folder =
# the tree as it is. Only files whose contents differ are copied, so only
# what a variant changes is rebuilt. Per variant:
# rebuild the Python extension (only the changed objects) and time
# bench/compare.py --backend BACKEND $COMPARE_ARGS (e.g. "--quick --no-flex
# --dims 64,128", "--fwd-only"), so every variant is timed against the
# same-run peers (AB_TIMEOUT: seconds per variant's bench, default 300). No correctness checks: the winner goes through the
# backend's scripts/<backend>_device.sh.
# AB_BENCH="a shell command" times something else instead (e.g. bench/profile_one.py), AB_GREP the
# lines of its output to show.
# Usage there: COMPARE_ARGS="--quick --no-flex" bash scripts/ab_device.sh flash_sm80 orig base m128
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh /tmp/attn-device-out
backend=$1
shift
# Its own build folder: the variants' objects must not stay in build-device,
# where a later call's copy of the tree (older file times than those objects)
# would not rebuild them.
configure_python_build build-ab || exit 1
dir=src/backends/$backend
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
saved=$(mktemp -d)
cp -r src/. "$saved/"
# build-ab outlives the call, and this call's tree may be older than its
# objects: a file that differs from what build-ab last compiled (kept in
# build-ab/ab-src) gets a new time stamp, so ninja rebuilds what depends on it
# (without this, a variant left by the previous call was timed as "base");
# with no record, every file.
built=build-ab/ab-src
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
  if ! cmake --build build-ab -j "$(nproc)" --target _C >"$out/build-$v.log" 2>&1; then
    echo "######## $v: build failed"; grep -E 'error' -A3 "$out/build-$v.log" | head -20; continue
  fi
  rm -rf "$built" && cp -r src "$built"
  stage_python build-ab
  if [ -n "${AB_BENCH:-}" ]; then  # another bench command; AB_GREP picks its lines to show
    PYTHONPATH=/tmp/py timeout "${AB_TIMEOUT:-300}" bash -c "$AB_BENCH" >"$out/compare-$v.log" 2>&1
  else
    PYTHONPATH=/tmp/py timeout "${AB_TIMEOUT:-300}" python3 bench/compare.py --backend "$backend" --out "$out/$v" \
      ${COMPARE_ARGS:-} >"$out/compare-$v.log" 2>&1
  fi
  echo "######## $v ($(( $(date +%s) - t0 )) s, build and bench)"
  grep -E "${AB_GREP:-^ *(64|96|128|192|256) |geomean|ratio}" "$out/compare-$v.log" | cut -c1-150
done
mapfile -t files < <(tree_files "$saved")
copy_changed "$saved" src "${files[@]}"
