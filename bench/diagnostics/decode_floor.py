"""A decode call's fixed cost against its cost per byte (issue 43): one query
token per sequence, h 32/8, d 128, bf16, at batch 1 and 8, s_kv from 64 to
16k keys, each call replayed from a CUDA graph over 8 rotating sets (us per
call): attn as bench/decode.py runs it, attn with one split, attn without
the append, SDPA cuDNN and flash. Where a row's time stops falling with
s_kv is the call's floor; the slope above it is its streaming rate. At
s_kv 2048 and b 1 it also prints one replay's kernels (torch.profiler).

    PYTHONPATH=/tmp/py python3 bench/diagnostics/decode_floor.py
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode import tensors  # noqa: E402
from decode_latency import ROT, capture, kernels_of, replay_us  # noqa: E402


def implementations(h_q, h_kv):
    def kv(splits=0, append=True):
        def run(t):
            if append:
                return attn.forward_with_kvcache(t["q"], t["k"], t["v"], t["new_k"], t["new_v"],
                                                 cache_seqlens=t["lens"], num_splits=splits, check_seqlens=False)
            return attn.forward_with_kvcache(t["q"], t["k"], t["v"], cache_seqlens=t["lens_after"],
                                             num_splits=splits, check_seqlens=False)
        return run

    def sdpa(backend):
        def run(t):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(t["q"].transpose(1, 2), t["k"].transpose(1, 2),
                                                      t["v"].transpose(1, 2), enable_gqa=h_q != h_kv)
        return run
    return {"attn": kv(), "attn 1 split": kv(1), "attn no append": kv(append=False),
            "sdpa cudnn": sdpa(SDPBackend.CUDNN_ATTENTION), "sdpa flash": sdpa(SDPBackend.FLASH_ATTENTION)}


def main():
    h_q, h_kv, d = 32, 8, 128
    for b in (1, 8):
        impls = implementations(h_q, h_kv)
        print(f"\n## b {b} h {h_q}/{h_kv} d {d}: us per call from graphs over {ROT} rotating sets")
        print(f"{'s_kv':>6} {'MB':>7} " + " ".join(f"{n:>14}" for n in impls))
        for s_kv in (64, 256, 1024, 2048, 4096, 8192, 16384):
            sets = [tensors(b, s_kv, h_q, h_kv, d, 1, 0) for _ in range(ROT)]
            for t in sets:  # the same keys without the append: lengths after it, made outside the graph
                t["lens_after"] = t["lens"] + 1
            cells, shown = [], []
            for name, fn in impls.items():
                g = capture(fn, sets)
                cells.append(f"{replay_us(g, ROT):14.2f}")
                if b == 1 and s_kv == 2048 and name in ("attn", "sdpa cudnn"):
                    shown.append((name, kernels_of(g)[:4]))
            print(f"{s_kv:6d} {2 * b * s_kv * h_kv * d * 2 / 1e6:7.2f} " + " ".join(cells), flush=True)
            for name, ks in shown:
                print(f"       {name}, one replay's first kernels (us, gap before it us):")
                for k in ks:
                    print(f"         {k[0][:64]:64} {k[1]:7.2f} {k[2]:7.2f}")


if __name__ == "__main__":
    main()
