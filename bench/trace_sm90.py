"""Where a flash_sm90 forward's time goes between and within work items, per CTA.

A diagnostic, not a test: it needs the kernel's trace edit, which is kept as
a patch beside this file (it adds clock64 stamps at the item boundaries of
the producer and each consumer warpgroup's leader, and a host-side dump of
them to $ATTN_SM90_TRACE_FILE after a d 64 launch). On the device:

    git apply bench/sm90_trace.patch      # (the device copy has no .git: patch -p1 < ...)
    source scripts/device_env.sh && build_and_stage_python
    PYTHONPATH=/tmp/py python3 bench/trace_sm90.py

Per problem it prints each CTA's span, the idle tail, and the mean cycles of
each boundary step of consumer 0 (data wait, turn, first Q.K^T, the tile
loop, last P.V, epilogue, taking the next item) and the tile loop by item
length. Findings: docs/PERF.md, "v16".
"""
import os
import sys
from collections import defaultdict

import numpy as np
import torch

import attn

R = 2048


def read_trace():
    raw = open("/tmp/sm90trace.bin", "rb").read()
    counts = np.frombuffer(raw[:132 * 4 * 4], dtype=np.int32)
    recs = np.frombuffer(raw[132 * 4 * 4:], dtype=np.uint64)
    return recs.reshape(132, 4, R, 2), counts.reshape(132, 4)


def events(recs, counts, cta, role):
    """One role's records in a CTA: (globaltimer ns at start, at end), (clock at
    start, at end), and the events between as (clock, event, item, its tiles)."""
    r = recs[cta, role, :counts[cta, role]]
    evs = [(int(v), int(d) & 15, int(d) >> 12, (int(d) >> 4) & 255) for v, d in r[2:-2]]
    return (int(r[0, 0]), int(r[-2, 0])), (int(r[1, 0]), int(r[-1, 0])), evs


def analyse(recs, counts, label):
    comp = defaultdict(list)
    loop_by_nt = defaultdict(list)
    spans, span_ns, ends, starts, items_per_cta, tiles_per_cta = [], [], [], [], [], []
    prod_lead = []
    for cta in range(132):
        (g0, g1), (c0, c1), evs = events(recs, counts, cta, 1)  # consumer 0
        spans.append(c1 - c0)
        span_ns.append(g1 - g0)
        starts.append(g0)
        ends.append(g1)
        cur, items, tiles, prev6 = {}, 0, 0, None
        for v, ev, t, nt in evs:
            if ev == 1:
                if prev6 is not None:
                    comp["take(6->1)"].append(v - prev6)
                cur = {1: v, "nt": nt}
                items += 1
                tiles += nt
                continue
            cur[ev] = v
            if ev == 6:
                prev6 = v
                if all(k in cur for k in (1, 2, 7, 3, 4, 5)):
                    comp["data wait(1->2)"].append(cur[2] - cur[1])
                    comp["turn(2->7)"].append(cur[7] - cur[2])
                    comp["first QK(7->3)"].append(cur[3] - cur[7])
                    comp["loop(3->4)"].append(cur[4] - cur[3])
                    comp["last PV(4->5)"].append(cur[5] - cur[4])
                    comp["epilogue(5->6)"].append(cur[6] - cur[5])
                    loop_by_nt[cur["nt"]].append(cur[4] - cur[3])
        items_per_cta.append(items)
        tiles_per_cta.append(tiles)
        # how long before consumer 0 takes an item the producer has it
        taken = {t: v for v, ev, t, _ in evs if ev == 1}
        for v, ev, t, _ in events(recs, counts, cta, 0)[2]:
            if ev == 1 and t in taken:
                prod_lead.append(taken[t] - v)
    spans = np.array(spans)
    ghz = spans.sum() / np.sum(span_ns)  # clock cycles per ns, measured
    print(f"== {label}: CTAs 132, span cycles mean {spans.mean():.0f} min {spans.min()} max {spans.max()}"
          f" ({spans.mean() / ghz / 1e3:.1f} us at the measured {ghz:.2f} GHz)")
    ends = np.array(ends) - min(starts)
    starts = np.array(starts) - min(starts)
    print(f"   start spread {starts.max()} ns; end (ns) min {ends.min()} median {np.median(ends):.0f} max {ends.max()}"
          f"  -> idle tail mean {(ends.max() - ends).mean():.0f} ns")
    print(f"   items/CTA {np.mean(items_per_cta):.1f} [{min(items_per_cta)}, {max(items_per_cta)}],"
          f" tiles/CTA {np.mean(tiles_per_cta):.1f} [{min(tiles_per_cta)}, {max(tiles_per_cta)}]")
    tot = spans.sum()
    for k, v in comp.items():
        v = np.array(v)
        print(f"   {k:18s} mean {v.mean():8.0f} median {np.median(v):8.0f} p90 {np.percentile(v, 90):8.0f}"
              f"  share {v.sum() / tot:6.1%}")
    for nt in sorted(loop_by_nt):
        v = np.array(loop_by_nt[nt])
        print(f"   loop nt={nt}: n {len(v)} mean {v.mean():.0f} median {np.median(v):.0f}")
    if prod_lead:
        v = np.array(prod_lead)
        print(f"   consumer0 take - producer obtain (cycles): median {np.median(v):.0f} p10 {np.percentile(v, 10):.0f}"
              f" min {v.min()}")


def main():
    for d, s, causal in ((64, 1024, True), (64, 1024, False), (64, 4096, True)):
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        mask = "causal" if causal else "no_mask"
        for _ in range(5):
            attn.forward(q, k, v, mask=mask, backend="flash_sm90")
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(20):
            attn.forward(q, k, v, mask=mask, backend="flash_sm90")
        e1.record()
        torch.cuda.synchronize()
        print(f"d {d} s {s} causal {causal}: {e0.elapsed_time(e1) / 20 * 1e3:.1f} us per call")
        os.environ["ATTN_SM90_TRACE_FILE"] = "/tmp/sm90trace.bin"
        attn.forward(q, k, v, mask=mask, backend="flash_sm90")
        del os.environ["ATTN_SM90_TRACE_FILE"]
        recs, counts = read_trace()
        analyse(recs, counts, f"d {d} s {s} causal {causal}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
