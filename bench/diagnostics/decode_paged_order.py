"""Where a paged cache's decode time goes (issue 43): the same call on a
contiguous cache, on a paged one whose blocks lie in order (the contiguous
cache's very addresses, read through the block table) and on one whose
blocks are shuffled, at fixed split counts and the plan's (0), replayed
from CUDA graphs over rotating sets (bench/decode.py's method). In-order
as slow as shuffled points at the kernel's paged path; in-order as fast as
contiguous points at where the shuffled blocks lie (pages, DRAM). A fixed
count also fixes the rows: more than 16 per KV head (--tokens x the group)
take two row blocks per CTA where they fit, which the plan's count may not.

    PYTHONPATH=/tmp/py python3 bench/diagnostics/decode_paged_order.py [--points b:s_kv,..] [--splits 0,1,2]
        [--heads 32/8] [--tokens 1]
"""
import argparse
import os
import sys

import torch

import attn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from decode import graph_ms, rotating_sets, tensors  # noqa: E402


def sets(b, s_kv, h_q, h_kv, d, s_q, block, order, n):
    """n sets of bench/decode.py's tensors for s_q tokens per sequence; "in
    order" gives sequence b blocks b * per .. (b + 1) * per - 1 of the pool."""
    out = []
    for _ in range(n):
        t = tensors(b, s_kv, h_q, h_kv, d, s_q, block)
        if block and order == "in order":
            t["table"] = torch.arange(t["table"].numel(), device="cuda", dtype=torch.int32).view(b, -1)
        out.append(t)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", default="16:8192,16:2048,8:8192")
    ap.add_argument("--splits", default="0,1,2")
    ap.add_argument("--heads", default="32/8")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=1, help="query tokens per sequence (s_q)")
    a = ap.parse_args()
    h_q, h_kv = map(int, a.heads.split("/"))
    print(f"{torch.cuda.get_device_name()}: us per call from CUDA graphs (TB/s of K+V), h {h_q}/{h_kv}, d {a.d}, "
          f"s_q {a.tokens}")
    for p in a.points.split(","):
        b, s_kv = map(int, p.split(":"))
        kv_bytes = 2 * b * s_kv * h_kv * a.d * 2
        n = rotating_sets(kv_bytes)
        cases = [("contiguous", 0, None), ("paged 16 in order", 16, "in order"), ("paged 16 shuffled", 16, "shuffled"),
                 ("paged 128 shuffled", 128, "shuffled")]
        for name, block, order in cases:
            ts = sets(b, s_kv, h_q, h_kv, a.d, a.tokens, block, order, n)
            cells = []
            for splits in map(int, a.splits.split(",")):
                def fn(i, splits=splits):
                    t = ts[i % n]
                    return attn.forward_with_kvcache(t["q"], t["k"], t["v"], t["new_k"], t["new_v"],
                                                     cache_seqlens=t["lens"], block_table=t["table"],
                                                     num_splits=splits, check_seqlens=False)
                ms = graph_ms(fn, calls=max(8, n))
                cells.append(f"splits {splits}: {ms * 1e3:7.1f} ({kv_bytes / (ms * 1e-3) / 1e12:.2f})")
            print(f"PO b {b} s_kv {s_kv} {name:20s} " + "  ".join(cells), flush=True)
            del ts
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
