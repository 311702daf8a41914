"""Context parallelism on real GPUs, one process per rank (torchrun
--nproc-per-node N tests/python/cp_worker.py): every case compares the ring's
out, lse, dq, dk, dv with the one-GPU call on identical data (DESIGN.md's bf16
tolerances), then checks the rule's errors. Prints one line per case; exits 1
on any failure. test_cp.py launches it."""
import os
import sys

import torch
import torch.distributed as dist

import attn
import attn.cp


def close(name, got, want, atol, rtol):
    err = (got.float() - want.float()).abs()
    bound = atol + rtol * want.float().abs()
    worst = (err - bound).max().item()
    fro = (err.norm() / want.float().norm().clamp_min(1e-30)).item()
    ok = worst <= 0 and fro < 1e-2
    return ok, f"{name} max|d|={err.max().item():.2e} rel_fro={fro:.1e}"


def run_case(comm, fmt, mask, h_q, h_kv, window, seed, fallback=False):
    """fallback=True: lengths that break the 2*cp rule (length 1 included),
    run with cp_fallback=True (K/V gathered over NCCL, one call per rank)."""
    rank, size = comm.rank, comm.size
    dev = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator(device="cpu").manual_seed(seed)
    d = 128
    if fmt == "thd":
        lengths = [1, 333, 2 * size * 64] if fallback else [2 * size * n for n in (40, 8, 64)]
        cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32, device=dev)
        shape_q, shape_kv = (sum(lengths), h_q, d), (sum(lengths), h_kv, d)
    else:
        s = 2 * size * 256 + (3 if fallback else 0)
        cu = None
        shape_q = (2, s, h_q, d) if fmt == "bshd" else (s, 2, h_q, d)
        shape_kv = (2, s, h_kv, d) if fmt == "bshd" else (s, 2, h_kv, d)
    mk = lambda shp: torch.randn(shp, generator=g).to(dev, torch.bfloat16)  # noqa: E731
    q, k, v, dout = mk(shape_q), mk(shape_kv), mk(shape_kv), mk(shape_q)
    kw = dict(qkv_format=fmt, mask=mask, window=window)
    if cu is not None:
        kw.update(cu_seqlens_q=cu, cu_seqlens_kv=cu)
    fb = dict(cp_fallback=True) if fallback else {}
    # One GPU, whole sequence.
    out1, lse1 = attn.forward(q, k, v, return_lse=True, **kw)
    dq1, dk1, dv1 = attn.backward(q, k, v, out1, dout, lse1, **kw)
    # The ring, each rank its shard.
    sh = lambda x: attn.cp.shard(x, comm, qkv_format=fmt, cu_seqlens=cu, **fb)  # noqa: E731
    ql, kl, vl, dl = sh(q), sh(k), sh(v), sh(dout)
    outl, lsel = attn.forward(ql, kl, vl, return_lse=True, cp=comm, **kw, **fb)
    dql, dkl, dvl = attn.backward(ql, kl, vl, outl, dl, lsel, cp=comm, **kw, **fb)
    un = lambda x, lse=False: attn.cp.unshard(x, comm, qkv_format=fmt, cu_seqlens=cu, lse=lse, **fb)  # noqa: E731
    checks = [close("out", un(outl), out1, 2e-2, 2e-2), close("lse", un(lsel, True), lse1, 2e-2, 2e-2),
              close("dq", un(dql), dq1, 5e-2, 5e-2), close("dk", un(dkl), dk1, 5e-2, 5e-2),
              close("dv", un(dvl), dv1, 5e-2, 5e-2)]
    if fmt == "bshd" and mask == "causal" and window == (-1, -1):
        # attn.torch.attention(cp=) gives the same gradients through autograd.
        qg, kg, vg = (x.clone().requires_grad_() for x in (ql, kl, vl))
        attn.torch.attention(qg, kg, vg, cp=comm, qkv_format=fmt, mask=mask, **fb).backward(dl)
        # Not bitwise: cuDNN's backward accumulates dq with atomics (run to run ~1 ulp).
        for name, got, want in (("autograd dq", qg.grad, dql), ("autograd dk", kg.grad, dkl), ("autograd dv", vg.grad, dvl)):
            checks.append(close(name, got, want, 1e-2, 1e-2))
    ok = all(c[0] for c in checks)
    label = f"{fmt} {mask} h={h_q}/{h_kv} window={window}" + (" cp_fallback (lengths break the rule)" if fallback else "")
    return ok, label + ": " + ", ".join(c[1] for c in checks)


def rule_errors(comm):
    dev = torch.device("cuda", torch.cuda.current_device())
    fails = []
    # thd with a length-1 sequence: the rule's error, before any transfer.
    cu = torch.tensor([0, 4 * comm.size, 4 * comm.size + 1], dtype=torch.int32, device=dev)
    x = torch.zeros(4 * comm.size + 1, 2, 64, device=dev, dtype=torch.bfloat16)
    try:
        attn.cp.shard(x, comm, qkv_format="thd", cu_seqlens=cu)
        fails.append("shard accepted a length-1 sequence")
    except ValueError as e:
        if "sequence 1" not in str(e) or "length 1" not in str(e):
            fails.append(f"shard's error: {e}")
    local = torch.zeros(4, 2, 64, device=dev, dtype=torch.bfloat16)  # the rule is checked before shapes
    try:
        attn.forward(local, local, local, qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, cp=comm)
        fails.append("forward accepted a length-1 sequence")
    except ValueError as e:
        if "sequence 1" not in str(e) or "length 1" not in str(e):
            fails.append(f"forward's error: {e}")
    # Ranks that disagree (heads): reported on every rank, no hang.
    h = 2 + comm.rank
    y = torch.zeros(1, 8, h, 64, device=dev, dtype=torch.bfloat16)
    try:
        attn.forward(y, y, y, cp=comm)
        fails.append("a mismatch between ranks passed")
    except ValueError as e:
        if "ranks disagree" not in str(e):
            fails.append(f"mismatch error: {e}")
    return not fails, "rule errors: " + ("ok" if not fails else "; ".join(fails))


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    comm = attn.cp.Communicator.from_group()
    cases = [("bshd", "causal", 16, 16, (-1, -1)), ("bshd", "no_mask", 16, 16, (-1, -1)),
             ("sbhd", "causal", 16, 4, (-1, -1)), ("sbhd", "no_mask", 16, 4, (-1, -1)),
             ("thd", "causal", 16, 4, (-1, -1)), ("thd", "no_mask", 16, 16, (-1, -1)),
             ("bshd", "causal", 16, 4, (300, -1)), ("bshd", "no_mask", 16, 16, (128, 64)),
             ("thd", "causal", 16, 4, (100, -1)), ("thd", "no_mask", 16, 16, (48, 20))]
    cases = [c + (False,) for c in cases] + [("bshd", "causal", 16, 4, (-1, -1), True),
                                             ("thd", "causal", 16, 4, (-1, -1), True),
                                             ("sbhd", "no_mask", 16, 16, (-1, -1), True)]
    all_ok = True
    for i, (fmt, mask, hq, hkv, window, fallback) in enumerate(cases):
        try:
            ok, line = run_case(comm, fmt, mask, hq, hkv, window, 1000 + i, fallback)
        except Exception as e:  # report and go on: one failing case must not hide the others
            ok, line = False, f"{fmt} {mask} window={window}: {type(e).__name__}: {e}"
        all_ok &= ok
        if rank == 0:
            print(("ok    " if ok else "FAIL  ") + line, flush=True)
    ok, line = rule_errors(comm)
    all_ok &= ok
    print(f"rank {rank}: " + ("ok    " if ok else "FAIL  ") + line, flush=True)
    flags = torch.tensor([0 if all_ok else 1], device="cuda")
    dist.all_reduce(flags)
    dist.destroy_process_group()
    sys.exit(1 if flags.item() else 0)


if __name__ == "__main__":
    main()
