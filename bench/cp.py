"""Context-parallel throughput (torchrun --nproc-per-node 2 bench/cp.py):
forward+backward of one long causal sequence on N GPUs through attn's ring
against the same call on one GPU, the same backend (ATTN_BACKEND, default
cudnn). CUDA events, warm-up, median of repeats. The share of communication
hidden behind compute, two ways: from one profiled ring call, the share of the
NCCL kernels' time during which a compute kernel also ran (kernel timestamps;
an NCCL kernel also spins while it waits for its peer, so this share is a
lower bound); and 1 - (T_ring - T_compute - T_own) / T_comm, where T_own is
the ring's own elementwise kernels (merges, adds, copies: GPU time from the
same profile, not communication), T_compute runs
this rank's ring blocks alone (the same attn calls on local data, no
transfers) and T_comm runs the ring's transfers alone (the same bytes, NCCL
send/recv around the ring); both are maxima over ranks."""
import argparse
import os
import statistics

import torch
import torch.distributed as dist

import attn
import attn.cp


def timed(fn, repeats, warmup=1):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        torch.cuda.synchronize()
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    t = torch.tensor([statistics.median(times)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def kernel_overlap(fn):
    """Runs fn once under torch.profiler and measures, from the GPU kernels'
    own start/end times, how much of the NCCL kernels' time overlaps compute
    kernels (the share of communication hidden), plus kernel time by kind."""
    from torch.profiler import ProfilerActivity, profile
    fn()  # warm
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        # The barrier sits inside the profiled region: the profiler's start-up
        # takes a different time on each rank, and a barrier before it would
        # let one rank's first NCCL kernel wait for the other's profiler,
        # counted as communication that nothing hid. Only kernels after the
        # marker (a short sleep kernel after the barrier) count.
        dist.barrier()
        torch.cuda.synchronize()
        torch.cuda._sleep(1000)
        fn()
        torch.cuda.synchronize()
    events = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
              if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start]
    marker_end = max(t1 for name, t0, t1 in events if "sleep" in name.lower() or "spin" in name.lower())
    kernels = [(name, t0, t1) for name, t0, t1 in events if t0 >= marker_end]

    def kind(name):
        n = name.lower()
        if "nccl" in n:
            return "nccl"
        if "cudnn" in n or "sdpa" in n:
            return "attention (cuDNN)"
        if "memcpy" in n or "memset" in n:
            return "memcpy/memset"
        return "other (ring merges, adds, copies)"
    by_kind = {}
    for name, t0, t1 in kernels:
        by_kind[kind(name)] = by_kind.get(kind(name), 0.0) + (t1 - t0) / 1e3
    compute = sorted((t0, t1) for name, t0, t1 in kernels if kind(name) != "nccl")
    merged = []
    for t0, t1 in compute:  # the union of compute intervals
        if merged and t0 <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], t1)
        else:
            merged.append([t0, t1])
    nccl = [(t0, t1) for name, t0, t1 in kernels if kind(name) == "nccl"]
    hidden = sum(max(0, min(t1, c1) - max(t0, c0)) for t0, t1 in nccl for c0, c1 in merged)
    return {"nccl_ms": sum(t1 - t0 for t0, t1 in nccl) / 1e3, "hidden_ms": hidden / 1e3, "by_kind": by_kind}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seq", type=int, default=131072)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    dist.init_process_group("nccl")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    backend = os.environ.get("ATTN_BACKEND", "cudnn")
    comm = attn.cp.Communicator.from_group()
    g = torch.Generator(device="cuda").manual_seed(0)
    shape = (1, a.seq, a.heads, a.dim)
    q, k, v, dout = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    kw = dict(mask="causal", backend=backend)

    def one_gpu():
        out, lse = attn.forward(q, k, v, return_lse=True, **kw)
        attn.backward(q, k, v, out, dout, lse, **kw)

    # Every rank runs the whole problem on its own GPU (timed() holds
    # collectives, so all ranks must call it); the slowest one counts.
    t1 = timed(one_gpu, a.repeats)
    del q, k, v, dout
    torch.cuda.empty_cache()

    shape_l = (1, a.seq // size, a.heads, a.dim)
    ql, kl, vl, dl = (torch.randn(shape_l, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))

    def ring():
        out, lse = attn.forward(ql, kl, vl, return_lse=True, cp=comm, **kw)
        attn.backward(ql, kl, vl, out, dl, lse, cp=comm, **kw)

    t_ring = timed(ring, a.repeats)

    # This rank's blocks alone (the plan of attn/cp.h: own step causal; an
    # earlier source: all queries x first key chunk; a later one: second query
    # chunk x all keys).
    c = ql.shape[1] // 2
    out_l, lse_l = attn.forward(ql, kl, vl, return_lse=True, cp=comm, **kw)

    def compute_alone():
        for t in range(size):
            src = (rank - t) % size
            if src == rank:
                qs, ks, m = ql, kl, "causal"
            elif src < rank:
                qs, ks, m = ql, kl[:, :c], "no_mask"
            else:
                qs, ks, m = ql[:, c:], kl, "no_mask"
            o, l = attn.forward(qs, ks, ks, return_lse=True, mask=m, backend=backend)
            n = qs.shape[1]
            attn.backward(qs, ks, ks, out_l[:, -n:], dl[:, -n:], lse_l[:, :, -n:].contiguous(), mask=m,
                          backend=backend)

    t_compute = timed(compute_alone, a.repeats)

    # The ring's transfers alone: K+V (bf16) size-1 times per pass, dK+dV (fp32) size times.
    kv = torch.empty(2 * ql.numel(), device="cuda", dtype=torch.bfloat16)
    kv_in = torch.empty_like(kv)
    dkv = torch.empty(2 * ql.numel(), device="cuda", dtype=torch.float32)
    dkv_in = torch.empty_like(dkv)
    nxt, prv = (rank + 1) % size, (rank - 1) % size

    def exchange(x, y):
        ops = [dist.P2POp(dist.isend, x, nxt), dist.P2POp(dist.irecv, y, prv)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()

    def comm_alone():
        for _ in range(2 * (size - 1)):
            exchange(kv, kv_in)
        for _ in range(size):
            exchange(dkv, dkv_in)

    t_comm = timed(comm_alone, a.repeats)
    try:
        overlap = kernel_overlap(ring)
    except Exception as e:  # noqa: BLE001 - the profiler's event API moves between PyTorch versions
        overlap = {"error": f"{type(e).__name__}: {e}"}
    if rank == 0:
        flops = 3.5 * 4 * a.dim * a.heads * a.seq * (a.seq + 1) / 2  # causal visible pairs, fwd + 2.5x bwd
        own = 0.0 if "error" in overlap else overlap["by_kind"].get("other (ring merges, adds, copies)", 0.0) / 1e3
        exposed = t_ring - t_compute - own
        hidden = max(0.0, min(1.0, 1 - exposed / t_comm)) if t_comm > 0 else 1.0
        print(f"cp bench: seq={a.seq} b=1 h={a.heads} d={a.dim} causal bf16 fwd+bwd backend={backend} gpus={size}")
        print(f"  1 GPU:        {t1 * 1e3:9.1f} ms  {flops / t1 / 1e12:6.1f} TFLOP/s")
        print(f"  {size} GPUs ring:  {t_ring * 1e3:9.1f} ms  {flops / t_ring / 1e12:6.1f} TFLOP/s  speed-up {t1 / t_ring:.2f}x")
        print(f"  compute alone {t_compute * 1e3:.1f} ms, ring's own kernels {own * 1e3:.1f} ms, transfers alone "
              f"{t_comm * 1e3:.1f} ms: exposed {exposed * 1e3:.1f} ms, communication hidden {100 * hidden:.0f}%")
        o = overlap
        if "error" in o:
            print(f"  profile of one ring call failed: {o['error']}")
        else:
            print(f"  one ring call under torch.profiler (rank 0): NCCL kernels {o['nccl_ms']:.1f} ms, of which "
                  f"{o['hidden_ms']:.1f} ms ({100 * o['hidden_ms'] / max(o['nccl_ms'], 1e-9):.0f}%) ran while a "
                  f"compute kernel ran; GPU kernel time by kind (ms): "
                  + ", ".join(f"{k} {v:.1f}" for k, v in sorted(o["by_kind"].items(), key=lambda kv: -kv[1])))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
