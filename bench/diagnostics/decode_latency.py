"""Where a small decode call's time goes (issue 43): one query token per
sequence at batch 1 and 8, whose K+V (16-64 MB) fit in the H100's L2.

Each call is replayed from a CUDA graph (no host time), over ROT rotating
sets of tensors (q, caches, new k/v), each call a different set, so every
call reads its keys from HBM as a model's layers do; the same on one set
(L2-warm, bench/decode.py --graphs' figure) beside it. attn runs
forward_with_kvcache with and without the append, and at several split
counts, and without lengths (every cache full: the same keys, known at
the launch, as SDPA's are); SDPA cuDNN and flash run on the same caches'
views. Then one replay
of each under torch.profiler: every kernel, its time and the gap before it.

    PYTHONPATH=/tmp/py python3 bench/diagnostics/decode_latency.py [--points b:s_kv:h_q/h_kv:d,..] [--splits 4,8,16]

--eager runs attn and SDPA cuDNN three times each per point and times
nothing: the program to run under ncu (e.g. --kernel-name
regex:"flash_decode_kernel|cudnn_generated" --launch-skip 2 --launch-count 1).
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from decode import replayed_ms, tensors  # noqa: E402

ROT = 8


def make_sets(b, s_kv, h_q, h_kv, d, n):
    """n sets of one decode step's tensors (bench/decode.py's, contiguous caches)."""
    return [tensors(b, s_kv, h_q, h_kv, d, 1, 0) for _ in range(n)]


def variants(sets, s_kv, h_q, h_kv, splits=(4, 8, 16, 32, 64)):
    b = sets[0]["q"].shape[0]
    full = torch.full((b,), s_kv, dtype=torch.int32, device="cuda")

    def kv(splits=0, append=True, lengths=True):
        def run(t):
            if append:  # the set's lengths: s_kv - 1, and one new token
                return attn.forward_with_kvcache(t["q"], t["k"], t["v"], t["new_k"], t["new_v"],
                                                 cache_seqlens=t["lens"], num_splits=splits, check_seqlens=False)
            # Without lengths every cache is full: the same keys, known at the launch
            # (as SDPA's are), so no kernel reads a length before its first loads.
            return attn.forward_with_kvcache(t["q"], t["k"], t["v"], cache_seqlens=full if lengths else None,
                                             num_splits=splits, check_seqlens=False)
        return run

    def sdpa(backend):
        def run(t):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(t["q"].transpose(1, 2), t["k"].transpose(1, 2),
                                                      t["v"].transpose(1, 2), enable_gqa=h_q != h_kv)
        return run

    v = {"attn": kv(), "attn no append": kv(append=False), "attn no lengths": kv(append=False, lengths=False)}
    for s in splits:
        v[f"attn splits {s}"] = kv(s, append=False)
    v["sdpa_cudnn"] = sdpa(SDPBackend.CUDNN_ATTENTION)
    v["sdpa_flash"] = sdpa(SDPBackend.FLASH_ATTENTION)
    return v


def capture(fn, sets):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for t in sets:
            fn(t)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for t in sets:
            fn(t)
    g.replay()
    torch.cuda.synchronize()
    return g


def replay_us(g, calls, reps=30):
    return replayed_ms(g, calls, reps) * 1e3


def kernels_of(g):
    """Kernels of one replay: (name, duration us, gap before it us)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        g.replay()
        torch.cuda.synchronize()
    evs = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    out, prev_end = [], None
    for e in evs:
        gap = 0.0 if prev_end is None else e.time_range.start - prev_end
        out.append((e.name, e.time_range.elapsed_us(), gap))
        prev_end = e.time_range.end
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", default="1:8192:32/8:64,1:8192:32/8:128,1:8192:64/8:128,1:32768:32/8:128,8:8192:32/8:128")
    ap.add_argument("--splits", default="4,8,16,32,64", help="the fixed split counts timed beside the plan's")
    ap.add_argument("--eager", action="store_true", help="three calls of attn and SDPA cuDNN per point, untimed")
    a = ap.parse_args()
    for spec in a.points.split(","):
        b, s_kv, heads, d = spec.split(":")
        b, s_kv, d = int(b), int(s_kv), int(d)
        h_q, h_kv = (int(x) for x in heads.split("/"))
        kv_bytes = 2 * b * s_kv * h_kv * d * 2
        sets = make_sets(b, s_kv, h_q, h_kv, d, ROT)
        if a.eager:
            for name, fn in variants(sets, s_kv, h_q, h_kv).items():
                if name in ("attn", "sdpa_cudnn"):
                    for t in sets[:3]:
                        fn(t)
            torch.cuda.synchronize()
            continue
        print(f"\n## b {b} s_kv {s_kv} h {h_q}/{h_kv} d {d}: K+V {kv_bytes / 2**20:.0f} MiB per call")
        print(f"{'variant':18} {'rotating us':>11} {'TB/s':>6} {'one set us':>10} {'TB/s':>6}")
        graphs = {}
        for name, fn in variants(sets, s_kv, h_q, h_kv, [int(x) for x in a.splits.split(",")]).items():
            try:
                g = capture(fn, sets)
                g1 = capture(fn, sets[:1] * ROT)
            except Exception as e:  # noqa: BLE001 - a variant that cannot run says why
                print(f"{name:18} error: {type(e).__name__}: {str(e)[:120]}")
                continue
            graphs[name] = g
            rot, one = replay_us(g, ROT), replay_us(g1, ROT)
            print(f"{name:18} {rot:11.2f} {kv_bytes / rot / 1e6:6.2f} {one:10.2f} {kv_bytes / one / 1e6:6.2f}")
        for name in ("attn", "attn no append", "attn no lengths", "sdpa_cudnn"):
            if name not in graphs:
                continue
            ks = kernels_of(graphs[name])[:6]
            print(f"  {name}, the first kernels of a replay (us, gap before):")
            for n, t, gap in ks:
                print(f"    {t:7.2f} (+{gap:5.2f}) {n[:90]}")
        del sets, graphs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
