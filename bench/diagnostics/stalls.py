"""Where a flash kernel's warps wait, instruction by instruction.

Two roles, both used by the `profile` and `stalls` suites of
scripts/device.sh on the device:

  stalls.py run IMPL PASS D SEQLEN
      one problem (bf16, batch 16384/SEQLEN, heads 2048/D, non-causal, or
      causal with ATTN_STALLS_CAUSAL=1) three
      times, so that ncu can profile the third call's kernel: IMPL is "attn"
      (the backend $ATTN_STALLS_BACKEND, default flash_sm80, through
      attn.torch), "fa2" (PyTorch SDPA's flash backend) or "cudnn" (SDPA's
      cuDNN backend); PASS is "fwd" or "bwd".
  stalls.py report SOURCE_CSV DETAILS_CSV
      reads ncu's source page (--page source --csv --print-source sass) and
      details page of that profile and prints the kernel's time, its stall
      reasons (WarpStateStats), and its hottest SASS instructions by sampled
      warp stalls, each with its stall columns; barriers first.
"""

import csv
import os
import sys


def run(impl, pass_, d, seqlen):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, h = 16384 // seqlen, 2048 // d
    backward = pass_ == "bwd"
    q, k, v = (torch.randn(b, seqlen, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
               for _ in range(3))
    do = torch.randn_like(q)
    causal = os.environ.get("ATTN_STALLS_CAUSAL", "0") == "1"

    def call():
        if impl == "attn":
            import attn.torch as at
            return at.attention(q, k, v, mask="causal" if causal else "no_mask",
                                backend=os.environ.get("ATTN_STALLS_BACKEND", "flash_sm80"))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION if impl == "fa2" else SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)),
                                                  is_causal=causal).transpose(1, 2)

    for _ in range(3):
        if backward:
            call().backward(do)
        else:
            with torch.no_grad():
                call()
    torch.cuda.synchronize()


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def rows_of(path, header_starts):
    """An ncu CSV page from its header line on (the lines before it are
    ==PROF== notes, or the kernel's name on the source page)."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    start = next((i for i, line in enumerate(lines) if line.startswith(header_starts)), 0)
    return list(csv.DictReader(lines[start:]))


def report(source_csv, details_csv):
    try:
        details = rows_of(details_csv, '"ID"')
    except OSError:
        details = []
    for row in details:
        name = row.get("Metric Name", "")
        if name in ("Duration", "Registers Per Thread", "Warp Cycles Per Issued Instruction", "Issue Slots Busy",
                    "SM Busy", "Compute (SM) Throughput", "Memory Throughput", "Executed Ipc Active") \
                or "Stall" in name:
            print(f"  {row.get('Section Name', '')[:18]:18} {name[:48]:48} {row.get('Metric Value', '')} "
                  f"{row.get('Metric Unit', '')}")
    rows = rows_of(source_csv, '"Address"')
    if not rows:
        print("  (no rows in the source page)")
        return
    cols = [c for c in rows[0].keys() if c]
    src = next((c for c in cols if c.lower() in ("source", "sass")), cols[1] if len(cols) > 1 else cols[0])
    total_col = next((c for c in cols if "Sampling (All" in c), None)
    numeric = [c for c in cols if c != src and any(number(r[c] or "") for r in rows)]
    if total_col is None:  # the numeric column with the largest sum
        total_col = max(numeric, key=lambda c: sum(number(r[c] or "") or 0 for r in rows))
    stall_cols = [c for c in numeric if c.startswith("stall_") and "Not Issued" not in c]
    total = sum(number(r[total_col] or "") or 0 for r in rows)
    print(f"  {len(rows)} SASS instructions; {total_col}: {total:.0f} samples")

    def show(r):
        n = number(r[total_col] or "") or 0
        extra = ", ".join(f"{c}={r[c]}" for c in stall_cols if (number(r[c] or "") or 0) > 0.05 * max(n, 1))
        print(f"  {100 * n / max(total, 1):5.1f}%  {r[src].strip()[:56]:56} {extra[:90]}")

    barriers = [r for r in rows if "BAR.SYNC" in r[src] or "BAR.ARV" in r[src]]
    print(f"  barriers ({len(barriers)}), share of all samples:")
    for r in barriers:
        show(r)
    top = int(os.environ.get("STALLS_TOP", "10"))
    print(f"  hottest {top}:")
    for r in sorted(rows, key=lambda r: -(number(r[total_col] or "") or 0))[:top]:
        show(r)


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        report(sys.argv[2], sys.argv[3])
