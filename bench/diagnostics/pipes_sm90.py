"""flash_sm90's forward beside SDPA's cuDNN kernel under ncu: pipe use and
executed instructions per opcode. A diagnostic run by hand on the device:

    pipes_sm90.py run IMPL D SEQLEN T|F   the problem (bf16, batch 16384/SEQLEN, heads
                                          2048/D) three times; IMPL attn or cudnn
    pipes_sm90.py report RAW_CSV          pipe utilisation, issue activity and
                                          instruction totals per kernel (ncu --page raw --csv)
    pipes_sm90.py ops SOURCE_CSV          executed warp instructions per opcode
                                          (ncu --page source --csv --print-source sass)

e.g. ncu --clock-control none -k regex:flash_fwd_sm90 --launch-skip 2 --launch-count 1
--section SourceCounters -o /tmp/s python3 bench/diagnostics/pipes_sm90.py run attn 64 1024 T
(-k regex:cudnn with IMPL cudnn). Findings: docs/PERF.md, "v16".
"""
import csv
import sys


def run(impl, d, s, causal):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import attn
    b, h = 16384 // s, 2048 // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for _ in range(3):
        if impl == "attn":
            attn.forward(q, k, v, mask="causal" if causal else "no_mask", backend="flash_sm90")
        else:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=causal)
    torch.cuda.synchronize()


def report(path):
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    rows = list(csv.reader(lines))
    head = rows[0]
    seen = set()
    for r in rows[2:]:
        vals = dict(zip(head, r))
        name = vals.get("Kernel Name", "?")[:60]
        if name in seen:
            continue
        seen.add(name)
        print(f"-- {name}  duration {vals.get('gpu__time_duration.sum')}")
        for k in head:
            if any(x in k for x in ("pipe_tensor", "pipe_xu", "inst_executed_pipe_xu", "pipe_fma_cycles", "pipe_alu_cycles",
                                    "issue_active.avg.pct", "inst_executed.sum", "pipe_fmaheavy", "pipe_fp64",
                                    "sm__cycles_active.avg", "inst_executed_pipe_fma", "inst_executed_pipe_alu",
                                    "pipe_uniform", "inst_executed_pipe_lsu", "warps_active.avg.pct")):
                if (".avg." in k or k.endswith((".sum", ".avg"))) and ".max." not in k and ".min." not in k and vals[k] not in ("", "n/a"):
                    print(f"   {k:75s} {vals[k]}")


def ops(path):
    """Executed warp instructions per opcode, from ncu's source page (SASS)."""
    import collections
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    start = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), 0)
    rows = list(csv.DictReader(lines[start:]))
    cols = list(rows[0].keys())
    src = next(c for c in cols if c.lower() in ("source", "sass"))
    ex = next((c for c in cols if c.startswith("Instructions Executed")), None) or \
        next(c for c in cols if "inst_executed" in c.lower())
    hist = collections.Counter()
    for r in rows:
        t = r[src].strip().split()
        if not t:
            continue
        op = t[1] if t[0].startswith("@") and len(t) > 1 else t[0]
        try:
            hist[op.rstrip(";")] += float(r[ex].replace(",", "") or 0)
        except ValueError:
            pass
    total = sum(hist.values())
    print(f"   total {total:.0f} ({ex})")
    for op, n in hist.most_common(40):
        print(f"   {op:34s} {n:12.0f} {n / total:6.1%}")


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "T")
    elif sys.argv[1] == "report":
        report(sys.argv[2])
    elif sys.argv[1] == "ops":
        ops(sys.argv[2])
