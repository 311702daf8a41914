"""Times attn where people build with it, on one CUDA GPU, bf16, forward+backward:

1. a Llama-3-8B-shaped layer (hidden 4096, 32 heads, 8 KV heads, ffn 14336,
   SwiGLU, RMSNorm, rotary, b 2, seq 4096, causal): attn.torch.TransformerLayer
   against the same layer in plain PyTorch with SDPA forced to cuDNN
   (torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION)), same weights
   and inputs; plus the attention call alone and the rotary embedding of q
   and k alone (attn's fused kernel against PyTorch's ops), to show where the
   time goes;
2. a small Llama-style transformers model's training step (forward, loss,
   backward) with attn_implementation "attn" against "sdpa", without and with
   a right-padded attention mask;
3. with --gptoss, a gpt-oss-shaped model's training step (softmax sinks,
   sliding windows) against transformers' "eager" and "flex_attention".

CUDA events, warm-up, median of --iters runs, attn and its peer timed in
alternation (drift falls on both). Prints the attn backend chosen
(attn.explain), a table, and writes everything as JSON to --out.

    python bench/layer.py --out docs/perf/layer-<date>-h100.json
"""

import argparse
import json
import platform
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attn
import attn.torch as at
from attn.layer import apply_rotary_pos_emb


def timed_interleaved(fns, warmup, iters, samples=None):
    """{name: median ms} for several callables timed in alternation: sample i
    runs every callable once, in an order that reverses each round, so clock
    and thermal drift over the run fall on all of them alike. fns: {name:
    (setup, fn)}; setup() runs untimed before each sample (None: nothing).
    samples: a dict that receives every sample, {name: [ms per round]}."""
    for setup, fn in fns.values():
        if setup:
            setup()
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    names = list(fns)
    for i in range(iters):
        for name in (names if i % 2 == 0 else names[::-1]):
            setup, fn = fns[name]
            if setup:
                setup()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end))
    if samples is not None:
        samples.update(times)
    return {name: statistics.median(t) for name, t in times.items()}


def top_kernels(fn, steps=3, top=8):
    """The CUDA kernels of `steps` calls of fn, by total GPU time: [(name, ms, calls)]."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total / 1e3 / steps, e.count // steps) for e in prof.key_averages()
            if e.device_time_total > 0]
    rows.sort(key=lambda r: -r[1])
    total = sum(r[1] for r in rows)
    return total, rows if top is None else rows[:top]


def idle_gaps(fn, top=6):
    """One call of fn on the GPU's timeline: (span ms from its first kernel to
    its last, idle ms inside that span, [(gap us, at ms, next kernel)] for the
    largest gaps). Idle time there is the GPU waiting for the host or for
    launches; the same kernels with more idle mean host time on the path."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    ev = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                if e.device_type == DeviceType.CUDA)
    if not ev:
        return 0.0, 0.0, []
    t0, end, idle, gaps = ev[0][0], ev[0][1], 0.0, []
    for start, stop, name in ev[1:]:
        if start > end:
            idle += start - end
            gaps.append((start - end, (start - t0) / 1e3, name[:80]))
        end = max(end, stop)
    gaps.sort(key=lambda g: -g[0])
    return (end - t0) / 1e3, idle / 1e3, gaps[:top]


def kernel_diff(a, b, top=12):
    """The kernels whose GPU time per step differs most between two
    top_kernels(top=None) lists: [(name, ms in a, ms in b, calls in a, calls in b)]."""
    ka, kb = {n: (ms, c) for n, ms, c in a}, {n: (ms, c) for n, ms, c in b}
    rows = [(n, ka.get(n, (0.0, 0))[0], kb.get(n, (0.0, 0))[0], ka.get(n, (0.0, 0))[1], kb.get(n, (0.0, 0))[1])
            for n in set(ka) | set(kb)]
    rows.sort(key=lambda r: -abs(r[1] - r[2]))
    return rows[:top]


# ---- 1. the layer -------------------------------------------------------------------


class SdpaLayer(torch.nn.Module):
    """The same block in plain PyTorch (weights shared with an attn layer), SDPA for attention."""

    def __init__(self, ref: at.TransformerLayer, gqa: str) -> None:
        super().__init__()
        self.l, self.gqa = ref, gqa

    def forward(self, x, freqs):
        L = self.l
        h, g, d = L.num_attention_heads, L.num_gqa_groups, L.kv_channels
        b, s, _ = x.shape
        qkv = F.linear(F.rms_norm(x, x.shape[-1:], L.input_layernorm.weight, L.input_layernorm.eps),
                       L.qkv.weight, L.qkv.bias).view(b, s, h + 2 * g, d)
        q, k, v = qkv[:, :, :h], qkv[:, :, h:h + g], qkv[:, :, h + g:]
        q, k = apply_rotary_pos_emb(q, freqs, "bshd"), apply_rotary_pos_emb(k, freqs, "bshd")
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.gqa == "repeat_kv":
            k, v = k.repeat_interleave(h // g, dim=1), v.repeat_interleave(h // g, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.gqa == "enable_gqa")
        x = x + L.proj(o.transpose(1, 2).reshape(b, s, h * d))
        m = L.fc1(F.rms_norm(x, x.shape[-1:], L.post_attention_layernorm.weight, L.post_attention_layernorm.eps))
        a, c = m.chunk(2, dim=-1)
        return x + L.fc2(F.silu(a) * c)


def bench_layer(args, report):
    b, s, hidden, heads, groups, ffn = args.batch, args.seq, 4096, 32, 8, 14336
    d = hidden // heads
    torch.manual_seed(0)
    layer = at.TransformerLayer(hidden, ffn, heads, groups, hidden_dropout=0.0, attention_dropout=0.0,
                                normalization="RMSNorm", activation="swiglu", attn_input_format="bshd", bias=False,
                                params_dtype=torch.bfloat16, device="cuda")
    x = torch.randn(b, s, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    freqs = at.RotaryPositionEmbedding(d)(s).cuda()

    shape_q, shape_kv = (b, s, heads, d), (b, s, groups, d)
    # Each pass is selected on its own (on Hopper: flash_sm90's forward, cudnn's backward).
    report["attn_backend"] = {}
    for pass_ in ("forward", "backward"):
        ex = attn.explain(shape_q, shape_kv, shape_kv, mask="causal", dtype="bfloat16", device="cuda:0",
                          backward=pass_ == "backward")
        print(f"attn backend for the layer's attention, {pass_}: {ex.chosen} ({ex.why})")
        report["attn_backend"][pass_] = {"chosen": ex.chosen, "why": ex.why, "table": str(ex)}
    print()

    # SDPA's cuDNN backend with GQA: enable_gqa if this PyTorch supports it there, else K/V repeated.
    gqa = "enable_gqa"
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            SdpaLayer(layer, gqa)(x[:, :256].detach(), freqs)
    except RuntimeError as e:
        print(f"cuDNN SDPA refused enable_gqa ({str(e).splitlines()[0]}); repeating K/V instead")
        gqa = "repeat_kv"
    ref = SdpaLayer(layer, gqa)

    def step(fn):
        def run():
            x.grad = None
            for p in layer.parameters():
                p.grad = None
            fn().backward(dy)
        return run

    def sdpa_fwd():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return ref(x, freqs)

    with torch.no_grad():  # same weights and inputs: the two layers agree
        y_attn, y_ref = layer(x, rotary_pos_emb=freqs), sdpa_fwd()
        rel = float((y_attn.float() - y_ref.float()).norm() / y_ref.float().norm())
    t = timed_interleaved({"attn": (None, step(lambda: layer(x, rotary_pos_emb=freqs))),
                           "sdpa": (None, step(sdpa_fwd))}, args.warmup, args.iters)
    t_attn, t_ref = t["attn"], t["sdpa"]

    # The attention call alone, on the layer's shapes (q, k, v as the layer makes them).
    q = torch.randn(b, s, heads, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, s, groups, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)
    do = torch.randn_like(q)

    def attn_only():
        at.attention(q, k, v, mask="causal").backward(do)

    def sdpa_only():
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if gqa == "repeat_kv":
            kt, vt = kt.repeat_interleave(heads // groups, 1), vt.repeat_interleave(heads // groups, 1)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=gqa == "enable_gqa")
        o.transpose(1, 2).backward(do)

    t = timed_interleaved({"attn": (None, attn_only), "sdpa": (None, sdpa_only)}, args.warmup, args.iters)
    t_a1, t_s1 = t["attn"], t["sdpa"]
    # The rotary embedding alone on the layer's q and k (heads of one QKV buffer), fwd+bwd:
    # PyTorch's elementwise ops (what the plain layer runs) against attn's fused kernel.
    qkv = torch.randn(b, s, heads + 2 * groups, d, device="cuda", dtype=torch.bfloat16)
    d_qk = torch.randn(b, s, heads + groups, d, device="cuda", dtype=torch.bfloat16)

    def rope(fused):
        def run():
            qk = qkv[:, :, :heads + groups].detach().requires_grad_()
            apply_rotary_pos_emb(qk, freqs, "bshd", fused=fused).backward(d_qk)
        return run

    t = timed_interleaved({"fused": (None, rope(True)), "unfused": (None, rope(False))}, args.warmup, args.iters)
    t_rf, t_ru = t["fused"], t["unfused"]
    # Their error against the rotation in float64 (relative Frobenius): the fused kernel rounds once.
    with torch.no_grad():
        qk = qkv[:, :, :heads + groups]
        f64 = freqs[:s].transpose(0, 1).double()
        x64 = qk.double()
        x1, x2 = x64.chunk(2, dim=-1)
        want = x64 * f64.cos() + torch.cat((-x2, x1), dim=-1) * f64.sin()
        rope_err = {name: float((apply_rotary_pos_emb(qk, freqs, "bshd", fused=fused).double() - want).norm()
                                / want.norm()) for name, fused in (("fused", True), ("unfused", False))}
    del qkv, d_qk
    attn_flops = 3.5 * 4 * b * heads * s * s * d / 2  # fwd + bwd (2.5x), causal halves
    report["layer"] = {
        "shape": dict(batch=b, seq=s, hidden=hidden, heads=heads, kv_heads=groups, ffn=ffn, head_dim=d,
                      activation="swiglu", normalization="RMSNorm", rotary=True, mask="causal", dtype="bfloat16"),
        "attn_layer_ms": t_attn, "sdpa_cudnn_layer_ms": t_ref, "speedup": t_ref / t_attn,
        "sdpa_gqa": gqa, "output_rel_frobenius_diff": rel,
        "attention_only": {"attn_ms": t_a1, "sdpa_cudnn_ms": t_s1, "speedup": t_s1 / t_a1,
                           "attn_tflops": attn_flops / t_a1 / 1e9, "sdpa_cudnn_tflops": attn_flops / t_s1 / 1e9},
        "rotary_q_and_k": {"attn_fused_ms": t_rf, "pytorch_unfused_ms": t_ru, "speedup": t_ru / t_rf,
                           "rel_frobenius_error_vs_float64": rope_err},
    }
    del layer, ref, x, dy, q, k, v, do
    torch.cuda.empty_cache()


# ---- 2. a transformers model's training step ------------------------------------------


def bench_transformers(args, report):
    import transformers
    import attn.integrations.transformers as attn_hf

    attn_hf.register()
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
                                   num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=8192)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).train()
    b, s = args.hf_batch, args.hf_seq
    ids = torch.randint(0, cfg.vocab_size, (b, s), device="cuda")
    padded = torch.ones(b, s, dtype=torch.long, device="cuda")
    padded[1::2, s * 3 // 4:] = 0  # every other row right-padded by a quarter
    rows = []
    for case, mask in (("no mask", None), ("right-padded mask", padded)):
        labels = ids if mask is None else ids.masked_fill(mask == 0, -100)
        res = {"case": case}

        def run(mask=mask, labels=labels):
            model.zero_grad(set_to_none=True)
            model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss.backward()

        def use(impl):
            return lambda: model.set_attn_implementation(impl)
        rounds = {}
        t = timed_interleaved({impl: (use(impl), run) for impl in ("attn", "sdpa")}, args.warmup, args.iters, rounds)
        res["attn_ms"], res["sdpa_ms"] = t["attn"], t["sdpa"]
        res["speedup"] = res["sdpa_ms"] / res["attn_ms"]
        # The same round's two steps paired: how the speedup spreads, and how often attn's step was the faster.
        paired = sorted(s / a for a, s in zip(rounds["attn"], rounds["sdpa"]))
        res["paired_speedup"] = dict(median=statistics.median(paired), q10=paired[len(paired) // 10],
                                     q90=paired[len(paired) * 9 // 10], attn_faster=sum(r > 1 for r in paired) / len(paired),
                                     rounds=len(paired))
        if args.profile:  # where the GPU time of one step goes, per implementation
            every = {}
            for impl in ("attn", "sdpa"):
                use(impl)()
                total, every[impl] = top_kernels(run, top=None)
                res[f"{impl}_gpu_ms"] = total
                res[f"{impl}_top_kernels"] = [dict(name=n[:90], ms=ms, calls=c) for n, ms, c in every[impl][:8]]
            for impl in ("attn", "sdpa"):
                use(impl)()
                span, idle, gaps = idle_gaps(run)
                res[f"{impl}_timeline"] = dict(span_ms=span, idle_ms=idle,
                                               largest_gaps=[dict(us=g, at_ms=a, next=n) for g, a, n in gaps])
            res["kernel_diff"] = [dict(name=n[:120], attn_ms=x, sdpa_ms=y, attn_calls=cx, sdpa_calls=cy)
                                  for n, x, y, cx, cy in kernel_diff(every["attn"], every["sdpa"])]
        rows.append(res)
    report["transformers"] = {
        "model": dict(hidden=2048, layers=8, heads=16, kv_heads=4, ffn=5632, vocab=32000, batch=b, seq=s,
                      dtype="bfloat16", step="forward + loss + backward, no optimizer"),
        "sdpa_backend": "PyTorch's default SDPA selection (what transformers' \"sdpa\" gets)",
        "rows": rows,
    }


# ---- 3. a gpt-oss-shaped transformers model's training step (softmax sinks) -------------


def bench_gptoss(args, report):
    """gpt-oss's attention (a learnable sink per head, every other layer a
    128-token sliding window, 64 query / 8 KV heads of d 64) in a model with
    gpt-oss-20b's widths and fewer layers and experts. transformers offers it
    "eager", "flex_attention" and "flash_attention_*" (the last needs the
    flash_attn package or a download from the kernels hub, neither on the
    GPU machine); attn is timed against the two it has."""
    import transformers
    import attn.integrations.transformers as attn_hf

    attn_hf.register()
    cfg = transformers.GptOssConfig(vocab_size=32000, hidden_size=2880, intermediate_size=2880, num_hidden_layers=4,
                                    num_attention_heads=64, num_key_value_heads=8, head_dim=64, sliding_window=128,
                                    num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=8192)
    torch.manual_seed(0)
    model = transformers.GptOssForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).train()
    b, s = args.gptoss_batch, args.gptoss_seq
    ids = torch.randint(0, cfg.vocab_size, (b, s), device="cuda")

    def run():
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()

    impls = ["attn", "eager", "flex_attention"]
    fns = {}
    for impl in impls:
        try:  # flex_attention compiles on its first step: fail here, not inside the timing
            model.set_attn_implementation(impl)
            run()
            fns[impl] = (lambda impl=impl: model.set_attn_implementation(impl), run)
        except Exception as e:  # noqa: BLE001 - record why a peer could not run
            report.setdefault("gptoss_skipped", {})[impl] = f"{type(e).__name__}: {e}"[:300]
    t = timed_interleaved(fns, args.warmup, args.iters)
    peers = {k: v for k, v in t.items() if k != "attn"}
    best = min(peers, key=peers.get) if peers else None
    report["gptoss"] = {
        "model": dict(hidden=2880, layers=4, heads=64, kv_heads=8, head_dim=64, sliding_window=128, experts=4,
                      experts_per_token=2, vocab=32000, batch=b, seq=s, dtype="bfloat16",
                      step="forward + loss + backward, no optimizer"),
        "ms": t, "best_peer": best, "speedup_vs_best_peer": t[best] / t["attn"] if best else None,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="JSON output path")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--hf-batch", type=int, default=4)
    p.add_argument("--hf-seq", type=int, default=2048)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--skip-transformers", action="store_true")
    p.add_argument("--skip-layer", action="store_true", help="only the transformers training step")
    p.add_argument("--gptoss", action="store_true",
                   help="also a gpt-oss-shaped model's training step against transformers' eager and flex_attention")
    p.add_argument("--gptoss-batch", type=int, default=2)
    p.add_argument("--gptoss-seq", type=int, default=4096)
    p.add_argument("--profile", action="store_true",
                   help="also list each transformers step's top CUDA kernels (torch.profiler) per implementation")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/layer.py needs a CUDA GPU")

    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    report = {"device": torch.cuda.get_device_name(), "commit": commit, "python": platform.python_version(),
              "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "attn_backends": attn.backends(),
              "method": f"CUDA events, {args.warmup} warm-up, median of {args.iters}, bf16"}
    try:
        import transformers
        report["transformers_version"] = transformers.__version__
    except ImportError:
        args.skip_transformers = True
    print(f"{report['device']}, torch {report['torch']}, cuDNN {report['cudnn']}, attn backends {report['attn_backends']}")

    if not args.skip_layer:
        bench_layer(args, report)
    if not args.skip_transformers:
        bench_transformers(args, report)
    if args.gptoss and "transformers_version" in report:
        bench_gptoss(args, report)

    if "layer" in report:
        L = report["layer"]
        print(f"\nLlama-3-8B-shaped layer, b {args.batch} s {args.seq}, bf16, fwd+bwd (median ms; speedup = SDPA / attn)")
        print(f"| what | attn | PyTorch SDPA cuDNN ({L['sdpa_gqa']}) | speedup |\n| --- | --- | --- | --- |")
        print(f"| layer | {L['attn_layer_ms']:.3f} | {L['sdpa_cudnn_layer_ms']:.3f} | {L['speedup']:.3f} |")
        A = L["attention_only"]
        print(f"| attention only | {A['attn_ms']:.3f} ({A['attn_tflops']:.0f} TFLOP/s) | {A['sdpa_cudnn_ms']:.3f} "
              f"({A['sdpa_cudnn_tflops']:.0f} TFLOP/s) | {A['speedup']:.3f} |")
        R = L["rotary_q_and_k"]
        print(f"| rotary on q and k | {R['attn_fused_ms']:.3f} (fused) | {R['pytorch_unfused_ms']:.3f} (PyTorch ops) "
              f"| {R['speedup']:.3f} |")
        print(f"rotary error against float64 (relative Frobenius): fused {R['rel_frobenius_error_vs_float64']['fused']:.2e}, "
              f"PyTorch ops {R['rel_frobenius_error_vs_float64']['unfused']:.2e}")
        print(f"layer outputs differ by {L['output_rel_frobenius_diff']:.2e} (relative Frobenius)")
    if "transformers" in report:
        T = report["transformers"]
        print(f"\ntransformers Llama-style model ({T['model']['layers']} layers, hidden {T['model']['hidden']}), "
              f"b {T['model']['batch']} s {T['model']['seq']}, training step (median ms)")
        print("| case | attn | sdpa | speedup |\n| --- | --- | --- | --- |")
        for r in T["rows"]:
            print(f"| {r['case']} | {r['attn_ms']:.2f} | {r['sdpa_ms']:.2f} | {r['speedup']:.3f} |")
        for r in T["rows"]:
            P = r["paired_speedup"]
            print(f"{r['case']}: speedup per round (sdpa / attn, same round) median {P['median']:.4f}, "
                  f"10-90% {P['q10']:.4f}-{P['q90']:.4f}; attn faster in {P['attn_faster']:.0%} of {P['rounds']} rounds")
        for r in T["rows"]:
            for impl in ("attn", "sdpa"):
                if f"{impl}_timeline" in r:
                    tl = r[f"{impl}_timeline"]
                    print(f"\n{r['case']}, {impl}: GPU timeline {tl['span_ms']:.2f} ms, idle {tl['idle_ms']:.2f} ms; "
                          "largest gaps (us, at ms, next kernel):")
                    for g in tl["largest_gaps"]:
                        print(f"  {g['us']:8.1f} {g['at_ms']:7.2f}  {g['next']}")
            if "kernel_diff" in r:
                print(f"\n{r['case']}: kernels whose GPU time per step differs most (attn ms / sdpa ms, calls)")
                for kd in r["kernel_diff"]:
                    print(f"  {kd['attn_ms']:7.3f} {kd['sdpa_ms']:7.3f} {kd['attn_calls']:4d} {kd['sdpa_calls']:4d}  "
                          f"{kd['name']}")
        for r in T["rows"]:
            for impl in ("attn", "sdpa"):
                if f"{impl}_top_kernels" in r:
                    print(f"\n{r['case']}, {impl}: GPU {r[f'{impl}_gpu_ms']:.2f} ms per step; top kernels (ms, calls):")
                    for kern in r[f"{impl}_top_kernels"]:
                        print(f"  {kern['ms']:7.3f} {kern['calls']:4d}  {kern['name']}")
    if "gptoss" in report:
        G = report["gptoss"]
        print(f"\ngpt-oss-shaped model ({G['model']['layers']} layers, sinks, window {G['model']['sliding_window']}), "
              f"b {G['model']['batch']} s {G['model']['seq']}, training step (median ms): "
              + ", ".join(f"{k} {v:.2f}" for k, v in G["ms"].items())
              + (f"; attn / best peer ({G['best_peer']}) speedup {G['speedup_vs_best_peer']:.3f}" if G["best_peer"] else ""))
        for impl, why in report.get("gptoss_skipped", {}).items():
            print(f"  {impl} did not run: {why}")
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
