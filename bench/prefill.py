"""Chunked prefill against a KV cache (issue 43): a chunk of s_q query tokens
per sequence whose earlier `prior` tokens sit in the cache, bottom-right
causal, bf16, one process. attn.forward_with_kvcache reads the cache in place
(check_seqlens=False, as a serving engine's step runs it), contiguous and
paged (blocks of every sequence shuffled in one pool), against the same
attention as a plain prefill: attn.forward on contiguous K/V of prior + s_q
keys (the ratio's base), and PyTorch SDPA's cuDNN backend on the same
tensors. The cache already holds the chunk's keys (s_new = 0), so every
variant times the attention alone. TFLOP/s of the visible pairs; each point
timed back to back between CUDA events with attn's variants alternating
round by round, and call by call after an L2 flush (the second method).
SDPA cuDNN (0.4-0.5x the prefill here) is timed in rounds of its own: in
the same rounds its long calls moved the variants next to it (H200, b 4,
paged 64 / 128: 0.944 / 0.932 of the prefill with it, 0.977 / 0.970
without; docs/perf/prefill-rounds-2026-11-29-h200.json).

    python bench/prefill.py [--quick] [--out DIR] [--blocks 16,64,128] [--budget-ms 400] [--no-sdpa]

Writes prefill.json to --out and prints a table, paged / contiguous last.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

import attn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import flushed_median, interleaved_medians  # noqa: E402


def point(b, prior, s_q, h_q, h_kv, d, blocks, budget_ms=400.0, sdpa=True):
    dt = torch.bfloat16
    s_kv = prior + s_q
    q = torch.randn(b, s_q, h_q, d, device="cuda", dtype=dt)
    k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dt)
    v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dt)
    lens = torch.full((b,), s_kv, dtype=torch.int32, device="cuda")
    pairs = s_q * prior + s_q * (s_q + 1) // 2
    r = {"b": b, "prior": prior, "s_q": s_q, "h_q": h_q, "h_kv": h_kv, "d": d,
         "tflop": 4 * b * h_q * d * pairs / 1e12}
    fns = {
        "prefill": lambda: attn.forward(q, k, v, mask="causal_bottom_right"),
        "cache": lambda: attn.forward_with_kvcache(q, k, v, cache_seqlens=lens, check_seqlens=False),
    }
    for bs in blocks:
        n = b * ((s_kv + bs - 1) // bs)
        k_pool = torch.randn(n, bs, h_kv, d, device="cuda", dtype=dt)
        v_pool = torch.randn(n, bs, h_kv, d, device="cuda", dtype=dt)
        table = torch.randperm(n, device="cuda").view(b, -1).int()
        for i in range(b):  # the same keys, block by block
            for j in range((s_kv + bs - 1) // bs):
                rows = min(bs, s_kv - j * bs)
                k_pool[table[i, j], :rows] = k[i, j * bs:j * bs + rows]
                v_pool[table[i, j], :rows] = v[i, j * bs:j * bs + rows]
        fns[f"paged{bs}"] = (lambda kp=k_pool, vp=v_pool, t=table: attn.forward_with_kvcache(
            q, kp, vp, cache_seqlens=lens, block_table=t, check_seqlens=False))
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    mask = causal_lower_right(s_q, s_kv)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=h_q != h_kv)
    if sdpa:
        fns["sdpa_cudnn"] = cudnn
    ref = fns["prefill"]().float()
    ok = {}
    for name, fn in fns.items():
        try:
            out = fn()
            out = out.transpose(1, 2) if name == "sdpa_cudnn" else out
            err = (out.float() - ref).abs().max().item()
            if name != "prefill" and not err < 0.05:
                raise RuntimeError(f"differs from the prefill by {err}")
            ok[name] = (lambda _, fn=fn: fn(), [None])
        except Exception as e:  # noqa: BLE001 - a variant that cannot run says why
            r[name] = {"error": f"{type(e).__name__}: {e}"[:200]}
    peer = {n: ok.pop(n) for n in ("sdpa_cudnn",) if n in ok}
    loop = interleaved_medians(ok, budget_ms=budget_ms)
    if peer:
        loop.update(interleaved_medians(peer, budget_ms=budget_ms))
    ok.update(peer)
    for name, (fn, sets) in ok.items():
        cold = flushed_median(fn, sets, reps=10)
        r[name] = {"ms": loop[name], "tflops": r["tflop"] / (loop[name] * 1e-3), "flushed_ms": cold}
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=".")
    ap.add_argument("--blocks", default="16,64,128")
    ap.add_argument("--budget-ms", type=float, default=400.0,
                    help="back-to-back rounds go on until their time reaches this (5 rounds at least)")
    ap.add_argument("--no-sdpa", action="store_true", help="leave SDPA cuDNN out")
    a = ap.parse_args()
    blocks = [int(x) for x in a.blocks.split(",") if x]
    grid = [(1, 4096, 512), (1, 16384, 2048), (4, 4096, 2048), (8, 2048, 512)]
    if a.quick:
        grid = grid[:2]
    os.makedirs(a.out, exist_ok=True)
    print(f"{torch.cuda.get_device_name()}, h 32/8, d 128, bf16, causal; ms (TFLOP/s); ratios against the "
          "prefill on contiguous K/V: back to back | after an L2 flush")
    rows = []
    names = ["prefill", "cache"] + [f"paged{bs}" for bs in blocks] + ([] if a.no_sdpa else ["sdpa_cudnn"])
    for b, prior, s_q in grid:
        r = point(b, prior, s_q, 32, 8, 128, blocks, a.budget_ms, not a.no_sdpa)
        rows.append(r)
        base = r["prefill"]
        cells = []
        for n in names:
            x = r.get(n, {})
            if "ms" not in x:
                cells.append(f"{n} {x.get('error', 'n/a')[:60]}")
                continue
            cells.append(f"{n} {x['ms']:.3f} ({x['tflops']:.0f}) {base['ms'] / x['ms']:.3f}|"
                         f"{base['flushed_ms'] / x['flushed_ms']:.3f}")
        print(f"b {b} prior {prior} chunk {s_q}: " + "; ".join(cells), flush=True)
    with open(os.path.join(a.out, "prefill.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "commit": attn.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
