"""Context parallelism on real GPUs, one process per rank (torchrun
--nproc-per-node N tests/python/cp_worker.py): every case compares the ring's
out, lse, dq, dk, dv with the one-GPU call on identical data (DESIGN.md's bf16
tolerances) and attn.torch.attention(cp=)'s autograd with attn.backward(cp=),
then checks the rule's errors. Prints one line per case (with every failing
rank's checks); exits 1 on any failure. test_cp.py launches it.

ATTN_CP_REPEAT=N (default 1) runs every case N times on the same data: each
repetition after the first delays one rank's stream by up to ~1 ms before each
ring call (a different rank each time), so the ranks reach every exchange at
different times, and compares everything with the first repetition (which is
compared with the one-GPU call). A step that reads a buffer before its
transfer is waited for (issue 44) shows up as a repetition that differs."""
import os
import random
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


def skew(comm, rep, call):
    """Delays one rank's stream (a different one per repetition and ring call)
    by 0.1 to 1 ms of GPU time, so that the ranks reach the ring's exchanges
    out of step. The first repetition runs undelayed."""
    if rep == 0 or not hasattr(torch.cuda, "_sleep"):
        return
    if (rep + call) % comm.size == comm.rank:
        torch.cuda._sleep(random.Random(rep * 31 + call).randrange(200_000, 2_000_000))  # clock cycles


def run_case(comm, fmt, mask, h_q, h_kv, window, seed, fallback=False, repeat=1, softmax="vanilla"):
    """fallback=True: lengths that break the 2*cp rule (length 1 included),
    run with cp_fallback=True (K/V gathered over NCCL, one call per rank).
    softmax: "off-by-one" or "learnable" (a sink per query head, its dsink
    through attn.backward and autograd) adds the max logit to the forward.
    Returns (ok, this rank's line)."""
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
    sinks = softmax != "vanilla"
    sink = (torch.rand(h_q, generator=g) * 3 - 1).to(dev) if softmax == "learnable" else None
    if sinks:
        kw.update(softmax_type=softmax, sink=sink)
    fb = dict(cp_fallback=True) if fallback else {}
    # One GPU, whole sequence.
    out1, lse1, *mx1 = attn.forward(q, k, v, return_lse=True, return_max_logit=sinks, **kw)
    dq1, dk1, dv1, *dsink1 = attn.backward(q, k, v, out1, dout, lse1, **kw)
    sh = lambda x: attn.cp.shard(x, comm, qkv_format=fmt, cu_seqlens=cu, **fb)  # noqa: E731
    ql, kl, vl, dl = sh(q), sh(k), sh(v), sh(dout)
    un = lambda x, lse=False: attn.cp.unshard(x, comm, qkv_format=fmt, cu_seqlens=cu, lse=lse, **fb)  # noqa: E731
    first, fails = None, []
    for rep in range(repeat):
        # The ring, each rank its shard: attn.forward/backward(cp=), then the
        # same through attn.torch.attention's autograd.
        skew(comm, rep, 0)
        outl, lsel, *mxl = attn.forward(ql, kl, vl, return_lse=True, return_max_logit=sinks, cp=comm, **kw, **fb)
        skew(comm, rep, 1)
        dql, dkl, dvl, *dsinkl = attn.backward(ql, kl, vl, outl, dl, lsel, cp=comm, **kw, **fb)
        qg, kg, vg = (x.clone().requires_grad_() for x in (ql, kl, vl))
        sg = None if sink is None else sink.clone().requires_grad_()
        skew(comm, rep, 2)
        og = attn.torch.attention(qg, kg, vg, cp=comm, **dict(kw, sink=sg) if sinks else kw, **fb)
        skew(comm, rep, 3)
        og.backward(dl)
        got = dict(out=outl, lse=lsel, dq=dql, dk=dkl, dv=dvl,
                   **{"autograd out": og.detach(), "autograd dq": qg.grad, "autograd dk": kg.grad,
                      "autograd dv": vg.grad})
        if sinks:
            got["max_logit"] = mxl[0]
        if sink is not None:
            got.update(dsink=dsinkl[0], **{"autograd dsink": sg.grad})
        if rep == 0:
            first = got
            checks = [close("out", un(outl), out1, 2e-2, 2e-2), close("lse", un(lsel, True), lse1, 2e-2, 2e-2),
                      close("dq", un(dql), dq1, 5e-2, 5e-2), close("dk", un(dkl), dk1, 5e-2, 5e-2),
                      close("dv", un(dvl), dv1, 5e-2, 5e-2)]
            if sinks:  # the whole call's max logit and dsink on every rank
                checks.append(close("max_logit", mxl[0], mx1[0], 2e-2, 2e-2))
            if sink is not None:
                checks += [close("dsink", dsinkl[0], dsink1[0], 5e-2, 5e-2),
                           close("autograd dsink", sg.grad, dsinkl[0], 1e-2, 1e-2)]
            # attn.torch.attention(cp=) gives the same results through autograd. Not
            # bitwise: cuDNN's backward accumulates dq with atomics (run to run ~1 ulp).
            for name, ring in (("autograd out", outl), ("autograd dq", dql), ("autograd dk", dkl),
                               ("autograd dv", dvl)):
                checks.append(close(name, got[name], ring, 1e-2, 1e-2))
            line = ", ".join(c[1] for c in checks)
            fails += [c[1] for c in checks if not c[0]]
        else:
            # The same data again, the ranks out of step: the same results as the first time.
            for name, x in got.items():
                ok, text = close(name, x, first[name], 1e-2, 1e-2)
                if not ok:
                    fails.append(f"repetition {rep}: {text} against repetition 0")
    if repeat > 1:
        line += f"; {repeat} repetitions" + ("" if any("repetition" in f for f in fails) else ", all equal")
    if fails:
        line = f"rank {rank}: " + "; ".join(fails[:6]) + (f" (and {len(fails) - 6} more)" if len(fails) > 6 else "")
    label = (f"{fmt} {mask} h={h_q}/{h_kv} window={window}" + (f" softmax={softmax}" if sinks else "") +
             (" cp_fallback (lengths break the rule)" if fallback else ""))
    return not fails, label + ": " + line


def fallback_on_a_side_stream(comm):
    """cp_fallback with stream= a side stream, not PyTorch's current one: the
    fallback's own PyTorch work (K/V gathers, copies, the reduce-scatter) must
    run on that stream too, else attn reads the gathered K/V before they are
    written. The gather is made late on purpose (a GPU sleep on whichever
    stream gathers), so the check does not depend on luck."""
    dev = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator(device="cpu").manual_seed(7)
    s = 2 * comm.size * 64 + 3  # breaks the 2*cp rule: the fallback runs
    q, k, v, dout = (torch.randn(2, s, 8, 64, generator=g).to(dev, torch.bfloat16) for _ in range(4))
    kw = dict(qkv_format="bshd", mask="causal", cp=comm, cp_fallback=True)
    sh = lambda x: attn.cp.shard(x, comm, cp_fallback=True)  # noqa: E731
    ql, kl, vl, dl = sh(q), sh(k), sh(v), sh(dout)
    out0, lse0 = attn.forward(ql, kl, vl, return_lse=True, **kw)
    want = (out0, lse0) + attn.backward(ql, kl, vl, out0, dl, lse0, **kw)
    real = attn.cp._full_kv

    def late_full_kv(*args, **kwargs):
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(2_000_000)  # on the current stream: the gathered K/V come ~1 ms late there
        return real(*args, **kwargs)

    side, cur = torch.cuda.Stream(), torch.cuda.current_stream()
    attn.cp._full_kv = late_full_kv
    try:
        side.wait_stream(cur)  # the caller's duty: inputs ready on the stream it passes
        out1, lse1 = attn.forward(ql, kl, vl, return_lse=True, stream=side.cuda_stream, **kw)
        grads = attn.backward(ql, kl, vl, out1, dl, lse1, stream=side.cuda_stream, **kw)
        cur.wait_stream(side)
    finally:
        attn.cp._full_kv = real
    checks = [close(name, x, w, 1e-2, 1e-2)
              for name, x, w in zip(("out", "lse", "dq", "dk", "dv"), (out1, lse1) + tuple(grads), want)]
    bad = [text for ok, text in checks if not ok]
    return not bad, "cp_fallback on a side stream (stream=): " + ("ok" if not bad else "; ".join(bad))


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
    cases = [c + (False, "vanilla") for c in cases] + [("bshd", "causal", 16, 4, (-1, -1), True, "vanilla"),
                                                       ("thd", "causal", 16, 4, (-1, -1), True, "vanilla"),
                                                       ("sbhd", "no_mask", 16, 16, (-1, -1), True, "vanilla"),
                                                       ("bshd", "causal", 16, 4, (-1, -1), False, "learnable"),
                                                       ("thd", "causal", 16, 4, (100, -1), False, "learnable"),
                                                       ("sbhd", "no_mask", 16, 16, (-1, -1), False, "off-by-one")]
    repeat = max(1, int(os.environ.get("ATTN_CP_REPEAT", "1")))
    if rank == 0:
        print(f"cp_worker: {comm.size} ranks, {repeat} repetition(s) per case", flush=True)
    all_ok = True
    for i, (fmt, mask, hq, hkv, window, fallback, softmax) in enumerate(cases):
        try:
            ok, line = run_case(comm, fmt, mask, hq, hkv, window, 1000 + i, fallback, repeat, softmax)
        except Exception as e:  # report and go on: one failing case must not hide the others
            ok, line = False, f"{fmt} {mask} window={window}: rank {rank}: {type(e).__name__}: {e}"
        # Every rank's verdict: a failure on any rank fails the case, and its line says which.
        every = [None] * comm.size
        dist.all_gather_object(every, (ok, line))
        all_ok &= all(o for o, _ in every)
        if rank == 0:
            bad = [text for o, text in every if not o]
            print(("ok    " + line) if not bad else "FAIL  " + "\n      ".join(bad), flush=True)
    for check in (fallback_on_a_side_stream, rule_errors):
        try:
            ok, line = check(comm)
        except Exception as e:  # noqa: BLE001
            ok, line = False, f"{check.__name__}: {type(e).__name__}: {e}"
        all_ok &= ok
        print(f"rank {rank}: " + ("ok    " if ok else "FAIL  ") + line, flush=True)
    flags = torch.tensor([0 if all_ok else 1], device="cuda")
    dist.all_reduce(flags)
    dist.destroy_process_group()
    sys.exit(1 if flags.item() else 0)


if __name__ == "__main__":
    main()
