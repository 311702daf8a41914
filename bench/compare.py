"""Side-by-side attention timing on one GPU: attn's backends and the peers
(PyTorch SDPA with its cuDNN and flash backends forced) in one process, on the
same bf16 tensors. Prints a TFLOP/s table with ratios, writes JSON and a PNG.
--deterministic also times attn in its deterministic mode (attn_det) and
prints its time over the default mode's.

Default sweep: the grid of shared/ANCHORS.md (d 64/128/256, seqlen 1k/4k/16k,
causal or not, batch = 16384/seqlen, heads = 2048/d), forward and backward;
then ANCHORS.md's FlexAttention cases (sliding window 1024 + causal, five packed
documents), forward, in useful TFLOP/s.
FLOPs: 4*b*h*s*s*d forward (halved for causal), backward 2.5x (DESIGN.md).
Timing: CUDA events, warm-up, median of repeats (~200 ms per point), two input
sets alternated (each set is hundreds of MB, far beyond L2).

    python bench/compare.py [--quick] [--dropout P] [--gqa G] [--deterministic] [--out DIR]

--dropout P times every implementation with dropout probability P (the
forward of a training step; the backward replays the same dropout).
--gqa G gives K and V heads / G heads (grouped-query attention; SDPA with
enable_gqa, nothing repeated); the FLOPs are those of the query heads.
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


def grid(quick, dims=(64, 128, 256)):
    for d in dims:
        for s in ((1024, 4096) if quick else (1024, 4096, 16384)):
            for causal in (False, True):
                yield d, s, causal


def interleaved_samples(fns, calls_per_sample=8, budget_ms=600.0, min_rounds=5, max_rounds=60):
    """Time of one call per round for each implementation: {name: (fn,
    input_sets)} -> {name: [ms, one per round]}, entry r of every list from
    the same round.
    A sample times several back-to-back calls between two CUDA events (rotating
    input sets that do not fit in L2), as a training loop issues them: the host's
    per-call overhead counts only where it exceeds the GPU's time (one untimed call
    before the start event keeps the GPU busy, so the host's time to issue the
    first timed call is not an idle gap). Samples of the
    implementations alternate, so clock and power changes hit all of them alike."""
    samples = {name: [] for name in fns}
    spent, rounds, i = 0.0, 0, 0
    while (spent < budget_ms or rounds < min_rounds) and rounds < max_rounds:
        for name, (fn, sets) in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            fn(sets[(i + calls_per_sample) % len(sets)])  # the GPU is busy when timing starts: no idle gap at the front
            start.record()
            for j in range(calls_per_sample):
                fn(sets[(i + j) % len(sets)])
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) / calls_per_sample)
            spent += start.elapsed_time(end)
        i += calls_per_sample
        rounds += 1
    return samples


def interleaved_medians(fns, **kw):
    """Median time of one call for each implementation (interleaved_samples)."""
    return {name: statistics.median(t) for name, t in interleaved_samples(fns, **kw).items()}


_FLUSH = None


def flushed_median(fn, sets, reps=30):
    """Median of fn(sets[i]) each timed alone after overwriting a 256 MiB
    buffer (L2 cold, as triton's do_bench): the second method beside
    interleaved_medians."""
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    times = []
    for i in range(reps):
        _FLUSH.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(sets[i % len(sets)])
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def warm(fn, sets, n=3):
    for i in range(n):
        fn(sets[i % len(sets)])
    torch.cuda.synchronize()


def make_sets(b, s, h, d, n=2, h_kv=None, d_v=None):
    """n input sets (q, k, v, dout) in bshd; k and v with h_kv heads (default h), v and dout d_v wide (default d)."""
    sets = []
    for _ in range(n):
        q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        dout = torch.randn(b, s, h, d_v or d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, s, h_kv or h, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, s, h_kv or h, d_v or d, device="cuda", dtype=torch.bfloat16)
        sets.append((q, k, v, dout))
    return sets


def attn_fns(causal, backend=None, dropout=0.0, deterministic=False):
    mask = "causal" if causal else "no_mask"

    def fwd(t):
        q, k, v, _ = t
        attn.forward(q, k, v, mask=mask, backend=backend, dropout_p=dropout, deterministic=deterministic)

    def bwd_prep(sets):
        return [(q, k, v, dout) + attn.forward(q, k, v, mask=mask, return_lse=True, backend=backend,
                                               dropout_p=dropout, deterministic=deterministic)
                for q, k, v, dout in sets]

    def bwd(t):
        q, k, v, dout, out, lse = t
        attn.backward(q, k, v, out, dout, lse, mask=mask, backend=backend, dropout_p=dropout,
                      deterministic=deterministic)

    return fwd, bwd_prep, bwd


def sdpa_fns(backend, causal, dropout=0.0, gqa=False):
    # SDPA takes [b, h, s, d]: transposed views of the same bshd tensors.
    def fwd(t):
        q, k, v, _ = t
        with sdpa_kernel(backend):
            F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal,
                                           dropout_p=dropout, enable_gqa=gqa)

    # Backward alone: the forward runs once per input set here, and each timed
    # call replays its saved graph (retain_graph), as attn.backward reads a saved out/lse.
    def bwd_prep(sets):
        prepared = []
        for q, k, v, dout in sets:
            qg, kg, vg = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
            with sdpa_kernel(backend):
                out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, dropout_p=dropout, enable_gqa=gqa)
            prepared.append((qg, kg, vg, dout.transpose(1, 2), out))
        return prepared

    def bwd(t):
        q, k, v, dout, out = t
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    return fwd, bwd_prep, bwd


def time_row(impls, sets, fwd_only=False, flushed=False):
    """{name: (fwd, bwd_prep, bwd)} -> {name: {fwd_ms, bwd_ms} or {error}}, each
    pass timed with the implementations interleaved; with flushed, also
    {fwd,bwd}_flushed_ms: each call timed alone after an L2 flush."""
    results = {name: {} for name in impls}
    for p in ("fwd",) if fwd_only else ("fwd", "bwd"):
        runnable = {}
        for name, (fwd, bwd_prep, bwd) in impls.items():
            if "error" in results[name]:
                continue
            try:
                fn, fn_sets = (fwd, sets) if p == "fwd" else (bwd, bwd_prep(sets))
                warm(fn, fn_sets)
                runnable[name] = (fn, fn_sets)
            except (RuntimeError, ValueError) as e:  # unsupported or out of memory: record why
                results[name]["error"] = str(e).splitlines()[0][:160]
        for name, ms in interleaved_medians(runnable).items():
            results[name][p + "_ms"] = ms
        if flushed:
            for name, (fn, fn_sets) in runnable.items():
                results[name][p + "_flushed_ms"] = flushed_median(fn, fn_sets)
        del runnable
        torch.cuda.empty_cache()
    return results


def flex_cases(device_name, backend=None):
    """ANCHORS.md's FlexAttention points (d 128, 8k tokens per row, b 2, h 16, bf16,
    forward): sliding window 1024 + causal, and five packed causal documents.
    Useful TFLOP/s count only the visible pairs. `backend`: attn's backend for
    them (--backend; None: attn's choice, recorded per row)."""
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
        q0 = sets[0][0]

        def flex_fwd(t):
            q, k, v, _ = t
            flex(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=block)

        if name.startswith("window"):
            shape = q0.shape
            opts = {"mask": "causal", "window": (1023, 0)}
        else:
            # The same tokens as thd: each row's five documents are separate sequences.
            lens = [bounds[i + 1] - bounds[i] for i in range(5)] * b
            cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device="cuda")
            shape = (b * s, h, d)
            opts = {"qkv_format": "thd", "mask": "padding_causal", "cu_seqlens_q": cu, "cu_seqlens_kv": cu,
                    "max_seqlen_q": max(lens), "max_seqlen_kv": max(lens)}

        def attn_fwd(t, shape=shape, opts=opts):
            q, k, v, _ = t
            attn.forward(q.reshape(shape), k.reshape(shape), v.reshape(shape), backend=backend, **opts)

        q1 = q0.reshape(shape)
        row["attn_backend"] = backend or attn.explain(q1, q1, q1, **opts).chosen

        impls = [("attn", attn_fwd), ("flex", flex_fwd)]
        if "cu_seqlens_q" in opts:
            # attn reads cu_seqlens back to validate them unless told not to
            # (check_seqlens=False, max_seqlen given): that read waits for the
            # GPU. Flex's counterpart, its block mask, is built once above, out
            # of the timing; "attn_unchecked" is the call that matches it.
            unchecked = dict(opts, check_seqlens=False)
            impls.insert(1, ("attn_unchecked", lambda t, o=unchecked: attn_fwd(t, opts=o)))

        runnable = {}
        for impl, fn in impls:
            try:
                warm(fn, sets)
                runnable[impl] = (fn, sets)
            except (RuntimeError, ValueError) as e:
                row[impl] = {"error": str(e).splitlines()[0][:160]}
        for impl, ms in interleaved_medians(runnable).items():
            row[impl] = {"fwd_ms": ms, "fwd_tflops": flops / (ms * 1e-3) / 1e12}
        rows.append(row)
        del sets
        torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="seqlen 1k and 4k only")
    ap.add_argument("--no-flex", action="store_true", help="skip the FlexAttention cases")
    ap.add_argument("--flex-only", action="store_true", help="only the FlexAttention cases (no grid)")
    ap.add_argument("--backend", default=None, help="force this attn backend (default: attn's choice)")
    ap.add_argument("--fwd-only", action="store_true", help="time the forward only")
    ap.add_argument("--dims", default="64,128,256", help="head dims of the grid, comma-separated")
    ap.add_argument("--dv", type=int, default=0, help="d_v of every point (default: its d, as d_qk)")
    ap.add_argument("--flushed", action="store_true",
                    help="also time each call alone after an L2 flush (the second method) and print its ratios")
    ap.add_argument("--dropout", type=float, default=0.0, help="dropout probability for every implementation")
    ap.add_argument("--gqa", type=int, default=1, help="query heads per K/V head (GQA); 1: MHA")
    ap.add_argument("--deterministic", action="store_true",
                    help="also time attn in its deterministic mode (attn_det), interleaved with the default")
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for compare.json and compare.png")
    args = ap.parse_args()
    dev = torch.cuda.get_device_name()
    gqa = args.gqa > 1
    impls = {
        "attn": lambda c: attn_fns(c, args.backend, args.dropout),
        "sdpa_cudnn": lambda c: sdpa_fns(SDPBackend.CUDNN_ATTENTION, c, args.dropout, gqa),
        "sdpa_flash": lambda c: sdpa_fns(SDPBackend.FLASH_ATTENTION, c, args.dropout, gqa),
    }
    if args.deterministic:
        impls["attn_det"] = lambda c: attn_fns(c, args.backend, args.dropout, deterministic=True)
    rows = []
    for d, s, causal in ([] if args.flex_only else grid(args.quick, [int(x) for x in args.dims.split(",")])):
        b, h = 16384 // s, 2048 // d
        if h % args.gqa:
            sys.exit(f"--gqa {args.gqa} does not divide the {h} query heads of d {d} (2048 / d)")
        d_v = args.dv or d
        sets = make_sets(b, s, h, d, h_kv=h // args.gqa, d_v=d_v)
        flops = 2.0 * b * h * s * s * (d + d_v) * (0.5 if causal else 1.0)  # Q.K^T and P.V
        row = {"d": d, "d_v": d_v, "seqlen": s, "batch": b, "heads": h, "kv_heads": h // args.gqa, "causal": causal,
               "fwd_flops": flops}
        timed = time_row({name: make(causal) for name, make in impls.items()}, sets, args.fwd_only, args.flushed)
        for name, r in timed.items():
            for p, mult in (("fwd", 1.0), ("bwd", 2.5)):
                if f"{p}_ms" in r:
                    r[f"{p}_tflops"] = mult * flops / (r[f"{p}_ms"] * 1e-3) / 1e12
            row[name] = r
        if "attn" in row and "fwd_ms" in row["attn"]:
            row["attn_backend"] = args.backend or attn.explain(sets[0][0], sets[0][1], sets[0][2],
                                                               mask="causal" if causal else "no_mask").chosen
        rows.append(row)
        del sets
        torch.cuda.empty_cache()
        print(f"done d={d} s={s} causal={causal}", file=sys.stderr, flush=True)

    flex_rows = [] if args.no_flex else flex_cases(dev, args.backend)
    record = {"device": dev, "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "dropout": args.dropout,
              "gqa": args.gqa, "attn_backends": attn.backends(), "rows": rows, "flex_rows": flex_rows}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "compare.json"), "w") as f:
        json.dump(record, f, indent=1)
    if rows:
        plot(rows, os.path.join(args.out, "compare.png"), dev)

    def fmt(r, p):
        return f"{r[p + '_tflops']:7.1f}" if p + "_tflops" in r else "      -"

    def ratio(a, b, p):
        return f"{a[p + '_tflops'] / b[p + '_tflops']:5.2f}" if p + "_tflops" in a and p + "_tflops" in b else "    -"

    print(f"device: {dev}; TFLOP/s (bf16{f', dropout {args.dropout}' if args.dropout else ''}"
          f"{f', GQA {args.gqa}' if gqa else ''}); /cud = attn / sdpa_cudnn, /fl = attn / sdpa_flash")
    print(" d  seqlen causal backend    |  fwd attn  cudnn  flash  /cud   /fl |  bwd attn  cudnn  flash  /cud   /fl")
    for r in rows:
        line = f"{r['d']:3d} {r['seqlen']:6d} {str(r['causal'])[0]:>6} {r.get('attn_backend', '-'):10s} |"
        for p in ("fwd", "bwd"):
            a, c, fl = r["attn"], r["sdpa_cudnn"], r["sdpa_flash"]
            line += f" {fmt(a, p)} {fmt(c, p)} {fmt(fl, p)} {ratio(a, c, p)} {ratio(a, fl, p)} |"
        print(line)
    for p in ("fwd", "bwd"):
        rs = [r["attn"][p + "_tflops"] / r["sdpa_cudnn"][p + "_tflops"] for r in rows
              if p + "_tflops" in r["attn"] and p + "_tflops" in r["sdpa_cudnn"]]
        if rs:
            print(f"{p}: attn / sdpa_cudnn geomean {statistics.geometric_mean(rs):.3f}, min {min(rs):.3f} "
                  f"over {len(rs)} points")
    if args.flushed:
        for p in ("fwd", "bwd"):
            rs = [r["sdpa_cudnn"][p + "_flushed_ms"] / r["attn"][p + "_flushed_ms"] for r in rows
                  if p + "_flushed_ms" in r["attn"] and p + "_flushed_ms" in r["sdpa_cudnn"]]
            if rs:
                print(f"{p}: attn / sdpa_cudnn after an L2 flush: geomean {statistics.geometric_mean(rs):.3f}, "
                      f"min {min(rs):.3f}, max {max(rs):.3f} over {len(rs)} points")
    if args.deterministic:
        for p in ("fwd", "bwd"):
            rs = [r["attn_det"][p + "_ms"] / r["attn"][p + "_ms"] for r in rows
                  if p + "_ms" in r.get("attn_det", {}) and p + "_ms" in r["attn"]]
            if rs:
                print(f"{p}: deterministic / default time geomean {statistics.geometric_mean(rs):.3f}, "
                      f"max {max(rs):.3f} over {len(rs)} points")
    if flex_rows:
        print("FlexAttention cases (d 128, b 2, h 16, 8k tokens per row; useful TFLOP/s, forward)")
        for r in flex_rows:
            a, fl = r["attn"], r["flex"]
            ratio = (f"{a['fwd_tflops'] / fl['fwd_tflops']:.2f}" if "fwd_tflops" in a and "fwd_tflops" in fl else "-")
            print(f"  {r['case']:20s} attn {fmt(a, 'fwd')}  flex {fmt(fl, 'fwd')}  ratio {ratio}"
                  f"  ({r.get('attn_backend', '-')})")
            u = r.get("attn_unchecked")
            if u and "fwd_tflops" in u and "fwd_tflops" in fl:
                print(f"  {'  check_seqlens=False':20s} attn {fmt(u, 'fwd')}  flex {fmt(fl, 'fwd')}  ratio "
                      f"{u['fwd_tflops'] / fl['fwd_tflops']:.2f}")


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
