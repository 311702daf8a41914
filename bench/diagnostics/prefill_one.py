"""One chunked-prefill call shape of bench/prefill.py (b 1, 16384 cached
tokens, a chunk of 2048; h 32/8, d 128, bf16, bottom-right causal), run a
few times in one variant, for a profiler (ncu -k flash_fwd --launch-skip 2
--launch-count 1): `prefill` (attn.forward on contiguous K/V), `cache` (the
same keys as a contiguous cache), `copy` (a contiguous cache in buffers
allocated after K/V's, as the paged pools are), `pagedN` (blocks of N keys,
shuffled) or `pagedNseq` (the blocks in order: the paged path over the
contiguous layout). --time VARIANT,...: each variant's median ms back to back instead
(bench/compare.py's interleaved rounds). --shape B,PRIOR,CHUNK takes
another of bench/prefill.py's points.

    python bench/diagnostics/prefill_one.py VARIANT [--calls 3] [--shape 4,4096,2048]
    python bench/diagnostics/prefill_one.py --time cache,paged128,paged128seq
"""
import argparse
import os
import sys

import torch

import attn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from compare import interleaved_medians  # noqa: E402


def make(variant, b=1, prior=16384, s_q=2048):
    """The call of one variant, and the plain prefill's output to check it."""
    h_q, h_kv, d = 32, 8, 128
    s_kv = prior + s_q
    dt = torch.bfloat16
    q = torch.randn(b, s_q, h_q, d, device="cuda", dtype=dt)
    k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dt)
    v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dt)
    lens = torch.full((b,), s_kv, dtype=torch.int32, device="cuda")
    if variant == "prefill":
        def fn():
            return attn.forward(q, k, v, mask="causal_bottom_right")
    elif variant in ("cache", "copy"):
        kc, vc = (k.clone(), v.clone()) if variant == "copy" else (k, v)

        def fn():
            return attn.forward_with_kvcache(q, kc, vc, cache_seqlens=lens, check_seqlens=False)
    else:
        bs = int(variant.removeprefix("paged").removesuffix("seq"))
        n = b * ((s_kv + bs - 1) // bs)
        order = torch.arange(n, device="cuda") if variant.endswith("seq") else torch.randperm(n, device="cuda")
        table = order.view(b, -1).int()
        kp = torch.zeros(n, bs, h_kv, d, device="cuda", dtype=dt)
        vp = torch.zeros(n, bs, h_kv, d, device="cuda", dtype=dt)
        for i in range(b):
            kp[table[i].long()] = k[i].view(-1, bs, h_kv, d)
            vp[table[i].long()] = v[i].view(-1, bs, h_kv, d)

        def fn():
            return attn.forward_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table, check_seqlens=False)
    return fn, attn.forward(q, k, v, mask="causal_bottom_right").float()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("variant", nargs="?")
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--time", default="")
    ap.add_argument("--shape", default="1,16384,2048", help="b, cached tokens, chunk")
    a = ap.parse_args()
    shape = [int(x) for x in a.shape.split(",")]
    if a.time:
        fns = {}
        for v in a.time.split(","):
            fn, ref = make(v, *shape)
            err = (fn().float() - ref).abs().max().item()
            assert err < 0.05, f"{v} differs from the prefill by {err}"
            fns[v] = (lambda _, fn=fn: fn(), [None])
        t = interleaved_medians(fns, budget_ms=1500.0)
        base = t[next(iter(t))]
        for v, ms in t.items():
            print(f"{v:>12} {ms:8.3f} ms  {base / ms:6.3f}x the first")
        return
    fn, ref = make(a.variant, *shape)
    for _ in range(a.calls):
        out = fn()
    torch.cuda.synchronize()
    print(a.variant, "max |out - prefill|", (out.float() - ref).abs().max().item())


if __name__ == "__main__":
    main()
