#!/usr/bin/env python3
"""Plot attn against its peers from a grid JSON: TFLOP/s over sequence length,
one panel per pass, head dim and mask.

Reads bench/compare.py's compare.json ("rows": attn, sdpa_cudnn, sdpa_flash, ...)
or `attn bench --json`'s file ("results": attn alone). Without a path it takes
the newest docs/perf/compare-*.json by its "date" field.

    python3 bench/plot_grid.py [GRID.json] [--out PNG]

Needs matplotlib (pip install matplotlib); exits 2 without it.
"""
import argparse
import glob
import json
import os
import sys

PEERS = ("attn", "sdpa_cudnn", "sdpa_flash", "flex")


def newest_compare(root):
    paths = glob.glob(os.path.join(root, "docs", "perf", "compare-*.json"))
    if not paths:
        sys.exit(f"plot_grid: no docs/perf/compare-*.json under {root}; pass a grid JSON")

    def key(p):
        with open(p) as f:
            return (json.load(f).get("date", ""), os.path.basename(p))
    return max(paths, key=key)


def series(doc):
    """{(pass, d, causal): {impl: [(seqlen, tflops), ...]}} and a title."""
    out = {}
    if "rows" in doc:  # compare.py: one row per problem, a dict per implementation
        for r in doc["rows"]:
            for name, v in r.items():
                if not isinstance(v, dict):
                    continue
                for p in ("fwd", "bwd"):
                    if p + "_tflops" in v:
                        out.setdefault((p, r["d"], bool(r["causal"])), {}).setdefault(name, []).append(
                            (r["seqlen"], v[p + "_tflops"]))
        title = f"attention, {doc.get('device', '?')}, {doc.get('date', '')}"
        backends = sorted({r["attn_backend"] for r in doc["rows"] if r.get("attn_backend")})
        if backends:
            title += f", attn = {'/'.join(backends)}"
        if (doc.get("gqa") or 1) > 1:
            title += f", GQA {doc['gqa']}"
        if doc.get("dropout"):
            title += f", dropout {doc['dropout']}"
    elif "results" in doc:  # attn bench: attn alone
        for r in doc["results"]:
            for p in ("fwd", "bwd"):
                if p + "_tflops" in r:
                    out.setdefault((p, r["d"], r["mask"] != "no_mask"), {}).setdefault("attn", []).append(
                        (r["seqlen"], r[p + "_tflops"]))
        title = f"attn bench, {doc.get('device', '?')}, commit {doc.get('commit', '?')}"
    else:
        sys.exit("plot_grid: not a grid JSON (no \"rows\" of compare.py, no \"results\" of attn bench)")
    if not out:
        sys.exit("plot_grid: the JSON holds no TFLOP/s figures")
    return out, title


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("grid", nargs="?", help="compare.json or attn bench JSON [newest docs/perf/compare-*.json]")
    ap.add_argument("--out", help="PNG to write [docs/perf/grid-latest.png without GRID, else GRID with .png]")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = args.grid or newest_compare(root)
    out = args.out or (os.path.join(root, "docs", "perf", "grid-latest.png") if not args.grid
                       else os.path.splitext(path)[0] + ".png")
    with open(path) as f:
        data, title = series(json.load(f))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_grid: matplotlib is not installed, so no PNG was written; pip install matplotlib", file=sys.stderr)
        sys.exit(2)

    passes = [p for p in ("fwd", "bwd") if any(k[0] == p for k in data)]
    cols = sorted({(k[1], k[2]) for k in data})
    fig, axes = plt.subplots(len(passes), len(cols), figsize=(3.6 * len(cols), 3.2 * len(passes)), squeeze=False)
    for pi, p in enumerate(passes):
        for ci, (d, causal) in enumerate(cols):
            ax = axes[pi][ci]
            impls = data.get((p, d, causal), {})
            for name in sorted(impls, key=lambda n: (PEERS.index(n) if n in PEERS else len(PEERS), n)):
                pts = sorted(impls[name])
                ax.plot([s for s, _ in pts], [t for _, t in pts], marker="o", label=name,
                        linewidth=2.5 if name == "attn" else 1.2)
            ax.set_xscale("log", base=2)
            ax.set_ylim(bottom=0)
            ax.set_title(f"{p} d={d} {'causal' if causal else 'full'}", fontsize=9)
            ax.set_xlabel("seqlen", fontsize=8)
            ax.set_ylabel("TFLOP/s", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            if impls:
                ax.legend(fontsize=7)
    fig.suptitle(f"{title} ({os.path.basename(path)})", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    print(f"plot_grid: {path} -> {out}")


if __name__ == "__main__":
    main()
