"""Decoding against a KV cache (issue 43): s_q query tokens per sequence
against s_kv cached keys, bottom-right causal, bf16, one process, the peers on
the same tensors: PyTorch SDPA with its cuDNN and flash backends, and attn.
TB/s of K+V read and its share of a measured read-only bandwidth ceiling (a
sum over a buffer several times L2, the same bytes as the point's K+V where
they fit). Each point is timed back to back between CUDA events, the peers
alternating round by round (bench/compare.py's interleaved medians), and, as
a second method, call by call after an L2 flush.

attn runs attn.forward_with_kvcache (check_seqlens=False, as a serving
engine's captured step runs it: no read-back of the lengths) where this
build runs it on the GPU, else
its forward on the contiguous cache (the route a transformers decode step
takes today); paged points need the former and are skipped otherwise. Not
timed yet: FlexAttention's decoding path (issue 43 asks for it where it
applies) and the transformers generation step.

    python bench/decode.py [--quick] [--out DIR] [--max-gib 24]
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


def point(b, s_kv, h_q, h_kv, d, s_q, block, gpu_kvcache):
    dt = torch.bfloat16
    q = torch.randn(b, s_q, h_q, d, device="cuda", dtype=dt)
    lens = torch.full((b,), s_kv - s_q, dtype=torch.int32, device="cuda")
    new_k = torch.randn(b, s_q, h_kv, d, device="cuda", dtype=dt)
    new_v = torch.randn(b, s_q, h_kv, d, device="cuda", dtype=dt)
    r = {"b": b, "s_kv": s_kv, "h_q": h_q, "h_kv": h_kv, "d": d, "s_q": s_q, "block": block}
    kv_bytes = 2 * b * s_kv * h_kv * d * 2
    r["kv_gib"] = kv_bytes / 2**30
    fns = {}
    if block:  # paged: blocks of every sequence shuffled in one pool
        blocks = b * s_kv // block
        k_pool = torch.randn(blocks, block, h_kv, d, device="cuda", dtype=dt)
        v_pool = torch.randn(blocks, block, h_kv, d, device="cuda", dtype=dt)
        table = torch.randperm(blocks, device="cuda").view(b, -1).int()
        if gpu_kvcache:
            fns["attn"] = lambda: attn.forward_with_kvcache(q, k_pool, v_pool, new_k, new_v, cache_seqlens=lens,
                                                            block_table=table, check_seqlens=False)
    else:
        k_cache = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dt)
        v_cache = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dt)
        if gpu_kvcache:
            fns["attn"] = lambda: attn.forward_with_kvcache(q, k_cache, v_cache, new_k, new_v, cache_seqlens=lens,
                                                            check_seqlens=False)
        else:
            fns["attn (forward on the cache)"] = lambda: attn.forward(q, k_cache, v_cache, mask="causal_bottom_right")
        # SDPA's [b, h, s, d] views of the same tensors (no copies).
        qt, kt, vt = q.transpose(1, 2), k_cache.transpose(1, 2), v_cache.transpose(1, 2)
        mask = None
        if s_q > 1:
            from torch.nn.attention.bias import causal_lower_right
            mask = causal_lower_right(s_q, s_kv)

        def sdpa(backend):
            def run():
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=h_q != h_kv)
            return run
        fns["sdpa_cudnn"] = sdpa(SDPBackend.CUDNN_ATTENTION)
        fns["sdpa_flash"] = sdpa(SDPBackend.FLASH_ATTENTION)
    ok = {}
    for name, fn in fns.items():  # a peer that cannot run this point says why
        try:
            fn()
            torch.cuda.synchronize()
            ok[name] = (lambda _, fn=fn: fn(), [None])
        except Exception as e:  # noqa: BLE001
            r[name] = {"error": f"{type(e).__name__}: {e}"[:200]}
    loop = interleaved_medians(ok) if ok else {}  # the peers alternate within each round
    for name, (fn, sets) in ok.items():
        cold = flushed_median(fn, sets, reps=15)
        r[name] = {"ms": loop[name], "tbps": kv_bytes / (loop[name] * 1e-3) / 1e12, "flushed_ms": cold,
                   "flushed_tbps": kv_bytes / (cold * 1e-3) / 1e12}
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="bench_out")
    ap.add_argument("--max-gib", type=float, default=24.0, help="skip points whose K+V exceed this")
    a = ap.parse_args()
    gpu_kvcache = attn_gpu_kvcache()
    ceiling = ceiling_tbps(4 << 30)
    print(f"{torch.cuda.get_device_name()}: read-only ceiling {ceiling:.2f} TB/s; attn forward_with_kvcache on the "
          f"GPU: {gpu_kvcache}")
    heads = [(32, 8)] if a.quick else [(32, 8), (16, 16), (64, 8)]
    rows = []
    for b in ((1, 64) if a.quick else (1, 8, 64, 128)):
        for s_kv in ((8192, 131072) if a.quick else (2048, 8192, 32768, 131072)):
            for h_q, h_kv in heads:
                for s_q in (1, 4):
                    for block in (0, 16, 128):
                        if 2 * b * s_kv * h_kv * 128 * 2 > a.max_gib * 2**30:
                            continue
                        r = point(b, s_kv, h_q, h_kv, 128, s_q, block, gpu_kvcache)
                        rows.append(r)
                        cells = [f"{n} {v['tbps']:.2f}" for n, v in r.items() if isinstance(v, dict) and "tbps" in v]
                        print(f"b {b:3} s_kv {s_kv:6} h {h_q}/{h_kv} s_q {s_q} block {block:3}: TB/s " +
                              ", ".join(cells), flush=True)
                        torch.cuda.empty_cache()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "decode.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "ceiling_tbps": ceiling, "attn_gpu_kvcache": gpu_kvcache,
                   "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
