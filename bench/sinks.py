"""What a softmax sink and the max logit cost: one backend (default
flash_sm90), the same bf16 tensors, the call with a learnable sink (and its
dsink in the backward) or with return_max_logit against the same call
without, over shared/ANCHORS.md's d 64/128 grid (seqlen 1k/4k/16k, causal or
not, batch = 16384/seqlen, heads = 2048/d). Two timings in one process:
back-to-back calls between CUDA events (bench/compare.py's interleaved
medians) and each call alone after an L2 flush (as triton's do_bench).
Prints ratios (time with / time without; 1.00 = free) and writes JSON. A
third estimate pairs the back-to-back samples: the median over rounds of the
ratio within each round (clock and power drift between rounds cancel; the 2%
clause of the max logit sits near this bench's round-to-round noise).

    python bench/sinks.py [--backend flash_sm90] [--quick] [--out DIR]
"""
import argparse
import json
import os
import statistics
import sys

import torch

import attn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import flushed_median, interleaved_samples, make_sets, warm  # noqa: E402

def medians_and_paired_ratios(fns, base):
    """From one interleaved run: the median time of each implementation, and
    for each but base the median over rounds of its time / base's time in
    the same round."""
    samples = interleaved_samples(fns)
    medians = {name: statistics.median(t) for name, t in samples.items()}
    paired = {name: statistics.median(x / y for x, y in zip(t, samples[base]))
              for name, t in samples.items() if name != base}
    return medians, paired


def variants(backend, causal, h):
    mask = "causal" if causal else "no_mask"
    sink = torch.linspace(-1.0, 2.0, h, device="cuda", dtype=torch.float32)
    kinds = {"vanilla": {}, "sink": dict(softmax_type="learnable", sink=sink),
             "max_logit": dict(return_max_logit=True)}

    def fwd(kw):
        return lambda t: attn.forward(t[0], t[1], t[2], mask=mask, backend=backend, **kw)

    def bwd_sets(kw, sets):
        out = []
        for q, k, v, dout in sets:
            o, lse = attn.forward(q, k, v, mask=mask, backend=backend, return_lse=True,
                                  **{n: x for n, x in kw.items() if n != "return_max_logit"})
            out.append((q, k, v, dout, o, lse))
        return out

    def bwd(kw):
        kw = {n: x for n, x in kw.items() if n != "return_max_logit"}
        return lambda t: attn.backward(t[0], t[1], t[2], t[4], t[3], t[5], mask=mask, backend=backend, **kw)

    return kinds, fwd, bwd_sets, bwd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="flash_sm90")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="bench_out")
    a = ap.parse_args()
    rows = []
    print(f"{'d':>4} {'s':>6} {'causal':>6} | fwd sink  fwd max_logit  bwd sink(+dsink) | same, each call after an L2 flush"
          " | same, paired per round")
    for d in (64, 128):
        for s in ((1024, 4096) if a.quick else (1024, 4096, 16384)):
            for causal in (False, True):
                b, h = 16384 // s, 2048 // d
                sets = make_sets(b, s, h, d)
                kinds, fwd, bwd_sets, bwd = variants(a.backend, causal, h)
                fwd_fns = {k: (fwd(kw), sets) for k, kw in kinds.items()}
                bwd_fns = {k: (bwd(kw), bwd_sets(kw, sets)) for k, kw in kinds.items() if k != "max_logit"}
                for fn, fn_sets in list(fwd_fns.values()) + list(bwd_fns.values()):
                    warm(fn, fn_sets)
                loop, paired = {}, {}
                for p, fns in (("fwd", fwd_fns), ("bwd", bwd_fns)):
                    medians, ratios = medians_and_paired_ratios(fns, "vanilla")
                    loop.update({f"{p}_{k}": v for k, v in medians.items()})
                    paired.update({f"{p}_{k}": v for k, v in ratios.items()})
                cold = {f"fwd_{k}": flushed_median(*v) for k, v in fwd_fns.items()}
                cold.update({f"bwd_{k}": flushed_median(*v) for k, v in bwd_fns.items()})
                r = {"d": d, "seqlen": s, "causal": causal, "batch": b, "heads": h, "loop_ms": loop, "flushed_ms": cold}
                ratio = lambda t, k, base: t[k] / t[base]  # noqa: E731
                cols = [(ratio(t, "fwd_sink", "fwd_vanilla"), ratio(t, "fwd_max_logit", "fwd_vanilla"),
                         ratio(t, "bwd_sink", "bwd_vanilla")) for t in (loop, cold)]
                r["ratios_loop"], r["ratios_flushed"] = cols
                r["ratios_paired"] = [paired["fwd_sink"], paired["fwd_max_logit"], paired["bwd_sink"]]
                rows.append(r)
                pr = r["ratios_paired"]
                print(f"{d:>4} {s:>6} {str(causal):>6} | {cols[0][0]:8.3f} {cols[0][1]:13.3f} {cols[0][2]:17.3f} | "
                      f"{cols[1][0]:.3f} {cols[1][1]:.3f} {cols[1][2]:.3f} | {pr[0]:.3f} {pr[1]:.3f} {pr[2]:.3f}",
                      flush=True)
                del sets, fwd_fns, bwd_fns
                torch.cuda.empty_cache()
    for key in ("ratios_loop", "ratios_flushed", "ratios_paired"):
        worst = [max(r[key][i] for r in rows) for i in range(3)]
        gm = [statistics.geometric_mean([r[key][i] for r in rows]) for i in range(3)]
        print(f"{key}: geomean fwd sink {gm[0]:.3f}, max_logit {gm[1]:.3f}, bwd sink {gm[2]:.3f}; "
              f"worst {worst[0]:.3f}, {worst[1]:.3f}, {worst[2]:.3f}")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "sinks.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "backend": a.backend, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
