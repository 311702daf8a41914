#!/usr/bin/env bash
# End-to-end checks of the built `attn` command on tiny CPU problems (issue 47):
# --version, run/check --json, exact FLOPs, readable flag errors, bench's sweep
# validation, its per-point file and --resume. No GPU needed.
# Usage: bash scripts/check_cli.sh BUILD_DIR   (BUILD_DIR holds the attn binary)
set -euo pipefail
build=${1:?usage: scripts/check_cli.sh BUILD_DIR}
attn=$(cd "$build" && pwd)/attn
[[ -x $attn ]] || { echo "check_cli: no attn binary at $attn (build the attn_cli target)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
ok() { echo "ok    $1"; }
bad() { echo "FAIL  $1" >&2; failures=$((failures + 1)); }
# A JSON syntax check: python3's json module when present, else the shape.
valid_json() {
  if command -v python3 >/dev/null; then python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$1"
  else head -c1 "$1" | grep -q '{'; fi
}
tiny=(--device cpu --seqlen 16 --heads 2 --head-dim 8 --mask causal)

# --version: version, commit, CUDA, cuDNN, backends.
"$attn" --version > "$work/version"
for f in '^attn [0-9]' '^commit:' '^cuda: .*toolkit' '^cudnn:' '^backends:.*reference'; do
  grep -q "$f" "$work/version" && ok "--version has $f" || bad "--version lacks $f"
done

# run --json and check --json: one JSON object on stdout, with the keys that matter.
"$attn" run "${tiny[@]}" --backward --iters 1 --json > "$work/run.json"
valid_json "$work/run.json" && ok "run --json parses" || bad "run --json is not JSON"
for k in problem backend why forward backward; do
  grep -q "\"$k\":" "$work/run.json" && ok "run --json has $k" || bad "run --json lacks $k"
done
grep -q '"forward_flops": 8704,' "$work/run.json" && ok "run --json forward_flops exact" \
  || bad "run --json forward_flops not exactly 8704"
"$attn" check "${tiny[@]}" --backward --dtype fp32 --json > "$work/check.json" || bad "check --json exit code"
valid_json "$work/check.json" && ok "check --json parses" || bad "check --json is not JSON"
grep -q '"verdict": "pass"' "$work/check.json" && ok "check --json verdict pass" || bad "check --json verdict"

# explain --json: FLOPs exact, not 6.71e+07.
"$attn" explain --device cpu --seqlen 4096 --heads 1 --head-dim 1 --json > "$work/explain.json"
grep -q '"forward_flops": 67108864,' "$work/explain.json" && ok "explain --json forward_flops exact" \
  || bad "explain --json forward_flops not exact"

# Flag errors in attn's words, with readable bounds and the right example.
expect_error() {  # expect_error PATTERN ARGS...: non-zero exit, PATTERN on stderr, no 309-digit bound
  local pattern=$1; shift
  if "$attn" "$@" > /dev/null 2> "$work/err"; then bad "attn $* succeeded"; return; fi
  if grep -q -- "$pattern" "$work/err" && ! grep -q 179769 "$work/err"; then ok "attn $*: $pattern"
  else bad "attn $*: stderr lacks '$pattern'"; cat "$work/err" >&2; fi
}
expect_error 'expected: a whole number >= 1' explain --heads 0
expect_error 'expected: a number in \[0, 1)' explain --dropout 1
expect_error 'e.g. --window 255,0' explain --window abc
"$attn" explain --help | grep -q '\[0, 1)' && ok "--dropout help says [0, 1)" || bad "--dropout help range"

# bench: a bad sweep value fails before any point, naming its flag.
sweep=(bench --device cpu --sweep-seqlens 16,32 --sweep-head-dims 8 --tokens 32 --hidden 16 --iters 1 --quiet)
expect_error '--sweep-masks' "${sweep[@]}" --sweep-masks causal,bogus --json "$work/bad.json"
[[ ! -e $work/bad.json ]] && ok "no bench file after a bad sweep" || bad "bench wrote points before failing"

# bench: interrupted after 2 of 4 points keeps them; --resume runs the other 2.
set +e
ATTN_BENCH_STOP_AFTER=2 "$attn" "${sweep[@]}" --sweep-masks no_mask,causal --json "$work/sweep.json" 2> /dev/null
rc=$?
set -e
[[ $rc -ne 0 ]] && ok "stopped sweep exits non-zero ($rc)" || bad "stopped sweep exited 0"
valid_json "$work/sweep.json" && ok "stopped sweep's file parses" || bad "stopped sweep's file is not JSON"
n=$(grep -c '"fwd_flops"' "$work/sweep.json" || true)
[[ $n -eq 2 ]] && ok "stopped sweep kept 2 points" || bad "stopped sweep kept $n points, not 2"
grep -q '"fwd_flops": 32768,' "$work/sweep.json" && ok "bench fwd_flops exact" || bad "bench fwd_flops not exact"
"$attn" "${sweep[@]}" --sweep-masks no_mask,causal --json "$work/sweep.json" --resume > /dev/null 2> "$work/err"
grep -q '2 of 4 points already' "$work/err" && ok "--resume skipped 2 points" || bad "--resume did not skip"
n=$(grep -c '"fwd_flops"' "$work/sweep.json" || true)
[[ $n -eq 4 ]] && ok "resumed sweep holds 4 points" || bad "resumed sweep holds $n points, not 4"

if [[ $failures -gt 0 ]]; then echo "check_cli: $failures failed" >&2; exit 1; fi
echo "check_cli: all passed"
