"""Softmax sinks (softmax_type "off-by-one" and "learnable") and the max logit
through Python: attn.forward/backward on NumPy and PyTorch CPU tensors against
an eager PyTorch fp64 formula written here (autograd gives dq, dk, dv and
dsink), attn.torch.attention's autograd into the sink (eager and under
torch.compile), the errors, and on a GPU every backend that claims the call
against the CPU reference."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
import attn.torch as at  # noqa: E402


def eager(q, k, v, sink_logits, causal=False):
    """bshd attention with a sink logit per query head, in plain PyTorch:
    out, lse (including the sink) and the per-head max logit."""
    b, s_q, h, d = q.shape
    group = h // k.shape[2]
    kk = k.repeat_interleave(group, dim=2)
    vv = v.repeat_interleave(group, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, kk) / d**0.5
    if causal:
        keep = torch.ones(s_q, k.shape[1], dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    t = sink_logits.view(1, h, 1, 1).expand(b, h, s_q, 1).to(s.dtype)
    lse = torch.logsumexp(torch.cat([s, t], dim=-1), dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1))
    out = torch.einsum("bhij,bjhd->bihd", p, vv)
    return out, lse, s.amax(dim=(0, 2, 3))


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


def inputs(gen, b=2, s=7, h=4, h_kv=2, d=8, requires_grad=False):
    mk = lambda heads: torch.randn(b, s, heads, d, generator=gen, dtype=torch.float64)  # noqa: E731
    q, k, v = mk(h), mk(h_kv), mk(h_kv)
    sink = (torch.rand(h, generator=gen) * 2 - 0.5).float()
    if requires_grad:
        q, k, v, sink = (x.requires_grad_() for x in (q, k, v, sink))
    return q, k, v, sink


@pytest.mark.parametrize("softmax_type", ["off-by-one", "learnable"])
def test_forward_and_max_logit_match_the_formula(gen, softmax_type):
    q, k, v, sink = inputs(gen)
    logits = sink if softmax_type == "learnable" else torch.zeros_like(sink)
    kw = dict(sink=sink) if softmax_type == "learnable" else {}
    out, lse, max_logit = attn.forward(q, k, v, mask="causal", softmax_type=softmax_type, return_lse=True,
                                       return_max_logit=True, **kw)
    want_out, want_lse, want_max = eager(q, k, v, logits.double(), causal=True)
    torch.testing.assert_close(out, want_out, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(lse.double(), want_lse, atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(max_logit.double(), want_max, atol=1e-5, rtol=1e-6)
    # NumPy arrays take the same path.
    out_np = attn.forward(q.numpy(), k.numpy(), v.numpy(), mask="causal", softmax_type=softmax_type,
                          **{n: t.numpy() for n, t in kw.items()})
    np.testing.assert_allclose(out_np, want_out.numpy(), atol=1e-10)


def test_max_logit_alone_and_vanilla(gen):
    q, k, v, _ = inputs(gen)
    out, max_logit = attn.forward(q, k, v, return_max_logit=True)
    want_out, _, want_max = eager(q, k, v, torch.full((4,), float("-inf"), dtype=torch.float64))
    torch.testing.assert_close(out, want_out, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(max_logit.double(), want_max, atol=1e-5, rtol=1e-6)


def test_backward_returns_dsink_equal_to_autograd(gen):
    q, k, v, sink = inputs(gen, requires_grad=True)
    want_out, _, _ = eager(q, k, v, sink.double(), causal=True)
    dout = torch.randn(want_out.shape, generator=gen, dtype=torch.float64)
    want = torch.autograd.grad(want_out, (q, k, v, sink), dout)
    with torch.no_grad():
        out, lse = attn.forward(q, k, v, mask="causal", softmax_type="learnable", sink=sink, return_lse=True)
        dq, dk, dv, dsink = attn.backward(q, k, v, out, dout, lse, mask="causal", softmax_type="learnable",
                                          sink=sink)
    for name, got, w in zip(("dq", "dk", "dv", "dsink"), (dq, dk, dv, dsink), want):
        torch.testing.assert_close(got.double(), w.double(), atol=1e-5, rtol=1e-5, msg=name)
    assert dsink.dtype == torch.float32 and dsink.abs().max() > 1e-3


def test_attn_torch_attention_trains_the_sink(gen):
    q, k, v, sink = inputs(gen, requires_grad=True)
    out = at.attention(q, k, v, mask="causal", softmax_type="learnable", sink=sink)
    want_out, _, _ = eager(q, k, v, sink.double(), causal=True)
    dout = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    got = torch.autograd.grad(out, (q, k, v, sink), dout)
    want = torch.autograd.grad(want_out, (q, k, v, sink), dout)
    torch.testing.assert_close(out, want_out.detach(), atol=1e-10, rtol=1e-10)
    for name, g, w in zip(("dq", "dk", "dv", "dsink"), got, want):
        torch.testing.assert_close(g.double(), w.double(), atol=1e-5, rtol=1e-5, msg=name)


def test_attn_torch_attention_under_torch_compile(gen):
    q, k, v, sink = inputs(gen, requires_grad=True)
    f = torch.compile(lambda q, k, v, s: at.attention(q, k, v, softmax_type="learnable", sink=s),
                      backend="aot_eager", fullgraph=True)
    out = f(q, k, v, sink)
    got = torch.autograd.grad(out.sum(), (q, k, v, sink))
    ref_out = at.attention(q, k, v, softmax_type="learnable", sink=sink)
    want = torch.autograd.grad(ref_out.sum(), (q, k, v, sink))
    torch.testing.assert_close(out, ref_out)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_errors_name_the_sink(gen):
    q, k, v, sink = inputs(gen)
    with pytest.raises(ValueError, match="sink is missing"):
        attn.forward(q, k, v, softmax_type="learnable")
    with pytest.raises(ValueError, match="ignores it"):
        attn.forward(q, k, v, sink=sink)
    with pytest.raises(ValueError, match="softmax_type"):
        attn.forward(q, k, v, softmax_type="sinky")
    with pytest.raises(ValueError, match="wrong shape"):
        attn.forward(q, k, v, softmax_type="learnable", sink=sink[:2])


GPU = attn.cuda_device_count() > 0
GPU_BACKENDS = ["flash_sm90", "flash_sm80", "cudnn", "unfused"]


@pytest.mark.skipif(not GPU, reason="needs a CUDA device")
@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("softmax_type", ["off-by-one", "learnable"])
def test_gpu_backends_match_the_reference(backend, softmax_type):
    g = torch.Generator(device="cuda").manual_seed(5)
    mk = lambda h, s=200: torch.randn(2, s, h, 64, device="cuda", generator=g, dtype=torch.bfloat16)  # noqa: E731
    q, k, v = mk(8), mk(2), mk(2)
    sink = torch.rand(8, device="cuda", generator=g) * 3 - 1 if softmax_type == "learnable" else None
    kw = dict(mask="causal", window=(50, 0), softmax_type=softmax_type, sink=sink)
    shape_kw = {n: x for n, x in kw.items() if n != "sink"}
    for ex in (attn.explain(q, k, v, return_max_logit=True, **shape_kw), attn.explain(q, k, v, backward=True, **shape_kw)):
        if not ex[backend].ok:
            pytest.skip(f"{backend}: {'; '.join(ex[backend].reasons)}")
    out, lse, mx = attn.forward(q, k, v, backend=backend, return_lse=True, return_max_logit=True, **kw)
    cpu = lambda x: None if x is None else x.cpu().double()  # noqa: E731
    ro, rl, rm = attn.forward(cpu(q), cpu(k), cpu(v), return_lse=True, return_max_logit=True,
                              **dict(kw, sink=None if sink is None else sink.cpu()))
    torch.testing.assert_close(out.cpu().double(), ro, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse.cpu().double(), rl.double(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(mx.cpu().double(), rm.double(), atol=2e-2, rtol=2e-2)
    dout = torch.randn_like(out)
    grads = attn.backward(q, k, v, out, dout, lse, backend=backend, **kw)
    want = attn.backward(cpu(q), cpu(k), cpu(v), cpu(out), cpu(dout), lse.cpu(),
                         **dict(kw, sink=None if sink is None else sink.cpu()))
    for name, got, w in zip(("dq", "dk", "dv", "dsink"), grads, want):
        torch.testing.assert_close(got.cpu().double(), w.double(), atol=5e-2, rtol=5e-2, msg=f"{backend} {name}")


def test_dot_product_attention_owns_a_learnable_sink(gen):
    """TransformerEngine's softmax_type on the module: the sink logits are the
    parameter softmax_offset [heads], trained through dsink; the module's call
    equals the functional one with that sink."""
    dpa = at.DotProductAttention(4, 8, num_gqa_groups=2, qkv_format="bshd", attn_mask_type="causal",
                                 softmax_type="learnable")
    assert isinstance(dpa.softmax_offset, torch.nn.Parameter) and dpa.softmax_offset.shape == (4,)
    assert [n for n, _ in dpa.named_parameters()] == ["softmax_offset"]
    with torch.no_grad():
        dpa.softmax_offset.copy_(torch.tensor([0.5, -1.0, 2.0, 0.0]))
    q, k, v, _ = inputs(gen)
    out = dpa(q, k, v)
    want = at.attention(q, k, v, mask="causal", softmax_type="learnable", sink=dpa.softmax_offset.detach())
    torch.testing.assert_close(out, want.reshape(out.shape))
    out.square().sum().backward()
    assert dpa.softmax_offset.grad is not None and dpa.softmax_offset.grad.abs().max() > 1e-4
    assert at.DotProductAttention(4, 8, softmax_type="off-by-one").softmax_offset is None
    with pytest.raises(ValueError, match="softmax_type"):
        at.DotProductAttention(4, 8, softmax_type="sink")


def test_transformer_layer_passes_the_softmax_type_on():
    layer = at.TransformerLayer(32, 64, 4, num_gqa_groups=2, hidden_dropout=0.0, attention_dropout=0.0,
                                softmax_type="learnable", params_dtype=torch.float64, device="cpu")
    assert layer.core_attention.softmax_type == "learnable"
    x = torch.randn(6, 2, 32, dtype=torch.float64)
    layer(x).sum().backward()
    assert layer.core_attention.softmax_offset.grad is not None
