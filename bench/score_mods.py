"""The backward with score changes (softcap, ALiBi) per backend: flash_sm90,
flash_sm80 and cudnn where they claim the call, on the same bf16 tensors,
over shared/ANCHORS.md's d 64/128 points (seqlen 1k/4k/16k, causal or not,
batch = 16384/seqlen, heads = 2048/d), with the same call without the
change on flash_sm90 as the yardstick. Back-to-back calls between CUDA
events (bench/compare.py's interleaved medians). Prints TFLOP/s (the
backward's 2.5x the forward's FLOPs, halved for causal) and writes JSON.

    python bench/score_mods.py [--quick] [--out DIR]
"""
import argparse
import json
import os
import statistics
import sys

import torch

import attn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import interleaved_medians, make_sets, warm  # noqa: E402

BACKENDS = ("flash_sm90", "flash_sm80", "cudnn")


def mods(h):
    slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)], device="cuda", dtype=torch.float32)
    return {"plain": {}, "softcap": dict(softcap=50.0), "alibi": dict(alibi_slopes=slopes)}


def backward_fn(backend, mask, kw, sets):
    """The backward alone on each set's forward (run once here, by the same backend)."""
    prepared = []
    for q, k, v, dout in sets:
        o, lse = attn.forward(q, k, v, mask=mask, backend=backend, return_lse=True, **kw)
        prepared.append((q, k, v, dout, o, lse))
    fn = lambda t: attn.backward(t[0], t[1], t[2], t[4], t[3], t[5], mask=mask, backend=backend, **kw)  # noqa: E731
    return fn, prepared


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="bench_out")
    a = ap.parse_args()
    rows = []
    for d in (64, 128):
        for s in ((1024, 4096) if a.quick else (1024, 4096, 16384)):
            for causal in (False, True):
                b, h = 16384 // s, 2048 // d
                mask = "causal" if causal else "no_mask"
                sets = make_sets(b, s, h, d)
                fns = {}
                for name, kw in mods(h).items():
                    for backend in BACKENDS if name != "plain" else ("flash_sm90",):
                        try:
                            fns[f"{name}/{backend}"] = backward_fn(backend, mask, kw, sets)
                        except RuntimeError as e:  # the backend does not claim it: say so once
                            if d == 64 and s == 1024 and not causal:
                                print(f"{name}/{backend}: {str(e).splitlines()[0][:120]}")
                for fn, fn_sets in fns.values():
                    warm(fn, fn_sets)
                ms = interleaved_medians(fns)
                flops = 2.5 * 4 * b * h * s * s * d / (2 if causal else 1)
                tflops = {k: flops / (t * 1e-3) / 1e12 for k, t in ms.items()}
                rows.append({"d": d, "seqlen": s, "causal": causal, "batch": b, "heads": h, "ms": ms,
                             "tflops": tflops})
                cells = "  ".join(f"{k} {v:5.0f}" for k, v in tflops.items())
                print(f"d {d:3} s {s:5} causal {str(causal):5} | TFLOP/s {cells}", flush=True)
                del sets, fns
                torch.cuda.empty_cache()
    for name in ("softcap", "alibi"):
        for peer in ("plain/flash_sm90",) + tuple(f"{name}/{x}" for x in BACKENDS[1:]):
            r = [row["ms"][peer] / row["ms"][f"{name}/flash_sm90"] for row in rows
                 if peer in row["ms"] and f"{name}/flash_sm90" in row["ms"]]
            if r:
                print(f"{name}/flash_sm90 speed / {peer}: geomean {statistics.geometric_mean(r):.3f}, "
                      f"min {min(r):.3f}, max {max(r):.3f} over {len(r)} points")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "score_mods.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
