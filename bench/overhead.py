"""Host overhead of one attention call: a tiny problem whose GPU time is a few
microseconds, called many times; the wall time per call is then the cost of
issuing it (Python, validation, selection, plan lookup, launch). attn against
PyTorch's SDPA on the same tensors. Usage: python3 bench/overhead.py"""
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attn


def per_call_us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def main():
    q, k, v = (torch.randn(1, 128, 2, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    chosen = attn.explain(q, k, v, mask="causal").chosen

    def sdpa(backend):
        def call():
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
        return call

    rows = [(f"attn.forward ({chosen})", per_call_us(lambda: attn.forward(q, k, v, mask="causal"))),
            ("sdpa cudnn", per_call_us(sdpa(SDPBackend.CUDNN_ATTENTION))),
            ("sdpa flash", per_call_us(sdpa(SDPBackend.FLASH_ATTENTION)))]
    print("host time per call, tiny problem (b 1, s 128, h 2, d 64, causal):")
    for name, us in rows:
        print(f"  {name:28s} {us:7.1f} us")


if __name__ == "__main__":
    main()
