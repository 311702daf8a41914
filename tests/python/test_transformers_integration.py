"""attn inside HuggingFace transformers (attn.integrations.transformers): tiny
randomly initialised models (Llama-style with GQA, Mistral-style with a
sliding window, Gemma-2-style with softcap and alternating sliding layers,
gpt-oss-style with attention sinks; no downloads) give the same logits, loss, gradients and KV-cache decoding logits
with attn_implementation="attn" as with transformers' own "sdpa" (Gemma-2:
"eager", since SDPA has no softcap; gpt-oss: "eager", its reference for sinks), with and without padding. On the CPU attn
runs its reference backend in float32; on a GPU, bf16 against the same bar as
the layer tests (no further from float32 than twice PyTorch's own bf16)."""

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import attn  # noqa: E402
import attn.integrations.transformers as attn_hf  # noqa: E402

HAS_GPU_BACKEND = attn.cuda_device_count() > 0 and any(
    b.available and b.device == "cuda" for b in attn.backends(detail=True))
needs_gpu = pytest.mark.skipif(not HAS_GPU_BACKEND, reason="needs a CUDA device and a GPU backend in this build")

attn_hf.register()

# model kind -> (config class, model class, config overrides, the implementation to compare with)
MODELS = {
    "llama_gqa": ("LlamaConfig", "LlamaForCausalLM", {}, "sdpa"),
    "mistral_window": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=4), "sdpa"),
    "gemma2_softcap": ("Gemma2Config", "Gemma2ForCausalLM",
                       dict(sliding_window=4, attn_logit_softcapping=2.0, final_logit_softcapping=20.0,
                            query_pre_attn_scalar=8), "eager"),
    # gpt-oss: a learnable attention sink per head (s_aux), alternating sliding-window layers, MoE
    # with every expert taken (top-2 of 2): no router choice that a bf16 rounding could flip.
    "gptoss_sinks": ("GptOssConfig", "GptOssForCausalLM",
                     dict(num_local_experts=2, num_experts_per_tok=2, sliding_window=4), "eager"),
}
VOCAB, SEQ = 64, 12


def tiny_model(kind, dtype=torch.float32, device="cpu", seed=0, **over):
    cfg_name, model_name, extra, _ = MODELS[kind]
    cfg = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=8, max_position_embeddings=64, initializer_range=0.2,
               pad_token_id=0, bos_token_id=1, eos_token_id=2)
    cfg.update(extra)
    cfg.update(over)
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(getattr(transformers, cfg_name)(**cfg))
    return model.to(device=device, dtype=dtype)


def batch(padding, device="cpu", b=3, s=SEQ, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (b, s), generator=g)
    mask = torch.ones(b, s, dtype=torch.long)
    if padding == "right":
        mask[1, s - 5:] = 0
        mask[2, s - 1:] = 0
    elif padding == "left":
        mask[1, :5] = 0
        mask[2, :1] = 0
    ids = ids.masked_fill(mask == 0, 0)
    # No loss on padding, nor on a token predicted from a padding position (the
    # first real token after left padding): padding rows' outputs are
    # undefined (attn writes 0, SDPA and eager whatever their masks give).
    predicted_from_pad = torch.nn.functional.pad(mask[:, :-1] == 0, (1, 0))
    labels = ids.masked_fill((mask == 0) | predicted_from_pad, -100)
    return ids.to(device), mask.to(device), labels.to(device)


def run(model, impl, ids, mask, labels, train=False):
    """logits (real tokens), loss, and every parameter's gradient."""
    model.set_attn_implementation(impl)
    model.train(train)
    model.zero_grad()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # as generate() numbers left-padded rows
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, labels=labels)
    out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return {"logits": out.logits.detach()[mask.bool()], "loss": out.loss.detach()}, grads


def decode(model, impl, ids, mask, steps=4, seed=2):
    """Prefill, then `steps` single-token steps through the KV cache (teacher
    forced with fixed tokens, so both implementations see the same inputs):
    every step's logits. The prefill's last position is padding in a
    right-padded row: its logits are undefined and come out as 0."""
    model.set_attn_implementation(impl)
    model.eval()
    g = torch.Generator().manual_seed(seed)
    nxt = torch.randint(3, VOCAB, (ids.shape[0], steps), generator=g).to(ids.device)
    logits = []
    with torch.no_grad():
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
        logits.append(out.logits[:, -1] * mask[:, -1:])
        for t in range(steps):
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
            pos = pos[:, -1:] + 1
            out = model(input_ids=nxt[:, t: t + 1], attention_mask=mask, position_ids=pos,
                        past_key_values=out.past_key_values, use_cache=True)
            logits.append(out.logits[:, -1])
    return torch.stack(logits, dim=1)


def assert_same(got, want, atol, rtol, what):
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=atol, rtol=rtol, msg=lambda m: f"{what} {name}: {m}")


# ---- CPU, float32: attn's reference backend against transformers' own --------------------


@pytest.mark.parametrize("padding", ["none", "right", "left"])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_logits_loss_gradients_match(kind, padding):
    model = tiny_model(kind)
    ids, mask, labels = batch(padding)
    base = MODELS[kind][3]
    want, want_g = run(model, base, ids, mask, labels)
    got, got_g = run(model, "attn", ids, mask, labels)
    assert_same(got, want, 1e-4, 1e-4, f"{kind} {padding}")
    assert got_g.keys() == want_g.keys()
    assert_same(got_g, want_g, 1e-4, 1e-3, f"{kind} {padding} grad")


@pytest.mark.parametrize("padding", ["none", "left", "right"])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_kv_cache_decoding_logits_match(kind, padding):
    model = tiny_model(kind)
    ids, mask, _ = batch(padding, s=6)  # 6 + 4 steps crosses Mistral's and Gemma-2's window of 4
    want = decode(model, MODELS[kind][3], ids, mask)
    got = decode(model, "attn", ids, mask)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_generate_with_left_padding():
    model = tiny_model("llama_gqa").eval()
    ids, mask, _ = batch("left", s=6)
    res = {}
    for impl in ("sdpa", "attn"):
        model.set_attn_implementation(impl)
        res[impl] = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=5, do_sample=False,
                                   output_logits=True, return_dict_in_generate=True)
    assert torch.equal(res["attn"].sequences, res["sdpa"].sequences)
    torch.testing.assert_close(torch.stack(res["attn"].logits), torch.stack(res["sdpa"].logits), atol=1e-4, rtol=1e-4)


def test_from_pretrained_selects_attn(tmp_path):
    tiny_model("llama_gqa").save_pretrained(tmp_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="attn")
    assert model.config._attn_implementation == "attn"
    ids, mask, labels = batch("none")
    want, _ = run(tiny_model("llama_gqa"), "sdpa", ids, mask, labels)
    got, _ = run(model, "attn", ids, mask, labels)
    assert_same(got, want, 1e-4, 1e-4, "from_pretrained")


def test_packed_sequences_from_position_ids():
    """Padding-free training: several sequences in one row, position_ids restarting."""
    model = tiny_model("mistral_window")
    ids = torch.randint(3, VOCAB, (1, 14), generator=torch.Generator().manual_seed(3))
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 1, 2, 0, 1, 2, 3, 4]])
    outs = {}
    for impl in ("sdpa", "attn"):
        model.set_attn_implementation(impl)
        # use_cache=False: transformers reads packing from position_ids only without a cache
        outs[impl] = model(input_ids=ids, position_ids=pos, use_cache=False).logits.detach()
    torch.testing.assert_close(outs["attn"], outs["sdpa"], atol=1e-4, rtol=1e-4)
    unpacked = model(input_ids=ids, use_cache=False).logits.detach()
    assert not torch.allclose(unpacked, outs["attn"], atol=1e-3)  # the packing mattered


def test_dense_4d_mask_from_the_caller():
    """A caller-built 4-D mask reaches attn as an "arbitrary" mask."""
    model = tiny_model("llama_gqa")
    ids, _, _ = batch("none", b=2, s=8)
    allowed = torch.ones(8, 8, dtype=torch.bool).tril()
    allowed[5, 2] = False  # not a pattern cu_seqlens can express
    mask4 = allowed[None, None].expand(2, 1, 8, 8)
    outs = {}
    for impl in ("sdpa", "attn"):
        model.set_attn_implementation(impl)
        outs[impl] = model(input_ids=ids, attention_mask=mask4).logits.detach()
    torch.testing.assert_close(outs["attn"], outs["sdpa"], atol=1e-4, rtol=1e-4)


def test_mask_hook_goes_dense_only_for_patterns_attn_cannot_express():
    mu = transformers.masking_utils
    valid = torch.tensor([[True] * 6, [False, False] + [True] * 4])
    kw = dict(batch_size=2, q_length=6, kv_length=6, attention_mask=valid)
    plain = [mu.causal_mask_function, mu.sliding_window_causal_mask_function(3), mu.bidirectional_mask_function]
    for fn in plain:
        got = attn_hf.attention_mask(mask_function=fn, **kw)
        assert got.shape == (2, 6) and torch.equal(got, valid), fn  # the 2-D mask: cu_seqlens, no dense mask
    image_block = mu.or_masks(mu.causal_mask_function, mu.blockwise_overlay(torch.tensor([[0, 0, 1, 1, 0, 0]] * 2)))
    chunked = mu.chunked_causal_mask_function(2, torch.zeros(2, dtype=torch.long))
    packed = mu.and_masks(mu.causal_mask_function, mu.packed_sequence_mask_function(torch.zeros(2, 6)))
    for fn in (image_block, chunked, packed):  # packed rows in a batch of 2: dense
        m = attn_hf.attention_mask(mask_function=fn, **kw)
        assert m.shape == (2, 1, 6, 6) and m.dtype == torch.bool, fn
    want = mu.sdpa_mask(mask_function=image_block, allow_is_causal_skip=False, **kw)
    assert torch.equal(attn_hf.attention_mask(mask_function=image_block, **kw), want)
    packed_one = mu.and_masks(mu.causal_mask_function, mu.packed_sequence_mask_function(torch.zeros(1, 6)))
    assert attn_hf.attention_mask(mask_function=packed_one, batch_size=1, q_length=6, kv_length=6) is None


class _Spy:
    """Records what attn.torch.attention receives from the integration."""

    def __init__(self, monkeypatch):
        self.calls = []
        real = attn_hf.attention

        def spy(q, k, v, **kw):
            self.calls.append((q, k, v, kw))
            return real(q, k, v, **kw)
        monkeypatch.setattr(attn_hf, "attention", spy)


def test_strided_views_reach_attn_without_copies(monkeypatch):
    model = tiny_model("llama_gqa").eval()
    seen = []

    def outer(module, query, key, value, *args, **kwargs):
        seen.append((query, key, value))
        return attn_hf.attention_forward(module, query, key, value, *args, **kwargs)

    transformers.AttentionInterface.register("attn_spy", outer)
    transformers.masking_utils.AttentionMaskInterface.register("attn_spy", attn_hf.attention_mask)
    spy = _Spy(monkeypatch)
    model.set_attn_implementation("attn_spy")
    for padding in ("none", "right"):
        ids, mask, _ = batch(padding)
        model(input_ids=ids, attention_mask=mask)
    assert len(spy.calls) == len(seen) == 4
    for (query, key, value), (q, k, v, kw) in zip(seen, spy.calls):
        for a, b in ((query, q), (key, k), (value, v)):
            assert a.data_ptr() == b.data_ptr() and b.stride(-1) == 1
        assert kw.get("qkv_format", "bshd") == "bshd"
    assert spy.calls[2][3]["mask"] == "padding_causal_bottom_right"  # right padding: cu_seqlens, no gather
    assert spy.calls[2][3]["cu_seqlens_q"].tolist() == [0, 12, 19, 30]


def test_mask_choices_reach_attn(monkeypatch):
    spy = _Spy(monkeypatch)
    model = tiny_model("gemma2_softcap").eval()
    ids, mask, _ = batch("left")
    model.set_attn_implementation("attn")
    model(input_ids=ids, attention_mask=mask)
    full, sliding = spy.calls[0][3], spy.calls[1][3]  # Gemma-2 alternates sliding and full layers
    kws = sorted((c[3]["window"] for c in spy.calls))
    assert kws == [(-1, -1), (3, 0)], kws  # transformers' sliding_window=4 is 3 keys back, inclusive
    for kw in (full, sliding):
        assert kw["qkv_format"] == "thd" and kw["mask"] == "padding_causal_bottom_right"  # left padding: gathered
        assert kw["softcap"] == 2.0 and kw["softmax_scale"] == pytest.approx(8 ** -0.5)


def test_dropout_in_training(monkeypatch):
    model = tiny_model("llama_gqa", attention_dropout=0.3)
    ids, mask, labels = batch("right")
    model.set_attn_implementation("attn")
    spy = _Spy(monkeypatch)
    torch.manual_seed(5)
    a, ga = run(model, "attn", ids, mask, labels, train=True)
    torch.manual_seed(5)
    b, gb = run(model, "attn", ids, mask, labels, train=True)
    assert all(c[3]["dropout_p"] == 0.3 for c in spy.calls)
    assert_same(a, b, 0, 0, "same seed")  # dropout seeds come from torch's generator
    e, _ = run(model, "attn", ids, mask, labels, train=False)
    assert not torch.allclose(a["logits"], e["logits"])
    assert all(torch.isfinite(g).all() for g in ga.values())


# ---- GPU, bf16: same models, the DESIGN.md bar ---------------------------------------------


def _rel(got, want):
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))


def _within_twice_pytorch(ours, theirs, ref, what):
    for name in ref:
        e_ours, e_theirs = _rel(ours[name], ref[name]), _rel(theirs[name], ref[name])
        assert e_ours <= 2 * e_theirs + 2e-3, f"{what} {name}: error {e_ours:.3g} > 2 x PyTorch bf16's {e_theirs:.3g}"


@needs_gpu
@pytest.mark.parametrize("padding", ["none", "right", "left"])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_cuda_bf16_training_and_decoding(kind, padding):
    # transformers' "sdpa" gives NaN embedding gradients for left-padded rows in
    # bf16 on the GPU (rows that see no key); "eager" masks with finfo.min and
    # stays finite, so it is the yardstick there.
    base = "eager" if padding == "left" else MODELS[kind][3]
    ids, mask, labels = batch(padding, device="cuda", s=64, b=3)
    over = {} if kind == "llama_gqa" else dict(sliding_window=16)  # a window that bites at s = 64
    ref_model = tiny_model(kind, device="cuda", **over)  # float32: the yardstick
    model = tiny_model(kind, dtype=torch.bfloat16, device="cuda", **over)  # the same weights, rounded
    ref, ref_g = run(ref_model, base, ids, mask, labels)
    theirs, theirs_g = run(model, base, ids, mask, labels)
    ours, ours_g = run(model, "attn", ids, mask, labels)
    _within_twice_pytorch(ours, theirs, ref, f"{kind} {padding}")
    _within_twice_pytorch(ours_g, theirs_g, ref_g, f"{kind} {padding} grad")
    d_ref = decode(ref_model, base, ids, mask)
    _within_twice_pytorch({"decode": decode(model, "attn", ids, mask)}, {"decode": decode(model, base, ids, mask)},
                          {"decode": d_ref}, f"{kind} {padding}")


@needs_gpu
@pytest.mark.parametrize("padding", ["none", "right"])
@pytest.mark.parametrize("kind", ["llama_gqa", "gptoss_sinks"])
def test_cuda_decode_steps_at_head_dim_64(kind, padding):
    """Decode steps at a head dim flash_decode runs (64): one query token per
    sequence against the cache, with GQA (and gpt-oss's sinks), as close to
    float32 as PyTorch's own bf16 path."""
    base = MODELS[kind][3]
    over = dict(head_dim=64, sliding_window=16) if kind == "gptoss_sinks" else dict(head_dim=64)
    ids, mask, _ = batch(padding, device="cuda", s=40, b=3)
    ref_model = tiny_model(kind, device="cuda", **over)
    model = tiny_model(kind, dtype=torch.bfloat16, device="cuda", **over)
    d_ref = decode(ref_model, base, ids, mask, steps=6)
    _within_twice_pytorch({"decode": decode(model, "attn", ids, mask, steps=6)},
                          {"decode": decode(model, base, ids, mask, steps=6)}, {"decode": d_ref}, f"{kind} {padding}")
    shape_q, shape_kv = (3, 1, 4, 64), (3, 46, 2, 64)
    ex = attn.explain(shape_q, shape_kv, shape_kv, dtype="bfloat16", mask="causal_bottom_right", device="cuda")
    assert ex.chosen == "flash_decode", ex.why


# ---- static caches: a mask over the whole cache, and a captured decode step -------------


def _static_steps(model, impl, ids, nxt, capacity, left_pad=0):
    """Prefill into a StaticCache, then one token per step, with transformers'
    2-D mask spanning the whole cache (its columns past the tokens 0): every
    step's logits. left_pad: that many padding columns open row 1."""
    model.set_attn_implementation(impl)
    model.eval()
    b, p = ids.shape
    cache = transformers.StaticCache(config=model.config, max_cache_len=capacity)
    mask = torch.zeros(b, capacity, dtype=torch.long, device=ids.device)
    mask[:, :p] = 1
    mask[1, :left_pad] = 0
    pos = (mask[:, :p].cumsum(-1) - 1).clamp(min=0)
    logits = []
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True)
        logits.append(out.logits[:, -1])
        for t in range(nxt.shape[1]):
            mask[:, p + t] = 1
            pos = pos[:, -1:] + 1
            out = model(input_ids=nxt[:, t: t + 1], attention_mask=mask, position_ids=pos, past_key_values=cache,
                        use_cache=True)
            logits.append(out.logits[:, -1])
    return torch.stack(logits, dim=1)


@pytest.mark.parametrize("left_pad", [0, 3])
def test_static_cache_with_a_mask_over_the_whole_cache(left_pad):
    # The queries sit at the cache's fill point, not at the mask's last
    # columns (those are unfilled): attn must read where they are.
    model = tiny_model("llama_gqa")
    ids, _, _ = batch("none")
    nxt = torch.randint(3, VOCAB, (ids.shape[0], 4), generator=torch.Generator().manual_seed(5))
    got = _static_steps(model, "attn", ids, nxt, capacity=SEQ + 9, left_pad=left_pad)
    want = _static_steps(model, "sdpa", ids, nxt, capacity=SEQ + 9, left_pad=left_pad)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


@needs_gpu
def test_cuda_graph_replays_a_static_cache_decode_step():
    """A Llama-style decode step over a StaticCache (head dim 64, flash_decode)
    captured with torch.cuda.graph and replayed on new tokens: the logits of
    the same steps run eagerly; a replay whose mask is not right padding (a
    left-padded row) gives NaN, not another answer."""
    b, p, capacity, steps = 3, 40, 64, 5
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, VOCAB, (b, p), generator=g).cuda()
    nxt = torch.randint(3, VOCAB, (b, steps + 1), generator=g).cuda()
    model = tiny_model("llama_gqa", dtype=torch.bfloat16, device="cuda", head_dim=64)
    want = _static_steps(model, "attn", ids, nxt, capacity)  # eager, step by step
    assert torch.allclose(want.float(), _static_steps(model, "sdpa", ids, nxt, capacity).float(), atol=5e-2, rtol=5e-2)

    model.set_attn_implementation("attn")
    cache = transformers.StaticCache(config=model.config, max_cache_len=capacity)
    mask = torch.zeros(b, capacity, dtype=torch.long, device="cuda")
    mask[:, :p + 1] = 1
    tok, pos = nxt[:, :1].clone(), torch.full((b, 1), p, device="cuda")

    def step():
        return model(input_ids=tok, attention_mask=mask, position_ids=pos, past_key_values=cache,
                     use_cache=True).logits[:, -1]

    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask[:, :p], position_ids=torch.arange(p, device="cuda")[None].expand(b, p),
              past_key_values=cache, use_cache=True)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            first = step()  # the warm-up: token p, eagerly
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits = step()
    torch.testing.assert_close(first, want[:, 1], atol=1e-2, rtol=1e-2)
    for t in range(1, steps):
        tok.copy_(nxt[:, t: t + 1])
        pos.fill_(p + t)
        mask[:, p + t] = 1
        graph.replay()
        torch.testing.assert_close(logits, want[:, t + 1], atol=1e-2, rtol=1e-2, msg=lambda m: f"step {t}: {m}")
    mask[1, 0] = 0  # row 1 now left-padded: not what the capture holds
    tok.copy_(nxt[:, steps: steps + 1])
    pos.fill_(p + steps)
    mask[:, p + steps] = 1
    graph.replay()
    assert torch.isnan(logits).all()


@needs_gpu
def test_cuda_llama3_8b_shaped_teacher_forced_logits():
    """Llama-3-8B's attention and widths (h 32/8, d 128, hidden 4096, its
    vocabulary), two layers of random weights: teacher-forced logits of a
    prefill and decode steps through attn as close to float32 as "sdpa"'s
    own bf16 run."""
    cfg = transformers.LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=2,
                                   num_attention_heads=32, num_key_value_heads=8, head_dim=128, rope_theta=500000.0,
                                   max_position_embeddings=8192, initializer_range=0.02)
    torch.manual_seed(0)
    with torch.device("cuda"):
        ref_model = transformers.LlamaForCausalLM(cfg)
    model = copy.deepcopy(ref_model).to(dtype=torch.bfloat16)  # the same weights, rounded
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 128256, (2, 300), generator=g).cuda()
    mask = torch.ones_like(ids)
    d_ref = decode(ref_model, "sdpa", ids, mask, steps=6)
    _within_twice_pytorch({"decode": decode(model, "attn", ids, mask, steps=6)},
                          {"decode": decode(model, "sdpa", ids, mask, steps=6)}, {"decode": d_ref}, "llama-3-8b shape")


# ---- continuous batching ("paged|attn") --------------------------------------------------


def _generate_batch(model, impl, prompts, new, monkeypatch):
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    import transformers.generation.continuous_batching.cache as cb_cache
    if not torch.cuda.is_available():  # the cache sizes itself from the GPU's free memory; on the CPU, 1 GiB
        monkeypatch.setattr(cb_cache, "get_device_and_memory_breakdown",
                            lambda: (torch.device("cpu"), 1 << 30, 0, 0))
    model.set_attn_implementation(impl)
    gc = GenerationConfig(max_new_tokens=new, do_sample=False, eos_token_id=VOCAB + 1)  # no stop before `new`
    cfg = ContinuousBatchingConfig(block_size=16, num_blocks=32, max_batch_tokens=64)
    out = model.generate_batch(inputs=prompts, generation_config=gc, continuous_batching_config=cfg)
    return [out[k].generated_tokens for k in sorted(out, key=lambda r: int(r.split("_")[-1]))]


def test_continuous_batching_generates_as_sdpa(monkeypatch):
    # transformers' serving loop: requests of different lengths batched
    # together over its paged cache, prompts and one-token steps packed; attn
    # registers "paged|attn" for it. Greedy tokens as with "paged|sdpa" and as
    # generate() one request at a time.
    model = tiny_model("llama_gqa").eval()
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in (4, 9, 17, 1)]
    got = _generate_batch(model, "attn", prompts, 6, monkeypatch)
    assert got == _generate_batch(model, "sdpa", prompts, 6, monkeypatch)
    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        alone = [model.generate(torch.tensor([p]), max_new_tokens=6, do_sample=False, eos_token_id=VOCAB + 1)[0, len(p):]
                 .tolist() for p in prompts]
    assert got == alone


@needs_gpu
def test_cuda_continuous_batching_generates_as_sdpa(monkeypatch):
    # The same serving loop on the GPU in bf16 at head dim 64, so "paged|attn"
    # reads transformers' paged cache through attn's CUDA kernels: greedy
    # tokens as with "paged|sdpa" on the same bf16 weights.
    model = tiny_model("llama_gqa", dtype=torch.bfloat16, device="cuda", head_dim=64).eval()
    g = torch.Generator().manual_seed(12)
    prompts = [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in (5, 23, 40, 1)]
    got = _generate_batch(model, "attn", prompts, 8, monkeypatch)
    want = _generate_batch(model, "sdpa", prompts, 8, monkeypatch)
    assert [len(t) for t in got] == [8] * len(prompts)
    assert got == want


def test_paged_attn_outside_continuous_batching_says_why():
    model = tiny_model("llama_gqa")
    model.set_attn_implementation("paged|attn")
    ids, mask, _ = batch("none")
    with pytest.raises(ValueError, match="continuous batching"):
        model(input_ids=ids, attention_mask=mask)


@pytest.mark.parametrize("left_pad", [0, 3])
def test_capture_path_reads_right_padding_on_the_device(left_pad, monkeypatch):
    # The path a CUDA graph capture takes (no host reads: the lengths come
    # from the mask by tensor ops), run eagerly on the CPU: right padding (the
    # static cache's unfilled tail) gives sdpa's logits; a left-padded row,
    # which it cannot express, makes every output NaN rather than wrong.
    monkeypatch.setattr(attn_hf, "_capturing", lambda t: True)
    model = tiny_model("llama_gqa")
    ids, _, _ = batch("none")
    nxt = torch.randint(3, VOCAB, (ids.shape[0], 3), generator=torch.Generator().manual_seed(6))
    got = _static_steps(model, "attn", ids, nxt, capacity=SEQ + 6, left_pad=left_pad)
    if left_pad:
        assert torch.isnan(got).all()
    else:
        torch.testing.assert_close(got, _static_steps(model, "sdpa", ids, nxt, capacity=SEQ + 6), atol=2e-5, rtol=2e-5)
