"""Where the max logit's cost lies: per call or per work item. Times one
backend's forward (default flash_sm90) with and without return_max_logit at
a few 1k points for batch b and 2b (twice the work items, the same per-item
work), and the same call behind one extra tiny kernel (what a per-call
launch costs back to back). A per-item cost doubles its microseconds with
the batch; a per-call one does not.

    PYTHONPATH=/tmp/py python3 bench/diagnostics/max_logit_cost.py [--backend flash_sm90]
"""
import argparse
import os
import sys

import torch

import attn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from compare import interleaved_medians, make_sets, warm  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="flash_sm90")
    a = ap.parse_args()
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


if __name__ == "__main__":
    main()
