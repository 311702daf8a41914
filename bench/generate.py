"""Greedy generation through HuggingFace transformers with attn against its
"sdpa" (issue 43): a Llama-3-8B-shaped model (h 32/8, d 128, hidden 4096,
intermediate 14336, its vocabulary; --layers layers of random weights, bf16)
prompted with --prompt tokens at each batch size, --new tokens generated.
Decode tokens/s = batch x (new - 1) / (time of generate(new) - time of
generate(1)), the prefill and the first token cancelling; the implementations
alternate round by round in one process, medians of --rounds.

    python bench/generate.py [--batches 1,64] [--prompt 4096] [--new 64] [--layers 2] [--json FILE]
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


def generate_s(model, impl, ids, new):
    model.set_attn_implementation(impl)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                             do_sample=False)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--prompt", type=int, default=4096)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    attn_hf.register()
    model = model_of(a.layers)
    impls = ("attn", "sdpa")
    rows = []
    print(f"{torch.cuda.get_device_name()}, transformers {transformers.__version__}, {a.layers} layers, "
          f"prompt {a.prompt}, {a.new} new tokens")
    print(f"{'b':>4} {'impl':6} {'decode tok/s':>13} {'prefill+1 s':>12} {'total s':>8}")
    for b in (int(x) for x in a.batches.split(",")):
        ids = torch.randint(3, 128256, (b, a.prompt), device="cuda", generator=torch.Generator("cuda").manual_seed(b))
        outs = {}
        for impl in impls:  # warm-up, and the tokens each generates
            generate_s(model, impl, ids, 4)
            outs[impl] = generate_s(model, impl, ids, a.new)[1]
        times = {impl: ([], []) for impl in impls}
        for _ in range(a.rounds):
            for impl in impls:
                times[impl][0].append(generate_s(model, impl, ids, 1)[0])
                times[impl][1].append(generate_s(model, impl, ids, a.new)[0])
        same = (outs["attn"] == outs["sdpa"]).float().mean().item()
        r = {"b": b, "prompt": a.prompt, "new": a.new, "layers": a.layers, "same_tokens": same}
        for impl in impls:
            first, total = statistics.median(times[impl][0]), statistics.median(times[impl][1])
            tps = b * (a.new - 1) / (total - first)
            r[impl] = {"decode_tokens_per_s": tps, "prefill_and_first_s": first, "total_s": total}
            print(f"{b:4d} {impl:6} {tps:13.1f} {first:12.3f} {total:8.3f}")
        r["ratio"] = r["attn"]["decode_tokens_per_s"] / r["sdpa"]["decode_tokens_per_s"]
        print(f"{b:4d} attn / sdpa decode tokens/s {r['ratio']:.3f}; generated tokens equal: {same:.3f}")
        rows.append(r)
        del ids
        torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
