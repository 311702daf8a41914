"""One chunked-prefill call shape of bench/prefill.py (b 1, 16384 cached
tokens, a chunk of 2048; h 32/8, d 128, bf16, bottom-right causal), run a
few times in one variant, for a profiler (ncu -k flash_fwd --launch-skip 2
--launch-count 1): `prefill` (attn.forward on contiguous K/V), `cache` (the
same keys as a contiguous cache) or `pagedN` (blocks of N keys, shuffled).

    python bench/diagnostics/prefill_one.py VARIANT [--calls 3]
"""
import argparse

import torch

import attn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("variant")
    ap.add_argument("--calls", type=int, default=3)
    a = ap.parse_args()
    b, prior, s_q, h_q, h_kv, d = 1, 16384, 2048, 32, 8, 128
    s_kv = prior + s_q
    dt = torch.bfloat16
    q = torch.randn(b, s_q, h_q, d, device="cuda", dtype=dt)
    k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dt)
    v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dt)
    lens = torch.full((b,), s_kv, dtype=torch.int32, device="cuda")
    if a.variant == "prefill":
        def fn():
            return attn.forward(q, k, v, mask="causal_bottom_right")
    elif a.variant == "cache":
        def fn():
            return attn.forward_with_kvcache(q, k, v, cache_seqlens=lens, check_seqlens=False)
    else:
        bs = int(a.variant.removeprefix("paged"))
        n = b * ((s_kv + bs - 1) // bs)
        table = torch.randperm(n, device="cuda").view(b, -1).int()
        kp = torch.zeros(n, bs, h_kv, d, device="cuda", dtype=dt)
        vp = torch.zeros(n, bs, h_kv, d, device="cuda", dtype=dt)
        kp[table[0].long()] = k[0].view(-1, bs, h_kv, d)
        vp[table[0].long()] = v[0].view(-1, bs, h_kv, d)

        def fn():
            return attn.forward_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table, check_seqlens=False)
    ref = attn.forward(q, k, v, mask="causal_bottom_right").float()
    for _ in range(a.calls):
        out = fn()
    torch.cuda.synchronize()
    print(a.variant, "max |out - prefill|", (out.float() - ref).abs().max().item())


if __name__ == "__main__":
    main()
