"""Host overhead of one attention call: a tiny problem whose GPU time is a few
microseconds, called many times; the wall time per call is then the cost of
issuing it (Python, DLPack, validation, selection, plan lookup, launch). attn
against PyTorch's SDPA on the same tensors, forward alone and forward+backward
through autograd. Usage: python3 bench/overhead.py [--json out.json]"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attn
import attn.torch as at


def per_call_us(fn, n=1000, repeats=5):
    """Median over `repeats` of the mean wall time of n back-to-back calls."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(samples)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    b, s, h, h_kv, d = 1, 128, 4, 2, 64
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(b, s, h_kv, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    do = torch.randn_like(q)
    chosen = attn.explain(q, k, v, mask="causal").chosen
    chosen_bwd = attn.explain(q, k, v, mask="causal", backward=True).chosen

    def sdpa(backend, backward):
        def call():
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            with sdpa_kernel(backend):
                o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)
            if backward:
                o.transpose(1, 2).backward(do)
        return call

    def attn_call(backward):
        def call():
            o = at.attention(q, k, v, mask="causal")
            if backward:
                o.backward(do)
        return call

    qd, kd, vd = q.detach(), k.detach(), v.detach()
    rows = [
        (f"attn.forward ({chosen})", per_call_us(lambda: attn.forward(qd, kd, vd, mask="causal"))),
        (f"attn.torch.attention fwd ({chosen})", per_call_us(attn_call(False))),
        ("sdpa cudnn fwd", per_call_us(sdpa(SDPBackend.CUDNN_ATTENTION, False))),
        ("sdpa flash fwd", per_call_us(sdpa(SDPBackend.FLASH_ATTENTION, False))),
        (f"attn.torch.attention fwd+bwd ({chosen}/{chosen_bwd})", per_call_us(attn_call(True))),
        ("sdpa cudnn fwd+bwd", per_call_us(sdpa(SDPBackend.CUDNN_ATTENTION, True))),
        ("sdpa flash fwd+bwd", per_call_us(sdpa(SDPBackend.FLASH_ATTENTION, True))),
        ("attn.explain (every verdict)", per_call_us(lambda: attn.explain(qd, kd, vd, mask="causal"), n=200)),
    ]
    # The layers of one call: the C++ entry points with preallocated outputs
    # (capsules made per call, as they are single-use), then the Python wrappers.
    from torch.utils.dlpack import to_dlpack
    opts = attn._options("bshd", "causal", (-1, -1), None, 0.0, None, None, 0.0, 0, 0, False, True)
    out, lse = attn.forward(qd, kd, vd, mask="causal", return_lse=True)
    dq, dk, dv = torch.empty_like(qd), torch.empty_like(kd), torch.empty_like(vd)
    stream = torch.cuda.current_stream().cuda_stream
    C = attn._C
    none = dict(cu_seqlens_q=None, cu_seqlens_kv=None, bias=None, alibi_slopes=None, attn_mask=None)

    def c_forward():
        C.forward(opts, to_dlpack(qd), to_dlpack(kd), to_dlpack(vd), to_dlpack(out), to_dlpack(lse), **none,
                  backend=None, disable=[], stream=stream)

    def c_backward():
        C.backward(opts, to_dlpack(qd), to_dlpack(kd), to_dlpack(vd), to_dlpack(out), to_dlpack(do),
                   to_dlpack(lse), to_dlpack(dq), to_dlpack(dk), to_dlpack(dv), None, **none, backend=None,
                   disable=[], stream=stream)

    rows += [
        ("  torch.empty (one output)", per_call_us(lambda: torch.empty_like(qd))),
        ("  to_dlpack (one tensor)", per_call_us(lambda: to_dlpack(qd))),
        ("  _C.forward, outputs given", per_call_us(c_forward)),
        ("  _C.backward, outputs given", per_call_us(c_backward)),
        ("  attn.backward", per_call_us(lambda: attn.backward(qd, kd, vd, out, do, lse, mask="causal"))),
    ]
    # attn.torch's passes as autograd runs them (the backward on its engine's
    # device thread) against the same passes called directly.
    call = at._Call("bshd", "causal", (-1, -1), None, 0.0, 0, 0, 0.0, 0, 0, False, None, None, None, None, None)
    inside = {}
    originals = {name: getattr(at._Call, name) for name in ("forward", "backward")}
    for name in ("forward", "backward"):
        original = getattr(at._Call, name)

        def timed(self, *a, _original=original, _name=name):
            t0 = time.perf_counter()
            r = _original(self, *a)
            inside.setdefault(_name, []).append(time.perf_counter() - t0)
            return r
        setattr(at._Call, name, timed)
    try:
        per_call_us(attn_call(True), n=500, repeats=1)
    finally:
        for name, original in originals.items():
            setattr(at._Call, name, original)
    rows += [
        ("  _Call.forward inside autograd", statistics.median(inside["forward"]) * 1e6),
        ("  _Call.forward called directly", per_call_us(lambda: call.forward(q, k, v, None))),
        ("  _Call.backward inside autograd", statistics.median(inside["backward"]) * 1e6),
        ("  _Call.backward called directly", per_call_us(lambda: call.backward(do, q, k, v, out, lse, None, False))),
    ]
    print(f"host time per call, tiny problem (b {b}, s {s}, h {h}/{h_kv}, d {d}, causal, bf16), us:")
    for name, us in rows:
        print(f"  {name:48s} {us:8.1f}")
    # Where the host time of attn's fwd+bwd goes (C++ calls show as built-in methods).
    import cProfile
    import io
    import pstats
    prof = cProfile.Profile()
    call = attn_call(True)
    prof.enable()
    for _ in range(500):
        call()
    torch.cuda.synchronize()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(14)
    print("cProfile of 500 attn.torch.attention fwd+bwd calls (tottime = own time, s):")
    print("\n".join(text.getvalue().splitlines()[6:]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "shape": dict(b=b, s=s, h=h, h_kv=h_kv, d=d),
                       "us_per_call": dict(rows)}, f, indent=1)


if __name__ == "__main__":
    main()
