"""Same-process A/B of two builds of attn: the package `attn` (this tree) against
`attn_base` (another tree's build, staged as a package of that name), on the
grid of bench/compare.py for one backend, with an A/A pair (this build timed
twice) that shows the noise. Every entry runs on the same bf16 tensors,
interleaved sample by sample (compare.py's interleaved_medians), so clock
and power changes hit all of them alike.

    PYTHONPATH=/tmp/py:/tmp/py-base python bench/diagnostics/ab_builds.py --backend flash_sm90 [--fwd-only] [--dims 64,128]

Prints per point new/base and new/new (A/A) time ratios and the largest
deviations; writes ab_builds-BACKEND.json under --out.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import attn  # noqa: E402
import attn_base  # noqa: E402
from compare import grid, interleaved_medians, make_sets, warm  # noqa: E402


def fns(module, causal, backend):
    mask = "causal" if causal else "no_mask"

    def fwd(t):
        q, k, v, _ = t
        module.forward(q, k, v, mask=mask, backend=backend)

    def bwd_prep(sets):
        return [(q, k, v, dout) + module.forward(q, k, v, mask=mask, return_lse=True, backend=backend)
                for q, k, v, dout in sets]

    def bwd(t):
        q, k, v, dout, out, lse = t
        module.backward(q, k, v, out, dout, lse, mask=mask, backend=backend)

    return fwd, bwd_prep, bwd


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", required=True)
    ap.add_argument("--fwd-only", action="store_true")
    ap.add_argument("--bwd-only", action="store_true")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--quick", action="store_true", help="seqlen 1k and 4k only")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    passes = ("fwd",) if args.fwd_only else ("bwd",) if args.bwd_only else ("fwd", "bwd")
    rows = []
    print(f"{'pass':4} {'d':>4} {'seqlen':>6} {'causal':>6}  {'base ms':>8} {'new ms':>8}  new/base  A/A")
    for d, s, causal in grid(args.quick, tuple(int(x) for x in args.dims.split(","))):
        b, h = 16384 // s, 2048 // d
        sets = make_sets(b, s, h, d)
        entries = {"base": fns(attn_base, causal, args.backend), "new": fns(attn, causal, args.backend),
                   "new_again": fns(attn, causal, args.backend)}
        for p in passes:
            runnable = {}
            try:
                for name, (fwd, bwd_prep, bwd) in entries.items():
                    fn, fn_sets = (fwd, sets) if p == "fwd" else (bwd, bwd_prep(sets))
                    warm(fn, fn_sets)
                    runnable[name] = (fn, fn_sets)
            except (RuntimeError, ValueError) as e:  # the backend does not run this point
                print(f"{p:4} {d:4} {s:6} {causal!s:>6}  skipped: {str(e).splitlines()[0][:80]}")
                continue
            ms = interleaved_medians(runnable, budget_ms=900.0)
            row = {"pass": p, "d": d, "seqlen": s, "causal": causal, "batch": b, "heads": h, **{k + "_ms": v for k, v in ms.items()},
                   "new_over_base": ms["new"] / ms["base"], "aa": ms["new_again"] / ms["new"]}
            rows.append(row)
            print(f"{p:4} {d:4} {s:6} {causal!s:>6}  {ms['base']:8.3f} {ms['new']:8.3f}  {row['new_over_base']:8.3f}  {row['aa']:.3f}")
            del runnable
        del sets
        torch.cuda.empty_cache()
    if rows:
        worst = max(rows, key=lambda r: abs(r["new_over_base"] - 1))
        worst_aa = max(rows, key=lambda r: abs(r["aa"] - 1))
        print(f"summary {args.backend} {'+'.join(passes)}: {len(rows)} points, new/base "
              f"{min(r['new_over_base'] for r in rows):.3f}-{max(r['new_over_base'] for r in rows):.3f} "
              f"(worst {worst['pass']} d{worst['d']} {worst['seqlen']} causal={worst['causal']}), "
              f"A/A {min(r['aa'] for r in rows):.3f}-{max(r['aa'] for r in rows):.3f}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"ab_builds-{args.backend}-{'-'.join(passes)}.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "backend": args.backend, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
