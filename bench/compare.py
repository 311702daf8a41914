"""Side-by-side attention timing on one GPU: attn's backends and the peers
(PyTorch SDPA with its cuDNN and flash backends forced) in one process, on the
same bf16 tensors. Prints a TFLOP/s table with ratios, writes JSON and a PNG.

Default sweep: the grid of shared/ANCHORS.md (d 64/128/256, seqlen 1k/4k/16k,
causal or not, batch = 16384/seqlen, heads = 2048/d), forward and backward;
then ANCHORS.md's FlexAttention cases (sliding window 1024 + causal, five packed
documents), forward, in useful TFLOP/s.
FLOPs: 4*b*h*s*s*d forward (halved for causal), backward 2.5x (DESIGN.md).
Timing: CUDA events, warm-up, median of repeats (~200 ms per point), two input
sets alternated (each set is hundreds of MB, far beyond L2).

    python bench/compare.py [--quick] [--fwd-only] [--out DIR]
"""
import argparse
import itertools
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attn


def grid(quick):
    for d in (64, 128, 256):
        for s in ((1024, 4096) if quick else (1024, 4096, 16384)):
            for causal in (False, True):
                yield d, s, causal


def median_ms(fn, sets, budget_ms=200.0, warmup=3):
    for i in range(warmup):
        fn(sets[i % len(sets)])
    torch.cuda.synchronize()
    times, spent, i = [], 0.0, 0
    while spent < budget_ms or len(times) < 5:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(sets[i % len(sets)])
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        spent += times[-1]
        i += 1
        if len(times) >= 200:
            break
    return statistics.median(times)


def make_sets(b, s, h, d, n=2):
    sets = []
    for _ in range(n):
        q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        sets.append((q, k, v, dout))
    return sets


def attn_fns(causal):
    mask = "causal" if causal else "no_mask"

    def fwd(t):
        q, k, v, _ = t
        attn.forward(q, k, v, mask=mask)

    def bwd_prep(sets):
        return [(q, k, v, dout) + attn.forward(q, k, v, mask=mask, return_lse=True) for q, k, v, dout in sets]

    def bwd(t):
        q, k, v, dout, out, lse = t
        attn.backward(q, k, v, out, dout, lse, mask=mask)

    return fwd, bwd_prep, bwd


def sdpa_fns(backend, causal):
    # SDPA takes [b, h, s, d]: transposed views of the same bshd tensors.
    def fwd(t):
        q, k, v, _ = t
        with sdpa_kernel(backend):
            F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)

    def bwd_prep(sets):
        prepared = []
        for q, k, v, dout in sets:
            qg, kg, vg = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
            prepared.append((qg, kg, vg, dout.transpose(1, 2)))
        return prepared

    def bwd(t):
        q, k, v, dout = t
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.autograd.grad(out, (q, k, v), dout)

    return fwd, bwd_prep, bwd


def time_impl(fns, sets, fwd_only=False):
    fwd, bwd_prep, bwd = fns
    result = {}
    try:
        result["fwd_ms"] = median_ms(fwd, sets)
        if fwd_only:
            return result
        prepared = bwd_prep(sets)
        result["bwd_ms"] = median_ms(bwd, prepared)
        del prepared
    except (RuntimeError, ValueError) as e:  # unsupported or out of memory: record why
        result["error"] = str(e).splitlines()[0][:160]
    torch.cuda.empty_cache()
    return result


def flex_cases(device_name):
    """ANCHORS.md's FlexAttention points (d 128, 8k tokens per row, b 2, h 16, bf16,
    forward): sliding window 1024 + causal, and five packed causal documents.
    Useful TFLOP/s count only the visible pairs."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    flex = torch.compile(flex_attention)
    b, h, s, d = 2, 16, 8192, 128
    bounds = [0, 1000, 2800, 4100, 6500, 8192]  # five documents of unequal length
    doc = torch.zeros(s, dtype=torch.int32, device="cuda")
    for i in range(5):
        doc[bounds[i]:bounds[i + 1]] = i
    rows = []
    for name in ("window1024_causal", "packed5_causal"):
        if name.startswith("window"):
            def mask_mod(bb, hh, qi, kj):
                return (qi >= kj) & (qi - kj < 1024)
            pairs = sum(min(i + 1, 1024) for i in range(s))
        else:
            def mask_mod(bb, hh, qi, kj):
                return (doc[qi] == doc[kj]) & (qi >= kj)
            pairs = sum((n * (n + 1)) // 2 for n in (bounds[i + 1] - bounds[i] for i in range(5)))
        flops = 4.0 * b * h * pairs * d
        block = create_block_mask(mask_mod, None, None, s, s, device="cuda")
        sets = make_sets(b, s, h, d)
        row = {"case": name, "batch": b, "heads": h, "seqlen": s, "d": d, "fwd_flops": flops}

        def flex_fwd(t):
            q, k, v, _ = t
            flex(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=block)

        if name.startswith("window"):
            def attn_fwd(t):
                q, k, v, _ = t
                attn.forward(q, k, v, mask="causal", window=(1023, 0))
        else:
            # The same tokens as thd: each row's five documents are separate sequences.
            lens = [bounds[i + 1] - bounds[i] for i in range(5)] * b
            cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device="cuda")

            def attn_fwd(t):
                q, k, v, _ = t
                attn.forward(q.reshape(b * s, h, d), k.reshape(b * s, h, d), v.reshape(b * s, h, d),
                             qkv_format="thd", mask="padding_causal", cu_seqlens_q=cu, cu_seqlens_kv=cu,
                             max_seqlen_q=max(lens), max_seqlen_kv=max(lens))

        for impl, fn in (("attn", attn_fwd), ("flex", flex_fwd)):
            try:
                ms = median_ms(fn, sets)
                row[impl] = {"fwd_ms": ms, "fwd_tflops": flops / (ms * 1e-3) / 1e12}
            except (RuntimeError, ValueError) as e:
                row[impl] = {"error": str(e).splitlines()[0][:160]}
        rows.append(row)
        del sets
        torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="seqlen 1k and 4k only")
    ap.add_argument("--no-flex", action="store_true", help="skip the FlexAttention cases")
    ap.add_argument("--fwd-only", action="store_true", help="time the forward only")
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for compare.json and compare.png")
    args = ap.parse_args()
    dev = torch.cuda.get_device_name()
    impls = {
        "attn": lambda c: attn_fns(c),
        "sdpa_cudnn": lambda c: sdpa_fns(SDPBackend.CUDNN_ATTENTION, c),
        "sdpa_flash": lambda c: sdpa_fns(SDPBackend.FLASH_ATTENTION, c),
    }
    rows = []
    for d, s, causal in grid(args.quick):
        b, h = 16384 // s, 2048 // d
        sets = make_sets(b, s, h, d)
        flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
        row = {"d": d, "seqlen": s, "batch": b, "heads": h, "causal": causal, "fwd_flops": flops}
        for name, make in impls.items():
            r = time_impl(make(causal), sets, args.fwd_only)
            for p, mult in (("fwd", 1.0), ("bwd", 2.5)):
                if f"{p}_ms" in r:
                    r[f"{p}_tflops"] = mult * flops / (r[f"{p}_ms"] * 1e-3) / 1e12
            row[name] = r
        if "attn" in row and "fwd_ms" in row["attn"]:
            row["attn_backend"] = attn.explain(sets[0][0], sets[0][1], sets[0][2],
                                               mask="causal" if causal else "no_mask").chosen
        rows.append(row)
        del sets
        torch.cuda.empty_cache()
        print(f"done d={d} s={s} causal={causal}", file=sys.stderr, flush=True)

    flex_rows = [] if args.no_flex else flex_cases(dev)
    record = {"device": dev, "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
              "attn_backends": attn.backends(), "rows": rows, "flex_rows": flex_rows}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "compare.json"), "w") as f:
        json.dump(record, f, indent=1)
    plot(rows, os.path.join(args.out, "compare.png"), dev)

    def fmt(r, p):
        return f"{r[p + '_tflops']:7.1f}" if p + "_tflops" in r else "      -"

    print(f"device: {dev}; TFLOP/s (bf16), ratio = attn / sdpa_cudnn, vs FA2 = attn / sdpa_flash")
    print(" d  seqlen causal |  fwd attn  cudnn  flash  ratio vs FA2 |  bwd attn  cudnn  flash  ratio vs FA2 | fwd backend")
    for r in rows:
        line = f"{r['d']:3d} {r['seqlen']:6d} {str(r['causal'])[0]:>6} |"
        for p in ("fwd", "bwd"):
            a, c = r["attn"], r["sdpa_cudnn"]
            ratio = (f"{a[p + '_tflops'] / c[p + '_tflops']:6.2f}" if p + "_tflops" in a and p + "_tflops" in c
                     else "     -")
            fl = r["sdpa_flash"]
            vs_fa2 = (f"{a[p + '_tflops'] / fl[p + '_tflops']:6.2f}" if p + "_tflops" in a and p + "_tflops" in fl
                      else "     -")
            line += f" {fmt(a, p)} {fmt(c, p)} {fmt(fl, p)} {ratio} {vs_fa2} |"
        print(line + f" {r.get('attn_backend', '-')}")
    if flex_rows:
        print("FlexAttention cases (d 128, b 2, h 16, 8k tokens per row; useful TFLOP/s, forward)")
        for r in flex_rows:
            a, fl = r["attn"], r["flex"]
            ratio = (f"{a['fwd_tflops'] / fl['fwd_tflops']:.2f}" if "fwd_tflops" in a and "fwd_tflops" in fl else "-")
            print(f"  {r['case']:20s} attn {fmt(a, 'fwd')}  flex {fmt(fl, 'fwd')}  ratio {ratio}")


def plot(rows, path, dev):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot", file=sys.stderr)
        return
    dims = sorted({r["d"] for r in rows})
    fig, axes = plt.subplots(2, 2 * len(dims), figsize=(5 * 2 * len(dims), 8), squeeze=False)
    for pi, p in enumerate(("fwd", "bwd")):
        for di, d in enumerate(dims):
            for ci, causal in enumerate((False, True)):
                ax = axes[pi][2 * di + ci]
                pts = [r for r in rows if r["d"] == d and r["causal"] == causal]
                for name in ("attn", "sdpa_cudnn", "sdpa_flash"):
                    xs = [r["seqlen"] for r in pts if p + "_tflops" in r[name]]
                    ys = [r[name][p + "_tflops"] for r in pts if p + "_tflops" in r[name]]
                    ax.plot(xs, ys, marker="o", label=name)
                ax.set_xscale("log", base=2)
                ax.set_title(f"{p} d={d} {'causal' if causal else 'full'}")
                ax.set_xlabel("seqlen")
                ax.set_ylabel("TFLOP/s")
                ax.legend(fontsize=7)
    fig.suptitle(f"attention, bf16, {dev}")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


if __name__ == "__main__":
    main()
