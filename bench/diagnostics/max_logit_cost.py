"""Where the max logit's cost lies: per call or per work item. Times one
backend's forward (default flash_sm90) with and without return_max_logit at
a few 1k points for batch b and 2b (twice the work items, the same per-item
work), and the same call behind one extra tiny kernel (what a per-call
launch costs back to back). A per-item cost doubles its microseconds with
the batch; a per-call one does not. --lone: the same calls each alone after
an L2 flush, timed as bench/sinks.py's second method does and again with
the GPU held by a spin kernel while the host issues the call (so the host's
time to issue it, also printed, cannot show as GPU time).

    PYTHONPATH=/tmp/py python3 bench/diagnostics/max_logit_cost.py [--backend flash_sm90]
"""
import argparse
import os
import statistics
import sys
import time

import torch

import attn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from compare import flushed_median, interleaved_medians, make_sets, warm  # noqa: E402
from sinks import variants  # noqa: E402


def lone_times(fn, sets, reps=30):
    """(host us to issue one call, median us of one call alone after an L2
    flush with the host's issue hidden under a spin kernel)."""
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    host, gpu = [], []
    for i in range(reps):
        flush.zero_()
        torch.cuda._sleep(2_000_000)  # about 1 ms at the H100's clock: the host issues the call meanwhile
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        fn(sets[i % len(sets)])
        host.append((time.perf_counter() - t0) * 1e6)
        end.record()
        end.synchronize()
        gpu.append(start.elapsed_time(end) * 1e3)
    return statistics.median(host), statistics.median(gpu)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="flash_sm90")
    ap.add_argument("--lone", action="store_true")
    a = ap.parse_args()
    if a.lone:
        return lone(a.backend)
    print(f"{'d':>4} {'s':>5} {'causal':>6} {'b':>3} | vanilla us  max_logit us  delta us  ratio | "
          "extra kernel delta us")
    for d, s, causal in ((64, 1024, True), (64, 1024, False), (128, 1024, True)):
        h = 2048 // d
        mask = "causal" if causal else "no_mask"
        for b in (16, 32):
            sets = make_sets(b, s, h, d)
            buf = torch.empty(h, device="cuda", dtype=torch.float32)
            tiny = torch.empty(1, device="cuda", dtype=torch.int32)

            def vanilla(t):
                return attn.forward(t[0], t[1], t[2], mask=mask, backend=a.backend)

            def max_logit(t):
                return attn.forward(t[0], t[1], t[2], mask=mask, backend=a.backend, max_logit=buf)

            def extra_kernel(t):
                tiny.zero_()
                return vanilla(t)

            fns = {"vanilla": (vanilla, sets), "max_logit": (max_logit, sets), "extra": (extra_kernel, sets)}
            for fn, fs in fns.values():
                warm(fn, fs)
            t = interleaved_medians(fns, budget_ms=1500.0)
            us = {k: v * 1e3 for k, v in t.items()}
            print(f"{d:>4} {s:>5} {str(causal):>6} {b:>3} | {us['vanilla']:10.1f} {us['max_logit']:13.1f} "
                  f"{us['max_logit'] - us['vanilla']:9.2f} {us['max_logit'] / us['vanilla']:6.3f} | "
                  f"{us['extra'] - us['vanilla']:8.2f}", flush=True)
            del sets
            torch.cuda.empty_cache()


def lone(backend):
    print(f"{'d':>4} {'s':>5} {'causal':>6} | {'call':>9} | flushed us | host us  spin+flushed us")
    for d, s, causal in ((64, 1024, False), (64, 1024, True), (128, 1024, False), (128, 1024, True)):
        h, b = 2048 // d, 16384 // s
        sets = make_sets(b, s, h, d)
        kinds, fwd, _, _ = variants(backend, causal, h)
        for name, kw in kinds.items():
            fn = fwd(kw)
            warm(fn, sets)
            flushed = flushed_median(fn, sets) * 1e3
            host, gpu = lone_times(fn, sets)
            print(f"{d:>4} {s:>5} {str(causal):>6} | {name:>9} | {flushed:10.1f} | {host:7.1f}  {gpu:14.1f}",
                  flush=True)
        del sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
