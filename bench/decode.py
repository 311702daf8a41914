"""Decoding against a KV cache (issue 43): s_q query tokens per sequence
against s_kv cached keys, bottom-right causal, bf16, one process, the peers on
the same tensors: PyTorch SDPA with its cuDNN and flash backends, and attn.
TB/s of K+V read and its share of a measured read-only bandwidth ceiling (a
sum over a buffer several times L2, the same bytes as the point's K+V where
they fit). Each point is timed back to back between CUDA events, the peers
alternating round by round (bench/compare.py's interleaved medians), and, as
a second method, call by call after an L2 flush; --graphs adds each call
replayed from a CUDA graph (no host time: small points are host-bound
eagerly), the calls of the graph cycling through enough sets of tensors
(up to 8) that their K+V is 4x the L2, so each call reads from HBM as a
model's layers do. In such a graph attn's kernels start under the call
before (programmatic dependent launch: docs/FLASH_DECODE.md), which cuDNN's
do not; --between adds graphs whose calls each follow a one-element PyTorch
kernel, as a model's other kernels sit between its attention calls
(graph_between_ms: the call and that kernel).

attn runs attn.forward_with_kvcache (check_seqlens=False, as a serving
engine's captured step runs it: no read-back of the lengths) where this
build runs it on the GPU, else its forward on the contiguous cache; paged
points need the former and are skipped otherwise.
--flex adds FlexAttention (torch.compile'd flex_attention, whose decoding
kernel serves short queries) on the contiguous points. Not timed here: the
transformers generation step.

    python bench/decode.py [--quick] [--out DIR] [--max-gib 24] [--batches 1,8] [--seqlens ..]
                           [--heads 32/8,..] [--dims 64,128,256] [--blocks 0,16,128] [--graphs [--between]]
                           [--flex]

Writes decode.json and decode.png (TB/s over s_kv per panel) to --out.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import flushed_median, interleaved_medians  # noqa: E402


def ceiling_tbps(nbytes):
    """Read-only bandwidth: a sum over nbytes of bf16 (at least 4 GiB)."""
    n = max(nbytes, 4 << 30) // 2
    buf = torch.ones(n, dtype=torch.bfloat16, device="cuda")
    ms = interleaved_medians({"sum": (lambda _: buf.sum(dtype=torch.float32), [None])}, calls_per_sample=3)["sum"]
    return n * 2 / (ms * 1e-3) / 1e12


def attn_gpu_kvcache():
    """Whether this build runs forward_with_kvcache on CUDA tensors."""
    try:
        q = torch.zeros(1, 1, 1, 64, device="cuda", dtype=torch.bfloat16)
        kc = torch.zeros(1, 16, 1, 64, device="cuda", dtype=torch.bfloat16)
        attn.forward_with_kvcache(q, kc, kc.clone(), cache_seqlens=torch.ones(1, dtype=torch.int32, device="cuda"))
        return True
    except Exception:  # noqa: BLE001 - the CPU-only build says so with an error
        return False


L2_BYTES = 50 << 20  # the H100's L2: graph replays rotate over tensor sets until their K+V is 4x this


def rotating_sets(kv_bytes):
    """Tensor sets a graph's calls cycle through (at most 8) so that their K+V is 4x the L2."""
    return min(8, max(1, -(-4 * L2_BYTES // kv_bytes)))


def tensors(b, s_kv, h_q, h_kv, d, s_q, block):
    """One call's tensors: q, the cache (contiguous, or paged: every
    sequence's blocks shuffled in one pool), the new tokens and lengths."""
    dt = torch.bfloat16
    t = {"q": torch.randn(b, s_q, h_q, d, device="cuda", dtype=dt),
         "lens": torch.full((b,), s_kv - s_q, dtype=torch.int32, device="cuda"),
         "new_k": torch.randn(b, s_q, h_kv, d, device="cuda", dtype=dt),
         "new_v": torch.randn(b, s_q, h_kv, d, device="cuda", dtype=dt), "table": None}
    if block:
        blocks = b * s_kv // block
        t["k"] = torch.randn(blocks, block, h_kv, d, device="cuda", dtype=dt)
        t["v"] = torch.randn(blocks, block, h_kv, d, device="cuda", dtype=dt)
        t["table"] = torch.randperm(blocks, device="cuda").view(b, -1).int()
    else:
        t["k"] = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dt)
        t["v"] = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dt)
    return t


def point(b, s_kv, h_q, h_kv, d, s_q, block, gpu_kvcache, graphs=False, flex=False, between=None):
    """between: a one-element CUDA tensor (--between), to which a kernel adds before each graph call."""
    r = {"b": b, "s_kv": s_kv, "h_q": h_q, "h_kv": h_kv, "d": d, "s_q": s_q, "block": block}
    kv_bytes = 2 * b * s_kv * h_kv * d * 2
    r["kv_gib"] = kv_bytes / 2**30
    # Graph replays cycle through enough sets that each call reads its keys
    # from HBM, as a model's layers do (one set of a small point stays in L2).
    n_sets = rotating_sets(kv_bytes) if graphs else 1
    sets = [tensors(b, s_kv, h_q, h_kv, d, s_q, block) for _ in range(n_sets)]
    r["graph_sets"] = n_sets
    fns = {}
    if block:
        if gpu_kvcache:
            fns["attn"] = lambda t: attn.forward_with_kvcache(t["q"], t["k"], t["v"], t["new_k"], t["new_v"],
                                                              cache_seqlens=t["lens"], block_table=t["table"],
                                                              check_seqlens=False)
    else:
        if gpu_kvcache:
            fns["attn"] = lambda t: attn.forward_with_kvcache(t["q"], t["k"], t["v"], t["new_k"], t["new_v"],
                                                              cache_seqlens=t["lens"], check_seqlens=False)
        else:
            fns["attn (forward on the cache)"] = lambda t: attn.forward(t["q"], t["k"], t["v"],
                                                                         mask="causal_bottom_right")
        # SDPA's [b, h, s, d] views of the same tensors (no copies).
        mask = None
        if s_q > 1:
            from torch.nn.attention.bias import causal_lower_right
            mask = causal_lower_right(s_q, s_kv)

        def sdpa(backend):
            def run(t):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(t["q"].transpose(1, 2), t["k"].transpose(1, 2),
                                                          t["v"].transpose(1, 2), attn_mask=mask,
                                                          enable_gqa=h_q != h_kv)
            return run
        fns["sdpa_cudnn"] = sdpa(SDPBackend.CUDNN_ATTENTION)
        fns["sdpa_flash"] = sdpa(SDPBackend.FLASH_ATTENTION)
        if flex:  # FlexAttention's decoding kernel (small q lengths) on the same views, block mask built once
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            shift = s_kv - s_q
            block_mask = create_block_mask(lambda b_, h_, i, j: j <= i + shift, B=None, H=None, Q_LEN=s_q,
                                           KV_LEN=s_kv, device="cuda")
            compiled = _compiled_flex(flex_attention)
            fns["flex"] = lambda t: compiled(t["q"].transpose(1, 2), t["k"].transpose(1, 2), t["v"].transpose(1, 2),
                                             block_mask=block_mask, enable_gqa=h_q != h_kv)
    ok = {}
    for name, fn in fns.items():  # a peer that cannot run this point says why
        try:
            fn(sets[0])
            torch.cuda.synchronize()
            ok[name] = (lambda _, fn=fn: fn(sets[0]), [None])
        except Exception as e:  # noqa: BLE001
            r[name] = {"error": f"{type(e).__name__}: {e}"[:200]}
    loop = interleaved_medians(ok, budget_ms=300.0) if ok else {}  # the peers alternate within each round
    for name, (fn, call_sets) in ok.items():
        cold = flushed_median(fn, call_sets, reps=10)
        r[name] = {"ms": loop[name], "tbps": kv_bytes / (loop[name] * 1e-3) / 1e12, "flushed_ms": cold,
                   "flushed_tbps": kv_bytes / (cold * 1e-3) / 1e12}
        if graphs:  # GPU time alone, as a serving engine's captured step runs it
            try:
                ms = graph_ms(lambda i, fn=fns[name]: fn(sets[i % n_sets]), calls=max(8, n_sets))
                r[name].update(graph_ms=ms, graph_tbps=kv_bytes / (ms * 1e-3) / 1e12)
                if between is not None:
                    ms = graph_ms(lambda i, fn=fns[name]: (between.add_(1), fn(sets[i % n_sets])),
                                  calls=max(8, n_sets))
                    r[name].update(graph_between_ms=ms, graph_between_tbps=kv_bytes / (ms * 1e-3) / 1e12)
            except Exception as e:  # noqa: BLE001 - a peer that cannot be captured says why
                r[name]["graph_error"] = f"{type(e).__name__}: {e}"[:200]
    return r


_FLEX = None


def _compiled_flex(flex_attention):
    """One torch.compile'd flex_attention for the whole run (each new shape
    still compiles once, outside the timing: point() runs every peer once first)."""
    global _FLEX
    if _FLEX is None:
        _FLEX = torch.compile(flex_attention)
    return _FLEX


def graph_ms(fn, calls=8, reps=20):
    """Median time of one call replayed from a CUDA graph of `calls` calls
    fn(0), fn(1), ... (no host work between them: the figure a captured
    decode step sees)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn(0)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(i)
    g.replay()
    torch.cuda.synchronize()
    return replayed_ms(g, calls, reps)


def replayed_ms(g, calls, reps=20):
    """Median time of one call of a CUDA graph of `calls` calls, over `reps` replays."""
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    times.sort()
    return times[len(times) // 2]


def plot(rows, ceiling, path, device):
    """TB/s over s_kv, one panel per (b, h_q/h_kv, d, s_q); attn contiguous
    and paged beside SDPA's backends, the read-only ceiling dashed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot", file=sys.stderr)
        return
    panels = sorted({(r["b"], r["h_q"], r["h_kv"], r["d"], r["s_q"]) for r in rows})
    cols = 4
    fig, axes = plt.subplots((len(panels) + cols - 1) // cols, cols, figsize=(4 * cols, 3 * ((len(panels) + cols - 1) // cols)),
                             squeeze=False)
    for ax, key in zip(axes.flat, panels):
        sel = [r for r in rows if (r["b"], r["h_q"], r["h_kv"], r["d"], r["s_q"]) == key]
        series = {}
        for r in sel:
            for name, v in r.items():
                if isinstance(v, dict) and "tbps" in v:
                    label = f"{name} paged {r['block']}" if r["block"] else name
                    series.setdefault(label, []).append((r["s_kv"], v["tbps"]))
        for label, pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.axhline(ceiling, ls="--", c="gray", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_title(f"b {key[0]} h {key[1]}/{key[2]} d {key[3]} s_q {key[4]}", fontsize=9)
        ax.set_ylabel("TB/s")
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"decode, {device}: TB/s of K+V read (dashed: read-only ceiling)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def write_json(out, ceiling, gpu_kvcache, rows):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "decode.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "ceiling_tbps": ceiling, "attn_gpu_kvcache": gpu_kvcache,
                   "rows": rows}, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="bench_out")
    ap.add_argument("--max-gib", type=float, default=24.0, help="skip points whose K+V exceed this")
    ap.add_argument("--batches", default=None, help="comma list (default 1,8,64,128; --quick 1,64)")
    ap.add_argument("--seqlens", default=None, help="comma list of s_kv (default 2048,8192,32768,131072)")
    ap.add_argument("--heads", default=None, help="comma list of h_q/h_kv (default 32/8,16/16,64/8; --quick 32/8)")
    ap.add_argument("--dims", default="128", help="comma list of head dims (64, 128, 256)")
    ap.add_argument("--blocks", default="0,16,128", help="comma list of paged block sizes (0: contiguous)")
    ap.add_argument("--graphs", action="store_true", help="also time each call replayed from a CUDA graph")
    ap.add_argument("--between", action="store_true",
                    help="with --graphs: also graphs whose calls each follow a one-element PyTorch kernel")
    ap.add_argument("--flex", action="store_true",
                    help="FlexAttention's decoding path as a peer (contiguous points; compiles once per shape)")
    a = ap.parse_args()
    between = torch.zeros(1, device="cuda") if a.between else None
    ints = lambda text: [int(x) for x in text.split(",")]  # noqa: E731
    batches = ints(a.batches) if a.batches else ([1, 64] if a.quick else [1, 8, 64, 128])
    seqlens = ints(a.seqlens) if a.seqlens else ([8192, 131072] if a.quick else [2048, 8192, 32768, 131072])
    heads = ([tuple(int(x) for x in h.split("/")) for h in a.heads.split(",")] if a.heads
             else [(32, 8)] if a.quick else [(32, 8), (16, 16), (64, 8)])
    gpu_kvcache = attn_gpu_kvcache()
    ceiling = ceiling_tbps(4 << 30)
    print(f"{torch.cuda.get_device_name()}: read-only ceiling {ceiling:.2f} TB/s; attn forward_with_kvcache on the "
          f"GPU: {gpu_kvcache}")
    rows = []
    for d in ints(a.dims):
        for b in batches:
            for s_kv in seqlens:
                for h_q, h_kv in heads:
                    for s_q in (1, 4):
                        for block in ints(a.blocks):
                            if 2 * b * s_kv * h_kv * d * 2 > a.max_gib * 2**30:
                                continue
                            r = point(b, s_kv, h_q, h_kv, d, s_q, block, gpu_kvcache, a.graphs, a.flex,
                                      between)
                            rows.append(r)
                            cells = [f"{n} {v['tbps']:.2f}" for n, v in r.items() if isinstance(v, dict) and "tbps" in v]
                            print(f"d {d} b {b:3} s_kv {s_kv:6} h {h_q}/{h_kv} s_q {s_q} block {block:3}: TB/s " +
                                  ", ".join(cells), flush=True)
                            torch.cuda.empty_cache()
                            write_json(a.out, ceiling, gpu_kvcache, rows)  # after each point: a cut run keeps its rows
    plot(rows, ceiling, os.path.join(a.out, "decode.png"), torch.cuda.get_device_name())


if __name__ == "__main__":
    main()
