"""Greedy generation through HuggingFace transformers with attn against its
"sdpa" (issue 43): a Llama-3-8B-shaped model (h 32/8, d 128, hidden 4096,
intermediate 14336, its vocabulary; --layers layers of random weights, bf16)
prompted with --prompt tokens at each batch size, --new tokens generated.

Decode tokens/s two ways, the implementations alternating round by round in
one process, medians of --rounds:
- steps: batch / the median time between consecutive decode steps, from CUDA
  events a logits processor records at each step (the first decode step left
  out). The prefill stays out of it, so its variation does not enter.
- totals: batch x (new - 1) / (time of generate(new) - time of generate(1)),
  the prefill and the first token cancelling (a difference of two totals, of
  which the prefill is most at batch 64).
Each round's step time is printed: a round's steps can run ~20% slower for
both implementations alike (the caching allocator's growth of the dynamic
cache), so the per-round list shows whether the medians compare like with
like; the best round of each is reported too.

    python bench/generate.py [--batches 1,64] [--prompt 4096] [--new 64] [--layers 2] [--rounds 7] [--json FILE]
"""
import argparse
import json
import statistics
import time

import torch
import transformers

import attn.integrations.transformers as attn_hf


def model_of(layers):
    cfg = transformers.LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                                   num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
                                   head_dim=128, rope_theta=500000.0, max_position_embeddings=16384)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.eval()
    model.generation_config.pad_token_id = 0
    return model


class _StepStamps(transformers.LogitsProcessor):
    """Records a CUDA event at each decode step (logits processors run once per generated token)."""

    def __init__(self):
        self.events = []

    def __call__(self, input_ids, scores):
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        self.events.append(e)
        return scores

    def step_s(self):
        """The median time between consecutive steps, the first decode step left out (None below 3 steps)."""
        gaps = [a.elapsed_time(b) / 1e3 for a, b in zip(self.events[1:], self.events[2:])]
        return statistics.median(gaps) if gaps else None


def generate_s(model, impl, ids, new, stamps=None):
    model.set_attn_implementation(impl)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                             do_sample=False, logits_processor=transformers.LogitsProcessorList(
                                 [] if stamps is None else [stamps]))
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--prompt", type=int, default=4096)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    attn_hf.register()
    model = model_of(a.layers)
    impls = ("attn", "sdpa")
    rows = []
    print(f"{torch.cuda.get_device_name()}, transformers {transformers.__version__}, {a.layers} layers, "
          f"prompt {a.prompt}, {a.new} new tokens")
    print(f"{'b':>4} {'impl':6} {'tok/s steps':>12} {'best round':>11} {'tok/s totals':>13} {'prefill+1 s':>12} "
          f"{'total s':>8}  step ms per round")
    for b in (int(x) for x in a.batches.split(",")):
        ids = torch.randint(3, 128256, (b, a.prompt), device="cuda", generator=torch.Generator("cuda").manual_seed(b))
        outs = {}
        for impl in impls:  # warm-up, and the tokens each generates
            generate_s(model, impl, ids, 4)
            outs[impl] = generate_s(model, impl, ids, a.new)[1]
        times = {impl: ([], [], []) for impl in impls}
        for i in range(a.rounds):
            for impl in impls if i % 2 == 0 else impls[::-1]:
                stamps = _StepStamps()
                times[impl][0].append(generate_s(model, impl, ids, 1)[0])
                times[impl][1].append(generate_s(model, impl, ids, a.new, stamps)[0])
                times[impl][2].append(stamps.step_s())
        same = (outs["attn"] == outs["sdpa"]).float().mean().item()
        r = {"b": b, "prompt": a.prompt, "new": a.new, "layers": a.layers, "rounds": a.rounds, "same_tokens": same}
        for impl in impls:
            firsts, totals, steps = times[impl]
            first, total, step = statistics.median(firsts), statistics.median(totals), statistics.median(steps)
            r[impl] = {"decode_tokens_per_s": b / step, "best_round_tokens_per_s": b / min(steps),
                       "totals_tokens_per_s": b * (a.new - 1) / (total - first), "step_s_per_round": steps,
                       "prefill_and_first_s": first, "total_s": total}
            print(f"{b:4d} {impl:6} {b / step:12.1f} {b / min(steps):11.1f} {r[impl]['totals_tokens_per_s']:13.1f} "
                  f"{first:12.3f} {total:8.3f}  " + " ".join(f"{x * 1e3:.3f}" for x in steps))
        ratio = {k: r["attn"][k] / r["sdpa"][k]
                 for k in ("decode_tokens_per_s", "best_round_tokens_per_s", "totals_tokens_per_s")}
        r["ratio"], r["ratio_best_round"], r["ratio_totals"] = (ratio["decode_tokens_per_s"],
                                                                ratio["best_round_tokens_per_s"],
                                                                ratio["totals_tokens_per_s"])
        print(f"{b:4d} attn / sdpa decode tokens/s: steps {r['ratio']:.3f}, best rounds {r['ratio_best_round']:.3f}, "
              f"totals {r['ratio_totals']:.3f}; generated tokens equal: {same:.3f}")
        rows.append(r)
        del ids
        torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
