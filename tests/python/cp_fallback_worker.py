"""One rank of test_cp_fallback.py: CPU processes over gloo, float64, the
reference backend. Every case makes the same full batch on every rank (a
seeded generator), shards it with cp_fallback=True, runs the fallback forward
and backward, puts out/lse/dq/dk/dv back together with unshard, and rank 0
saves them with the inputs; the test compares them with the one-process call.
Errors and ATTN_LOG lines are recorded per case on every rank."""
import contextlib
import datetime
import io
import os
import traceback

import torch
import torch.distributed as dist

import attn
import attn.cp

# (name, qkv_format, mask, lengths, window, h_q, h_kv[, s]): each breaks the
# 2*cp rule, or (with s) is a padded bshd/sbhd batch of true lengths `lengths`
# padded to s, which always runs through the fallback (s = 8 keeps the rule).
CASES = {
    2: [
        ("bshd-causal-7-gqa", "bshd", "causal", [7, 7], (-1, -1), 4, 2),
        ("bshd-nomask-1", "bshd", "no_mask", [1, 1], (-1, -1), 2, 2),
        ("sbhd-causal-1", "sbhd", "causal", [1, 1, 1], (-1, -1), 2, 1),
        ("sbhd-nomask-7", "sbhd", "no_mask", [7, 7], (-1, -1), 2, 2),
        ("bshd-causal-9-window", "bshd", "causal", [9], (3, 0), 2, 2),
        ("bshd-nomask-9-window", "bshd", "no_mask", [9], (2, 1), 2, 2),
        ("sbhd-nomask-9-leftwindow", "sbhd", "no_mask", [9, 9], (2, -1), 2, 2),
        ("thd-causal-8-1-7", "thd", "causal", [8, 1, 7], (-1, -1), 4, 2),
        ("thd-nomask-1", "thd", "no_mask", [1], (-1, -1), 2, 2),
        ("bshd-padded-causal-8", "bshd", "padding_causal", [8, 1, 5], (-1, -1), 4, 2, 8),
        ("sbhd-padded-7", "sbhd", "padding", [7, 3], (-1, -1), 2, 2, 7),
        ("bshd-padded-causal-window-10", "bshd", "padding_causal", [10, 6, 2], (3, 0), 2, 2, 10),
    ],
    3: [
        ("bshd-causal-7", "bshd", "causal", [7, 7], (-1, -1), 2, 2),
        ("sbhd-nomask-2", "sbhd", "no_mask", [2], (-1, -1), 2, 1),
        ("bshd-causal-10-window", "bshd", "causal", [10], (2, 0), 2, 2),
        ("thd-causal-5-1-12", "thd", "causal", [5, 1, 12], (-1, -1), 2, 2),
        ("sbhd-padded-causal-9", "sbhd", "padding_causal_bottom_right", [9, 2, 4], (-1, -1), 2, 2, 9),
    ],
}


def make(fmt, lengths, h_q, h_kv, seed, pad_to=None, d=8):
    g = torch.Generator().manual_seed(seed)
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
    if fmt == "thd":
        t = sum(lengths)
        shapes = [(t, h_q, d), (t, h_kv, d), (t, h_kv, d), (t, h_q, d)]
    else:
        b, s = len(lengths), pad_to or lengths[0]
        cu = cu if pad_to else None
        shapes = [(b, s, h, d) if fmt == "bshd" else (s, b, h, d) for h in (h_q, h_kv, h_kv, h_q)]
    return [torch.randn(sh, generator=g, dtype=torch.float64) for sh in shapes] + [cu]


def run_case(comm, case, seed):
    name, fmt, mask, lengths, window, h_q, h_kv = case[:7]
    q, k, v, dout, cu = make(fmt, lengths, h_q, h_kv, seed, *case[7:])
    sh = dict(qkv_format=fmt, cu_seqlens=cu, cp_fallback=True)
    ql, kl, vl, dl = (attn.cp.shard(x, comm, **sh) for x in (q, k, v, dout))
    kw = dict(qkv_format=fmt, mask=mask, window=window, cu_seqlens_q=cu, backend="reference", cp=comm,
              cp_fallback=True)
    log = io.StringIO()
    os.environ["ATTN_LOG"] = "1"  # read per call; the fallback's line goes to sys.stderr
    try:
        with contextlib.redirect_stderr(log):
            out, lse = attn.forward(ql, kl, vl, return_lse=True, **kw)
            dq, dk, dv = attn.backward(ql, kl, vl, out, dl, lse, **kw)
    finally:
        del os.environ["ATTN_LOG"]
    got = {"out": attn.cp.unshard(out, comm, **sh), "lse": attn.cp.unshard(lse, comm, lse=True, **sh),
           "dq": attn.cp.unshard(dq, comm, **sh), "dk": attn.cp.unshard(dk, comm, **sh),
           "dv": attn.cp.unshard(dv, comm, **sh)}
    # The autograd path: attn.torch.attention(cp=, cp_fallback=True).
    qa, ka, va = (x.clone().requires_grad_() for x in (ql, kl, vl))
    oa = attn.torch.attention(qa, ka, va, qkv_format=fmt, mask=mask, window=window, cu_seqlens_q=cu,
                              backend="reference", cp=comm, cp_fallback=True)
    oa.backward(dl)
    got.update({"autograd_out": attn.cp.unshard(oa.detach(), comm, **sh),
                "autograd_dq": attn.cp.unshard(qa.grad, comm, **sh),
                "autograd_dk": attn.cp.unshard(ka.grad, comm, **sh),
                "autograd_dv": attn.cp.unshard(va.grad, comm, **sh)})
    inputs = {"q": q, "k": k, "v": v, "dout": dout, "cu": cu}
    return {"inputs": inputs, "got": got, "log": log.getvalue(), "local_rows": ql.shape[0 if fmt != "bshd" else 1]}


def error_of(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the message is what the test checks
        return f"{type(e).__name__}: {e}"
    return None


def run_errors(comm):
    """Calls that must fail on every rank alike, before any K/V moves."""
    rank, size = comm.rank, comm.size
    x = torch.randn(1, 4 * size, 2, 8, dtype=torch.float64)
    kw = dict(backend="reference", cp=comm, cp_fallback=True)
    errors = {}
    # Ranks disagree on the problem (heads).
    qm = torch.randn(1, 4 if rank == 0 else 3, 2 + rank, 8, dtype=torch.float64)
    errors["mismatch"] = error_of(lambda: attn.forward(qm, qm, qm, **kw))
    # A padded bshd batch without cp_fallback: the ring cannot run it.
    cu = torch.tensor([0, 3 * size], dtype=torch.int32)
    errors["padded"] = error_of(lambda: attn.forward(x, x, x, mask="padding", cu_seqlens_q=cu, backend="reference",
                                                     cp=comm))
    # Pieces not in the fallback layout (length 7 cut 4 + 3 instead of 3 + 4).
    if size == 2:
        ql = torch.randn(1, 4 if rank == 0 else 3, 2, 8, dtype=torch.float64)
        errors["layout"] = error_of(lambda: attn.forward(ql, ql, ql, **kw))
    # Every sequence keeps the rule: shard chose chunks, the ring runs, and a
    # group-only communicator (no NCCL here) says so.
    xl = attn.cp.shard(x, comm, cp_fallback=True)
    errors["ring"] = error_of(lambda: attn.forward(xl, xl, xl, **kw))
    return errors


def main(rank, size, port, out_dir, seed):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=60))
    try:
        comm = attn.cp.Communicator.from_group()
        result = {"cases": {}, "errors": {}}
        for i, case in enumerate(CASES[size]):
            try:
                result["cases"][case[0]] = run_case(comm, case, seed + i)
            except Exception:  # noqa: BLE001 - reported by the test with the case's name
                result["cases"][case[0]] = {"exception": traceback.format_exc()}
                raise
        result["errors"] = run_errors(comm)
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()
