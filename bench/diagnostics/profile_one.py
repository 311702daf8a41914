"""Which GPU kernels one attention call launches, and for how long: attn
against PyTorch's SDPA (cuDNN backend, or FlashAttention-2 with --peer flash)
on one ANCHORS point, under torch.profiler.
Usage: python3 bench/diagnostics/profile_one.py [--d 128 --seqlen 1024 --causal --peer flash]"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import attn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--kv-heads", type=int, default=None)
    ap.add_argument("--backward", action="store_true", help="forward + backward through autograd")
    ap.add_argument("--backend", default=None, help="force one attn backend (default: attn's choice)")
    ap.add_argument("--layout", choices=("bshd", "bhsd"), default="bshd",
                    help="bhsd: q and k in [b, h, s, d] memory, passed as bshd views, v in [b, s, h, d] "
                         "(what a transformers model hands its attention function after rotary)")
    ap.add_argument("--peer", choices=("cudnn", "flash"), default="cudnn", help="SDPA's backend to compare with")
    a = ap.parse_args()
    b, h = a.batch or 16384 // a.seqlen, a.heads or 2048 // a.d
    hk = a.kv_heads or h
    def make(heads, layout):
        shape = (b, heads, a.seqlen, a.d) if layout == "bhsd" else (b, a.seqlen, heads, a.d)
        t = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        t = t.transpose(1, 2) if layout == "bhsd" else t  # a bshd view either way
        return t.requires_grad_(a.backward)
    q, k, v = make(h, a.layout), make(hk, a.layout), make(hk, "bshd")
    do = torch.randn(q.shape, device="cuda", dtype=torch.bfloat16)  # bshd, as from the output projection
    mask = "causal" if a.causal else "no_mask"

    def run_attn():
        if a.backward:
            import attn.torch as at
            at.attention(q, k, v, mask=mask, backend=a.backend).backward(do)
        else:
            attn.forward(q, k, v, mask=mask, backend=a.backend)

    peer = SDPBackend.CUDNN_ATTENTION if a.peer == "cudnn" else SDPBackend.FLASH_ATTENTION

    def run_sdpa():
        with sdpa_kernel(peer):
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=a.causal, enable_gqa=hk != h)
        if a.backward:
            o.transpose(1, 2).backward(do)

    for name, fn in (("attn", run_attn), ("sdpa_" + a.peer, run_sdpa)):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(a.calls):
                fn()
            torch.cuda.synchronize()
        print(f"== {name}: d {a.d} seqlen {a.seqlen} causal {a.causal}, {a.layout}, {a.calls} calls")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=16, max_name_column_width=70))


if __name__ == "__main__":
    main()
