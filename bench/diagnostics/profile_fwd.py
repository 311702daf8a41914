"""Where a forward call's time goes, attn against PyTorch SDPA's cuDNN backend
on the same inputs: the GPU time of each kernel per call (torch.profiler), the
time per call between CUDA events in a back-to-back stream (as bench/compare.py
measures it), and the host's time to issue one call. When the events' time is
above the kernels' sum, the stream has gaps (launch latency, a host that
cannot keep up); when the host's time is above the events', the host is the limit.

    python3 bench/diagnostics/profile_fwd.py [--backend flash_sm90] [--points 64:1024:T,128:1024:F]
"""
import argparse
import collections
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import attn


def parse_points(text):
    for item in text.split(","):
        d, s, c = item.split(":")
        yield int(d), int(s), c.upper() == "T"


def kernel_times(fn, sets, calls):
    """{kernel name: (calls, GPU microseconds per forward call)}."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            fn(sets[i % len(sets)])
        torch.cuda.synchronize()
    per_kernel = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per_kernel[e.name][0] += 1
            per_kernel[e.name][1] += e.device_time
    return {name: (n / calls, us / calls) for name, (n, us) in per_kernel.items()}


def event_time(fn, sets, calls):
    """Microseconds per call between CUDA events, calls issued back to back."""
    fn(sets[-1])
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(calls):
        fn(sets[i % len(sets)])
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def host_time(fn, sets, calls):
    """Microseconds the host takes to issue one call (the GPU queue stays short of full)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(calls):
        fn(sets[i % len(sets)])
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e6 / calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="flash_sm90")
    ap.add_argument("--points", default="64:1024:F,64:1024:T,128:1024:F,128:1024:T")
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args()
    torch.manual_seed(0)
    for d, s, causal in parse_points(args.points):
        b, h = 16384 // s, 2048 // d
        sets = [tuple(torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                for _ in range(2)]
        mask = "causal" if causal else "no_mask"

        def ours(t):
            attn.forward(*t, mask=mask, backend=args.backend)

        def cudnn(t):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in t), is_causal=causal)

        print(f"d {d} seqlen {s} {'causal' if causal else 'non-causal'} (b {b}, h {h})")
        for name, fn in ((args.backend, ours), ("sdpa_cudnn", cudnn)):
            for i in range(5):
                fn(sets[i % 2])
            kernels = kernel_times(fn, sets, args.calls)
            ev = min(event_time(fn, sets, args.calls) for _ in range(3))
            host = min(host_time(fn, sets, args.calls) for _ in range(3))
            gpu = sum(us for _, us in kernels.values())
            print(f"  {name:11s} events {ev:8.1f} us/call | kernels {gpu:8.1f} | host {host:6.1f}")
            for kname, (n, us) in sorted(kernels.items(), key=lambda kv: -kv[1][1]):
                print(f"      {us:8.1f} us  x{n:.0f}  {kname[:90]}")


if __name__ == "__main__":
    main()
