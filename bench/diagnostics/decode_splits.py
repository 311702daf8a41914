"""flash_decode's TB/s against its split count: forward_with_kvcache at a
few decode points with num_splits fixed (0 = the heuristic's choice), so a
figure that rises with the splits says the CTAs need more reads in flight,
one that falls says the splits cost more than they give. bf16, d 128,
h 32/8, one query token, contiguous and paged (block 16) caches.

    PYTHONPATH=/tmp/py python3 bench/diagnostics/decode_splits.py
"""
import os
import sys

import torch

import attn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from compare import interleaved_medians  # noqa: E402


def main():
    dt, h_q, h_kv, d = torch.bfloat16, 32, 8, 128
    print(f"{'b':>3} {'s_kv':>7} {'block':>5} | TB/s by num_splits")
    for b, s_kv, splits in ((1, 131072, (0, 16, 49, 98, 128)), (64, 8192, (0, 1, 2, 3, 6, 12)),
                            (8, 32768, (0, 4, 12, 24, 48))):
        for block in (0, 16):
            q = torch.randn(b, 1, h_q, d, device="cuda", dtype=dt)
            lens = torch.full((b,), s_kv - 1, dtype=torch.int32, device="cuda")
            nk, nv = (torch.randn(b, 1, h_kv, d, device="cuda", dtype=dt) for _ in range(2))
            if block:
                blocks = b * s_kv // block
                kc, vc = (torch.randn(blocks, block, h_kv, d, device="cuda", dtype=dt) for _ in range(2))
                table = torch.randperm(blocks, device="cuda").view(b, -1).int()
            else:
                kc, vc = (torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dt) for _ in range(2))
                table = None
            fns = {n: (lambda _, n=n: attn.forward_with_kvcache(q, kc, vc, nk, nv, cache_seqlens=lens,
                                                                 block_table=table, num_splits=n,
                                                                 check_seqlens=False), [None]) for n in splits}
            for fn, _ in fns.values():
                fn(None)
            torch.cuda.synchronize()
            t = interleaved_medians(fns, budget_ms=800.0)
            kv = 2 * b * s_kv * h_kv * d * 2
            print(f"{b:>3} {s_kv:>7} {block:>5} | " + ", ".join(f"{n}: {kv / (t[n] * 1e-3) / 1e12:.2f}" for n in splits),
                  flush=True)
            del kc, vc
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
