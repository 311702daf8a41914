"""attn.torch on CPU tensors: values, autograd (gradcheck in float64), the
torch.library custom op under torch.compile, dropout seeding, and the
TransformerEngine-style DotProductAttention module."""

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
import attn.torch as at  # noqa: E402
import _reference as ref  # noqa: E402
from conftest import assert_close  # noqa: E402


@pytest.fixture
def gen():
    g = torch.Generator().manual_seed(int(torch.randint(0, 1 << 31, ()).item()))
    return g


def randn(gen, *shape, dtype=torch.float64, requires_grad=False):
    return torch.randn(*shape, generator=gen, dtype=dtype).requires_grad_(requires_grad)


def test_functional_api_takes_torch_tensors(gen):
    q, k, v = randn(gen, 2, 5, 4, 8), randn(gen, 2, 7, 2, 8), randn(gen, 2, 7, 2, 16)
    out, lse = attn.forward(q, k, v, mask="causal", return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64 and lse.dtype == torch.float32
    want_out, want_lse = ref.attention(q.numpy(), k.numpy(), v.numpy(), mask="causal")
    assert_close(out.numpy(), want_out, atol=1e-10, rtol=1e-10)
    assert_close(lse.numpy(), want_lse, atol=1e-5, rtol=1e-6)
    dq, dk, dv = attn.backward(q, k, v, out, torch.ones_like(out), lse, mask="causal")
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape


def test_explain_takes_torch_tensors_and_the_same_tensors_run(gen):
    # explain() looks at its arguments more than once (a consumed DLPack
    # capsule would fail the second look); the forward then runs them as given.
    q = randn(gen, 1, 4, 2, 8, requires_grad=True)
    kv = randn(gen, 1, 6, 1, 8)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    ex = attn.explain(q, kv, kv, mask="causal_bottom_right", bias=randn(gen, 1, 2, 4, 6))
    assert ex.chosen == "reference" and ex["reference"].ok
    ex = attn.explain(q[0], kv[0], kv[0], qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=torch.tensor([0, 6], dtype=torch.int32))
    assert ex.chosen == "reference", str(ex)
    out = attn.forward(q, kv, kv, mask="causal_bottom_right")
    want, _ = ref.attention(q.detach().numpy(), kv.numpy(), kv.numpy(), mask="causal_bottom_right")
    assert_close(out.numpy(), want, atol=1e-10, rtol=1e-10)


def test_matches_torch_sdpa(gen):
    q, k, v = randn(gen, 2, 6, 4, 8), randn(gen, 2, 6, 4, 8), randn(gen, 2, 6, 4, 8)
    out = at.attention(q, k, v, mask="causal")
    t = lambda x: x.transpose(1, 2)  # noqa: E731
    want = torch.nn.functional.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=True).transpose(1, 2)
    torch.testing.assert_close(out, want, atol=1e-12, rtol=1e-12)


def test_requires_grad_inputs_pass_without_copies(gen):
    q = randn(gen, 1, 4, 2, 8, requires_grad=True)
    out = torch.empty(1, 4, 2, 8, dtype=torch.float64)
    got = attn.forward(q, q, q, out=out)
    assert got is out


GRADCHECK_CASES = {
    "gqa_causal_dqk_ne_dv": dict(shapes=((1, 3, 4, 4), (1, 5, 2, 4), (1, 5, 2, 3)), kw=dict(mask="causal")),
    "window_softcap_bottom_right": dict(shapes=((2, 3, 2, 4), (2, 4, 1, 4), (2, 4, 1, 4)),
                                        kw=dict(mask="causal_bottom_right", window=(1, 0), softcap=2.0)),
    "sbhd_alibi": dict(shapes=((3, 2, 2, 4), (3, 2, 2, 4), (3, 2, 2, 4)),
                       kw=dict(qkv_format="sbhd", alibi_slopes=torch.tensor([0.5, 0.25]))),
    "dropout_fixed_seed": dict(shapes=((1, 3, 2, 4), (1, 4, 2, 4), (1, 4, 2, 4)),
                               kw=dict(dropout_p=0.25, seed=1234567, offset=3)),
}


@pytest.mark.parametrize("name", sorted(GRADCHECK_CASES))
def test_gradcheck_float64(gen, name):
    case = GRADCHECK_CASES[name]
    inputs = tuple(randn(gen, *s, requires_grad=True) for s in case["shapes"])
    # lse travels as float32 between the passes; gradients are exact to that.
    assert torch.autograd.gradcheck(lambda q, k, v: at.attention(q, k, v, **case["kw"]), inputs,
                                    atol=1e-5, rtol=1e-4)


def test_gradcheck_thd_with_empty_sequence(gen):
    cu_q = torch.tensor([0, 2, 2, 5], dtype=torch.int32)
    cu_kv = torch.tensor([0, 3, 4, 7], dtype=torch.int32)
    inputs = (randn(gen, 5, 2, 4, requires_grad=True), randn(gen, 7, 1, 4, requires_grad=True),
              randn(gen, 7, 1, 4, requires_grad=True))
    f = lambda q, k, v: at.attention(q, k, v, qkv_format="thd", mask="padding_causal",  # noqa: E731
                                     cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv)
    assert torch.autograd.gradcheck(f, inputs, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "custom_op"])
def test_check_seqlens_off_reaches_both_passes(gen, compiled):
    cu_q = torch.tensor([0, 2, 2, 5], dtype=torch.int32)
    cu_kv = torch.tensor([0, 3, 4, 7], dtype=torch.int32)
    q, k, v = randn(gen, 5, 2, 4), randn(gen, 7, 1, 4), randn(gen, 7, 1, 4)

    def run(**kw):
        args = [t.clone().requires_grad_() for t in (q, k, v)]
        f = lambda q, k, v: at.attention(q, k, v, qkv_format="thd", mask="padding_causal",  # noqa: E731
                                         cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, **kw)
        if compiled:
            torch._dynamo.reset()
            f = torch.compile(f, backend="aot_eager", fullgraph=True)
        out = f(*args)
        out.sum().backward()
        return [out] + [a.grad for a in args]

    checked = run()
    unchecked = run(check_seqlens=False, max_seqlen_q=3, max_seqlen_kv=3)
    for a, b in zip(checked, unchecked):
        torch.testing.assert_close(a, b)
    # Off, attn cannot derive the longest sequence: the flag really arrived.
    with pytest.raises(ValueError, match="max_seqlen_q is needed when check_seqlens is off"):
        run(check_seqlens=False)


def test_gradcheck_bias(gen):
    q, k, v = (randn(gen, 1, 3, 2, 4, requires_grad=True) for _ in range(3))
    bias = randn(gen, 1, 2, 3, 3, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, k, v, b: at.attention(q, k, v, bias=b), (q, k, v, bias),
                                    atol=1e-5, rtol=1e-4)


def test_lse_output_has_no_gradient(gen):
    q = randn(gen, 1, 3, 2, 4, requires_grad=True)
    out, lse = at.attention(q, q, q, return_lse=True)
    assert out.requires_grad and not lse.requires_grad


def test_inference_call_with_and_without_lse_agrees(gen):
    # Without autograd the forward runs alone, and writes no lse unless asked.
    q, k, v = (randn(gen, 2, 5, 4, 8) for _ in range(3))
    with torch.no_grad():
        out = at.attention(q, k, v, mask="causal")
        out2, lse = at.attention(q, k, v, mask="causal", return_lse=True)
    want, want_lse = attn.forward(q, k, v, mask="causal", return_lse=True)
    assert torch.equal(out, want) and torch.equal(out2, want) and torch.equal(lse, want_lse)


def test_options_cache_takes_unhashable_and_repeated_keywords():
    from attn import _keywords
    a = _keywords.options("bshd", "causal", (3, 0), 0.5, 0.0, None, None, 0.0, 0, 0, False, True)
    assert _keywords.options("bshd", "causal", (3, 0), 0.5, 0.0, None, None, 0.0, 0, 0, False, True) is a
    b = _keywords.options("bshd", "causal", [3, 0], 0.5, 0.0, None, None, 0.0, 0, 0, False, True)  # a list: built
    assert b is not a and b.window == a.window


def test_dropout_seed_comes_from_torch_default_generator(gen):
    q, k, v = (randn(gen, 1, 6, 2, 8) for _ in range(3))
    torch.manual_seed(1234)
    a = at.attention(q, k, v, dropout_p=0.5)
    b = at.attention(q, k, v, dropout_p=0.5)
    assert not torch.equal(a, b)  # a fresh seed per call
    torch.manual_seed(1234)
    assert torch.equal(at.attention(q, k, v, dropout_p=0.5), a)  # reproducible from torch.manual_seed
    # The seed is the 64 bits of two 32-bit draws from the default generator, offset 0.
    torch.manual_seed(1234)
    lo, hi = torch.randint(0, 1 << 32, (2,), dtype=torch.int64).tolist()
    want = attn.forward(q, k, v, dropout_p=0.5, seed=lo | (hi << 32), offset=0)
    assert torch.equal(a, want)


def test_dropout_backward_reuses_the_forward_seed(gen):
    q, k, v = (randn(gen, 1, 4, 2, 8, requires_grad=True) for _ in range(3))
    torch.manual_seed(99)
    out = at.attention(q, k, v, dropout_p=0.4)
    dout = torch.randn_like(out)
    out.backward(dout)
    torch.manual_seed(99)
    lo, hi = torch.randint(0, 1 << 32, (2,), dtype=torch.int64).tolist()
    seed = lo | (hi << 32)
    qd, kd, vd = q.detach(), k.detach(), v.detach()
    o, lse = attn.forward(qd, kd, vd, dropout_p=0.4, seed=seed, return_lse=True)
    dq, dk, dv = attn.backward(qd, kd, vd, o, dout, lse, dropout_p=0.4, seed=seed)
    torch.testing.assert_close(q.grad, dq)
    torch.testing.assert_close(k.grad, dk)
    torch.testing.assert_close(v.grad, dv)


def _compile_and_check(backend, gen):
    graphs = []

    def recording_backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        if backend == "eager":
            return gm.forward
        from torch._dynamo.backends.registry import lookup_backend
        return lookup_backend(backend)(gm, example_inputs)

    def f(q, k, v):
        return at.attention(q, k, v, mask="causal", dropout_p=0.1, seed=5).sin().sum()

    torch._dynamo.reset()
    compiled = torch.compile(f, backend=recording_backend, fullgraph=True)  # fullgraph: no graph breaks
    args = [randn(gen, 2, 5, 4, 8, dtype=torch.float32, requires_grad=True) for _ in range(3)]
    y = compiled(*args)
    y.backward()
    grads = [a.grad.clone() for a in args]
    for a in args:
        a.grad = None
    f(*args).backward()
    torch.testing.assert_close(y, f(*args))
    for g, a in zip(grads, args):
        torch.testing.assert_close(g, a.grad)
    assert any("attn.forward" in g for g in graphs), graphs  # the custom op sits opaque in the graph


def test_torch_compile_aot_eager(gen):
    _compile_and_check("aot_eager", gen)


@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                    reason="inductor needs a C++ compiler on the CPU")
def test_torch_compile_inductor(gen):
    _compile_and_check("inductor", gen)


def test_compiled_dropout_draws_its_seed_in_the_graph(gen):
    """seed=None under torch.compile: the seed is drawn in the graph (no graph
    break, fullgraph), fresh each run, and the backward replays the forward's."""
    torch._dynamo.reset()
    f = torch.compile(lambda q, k, v: at.attention(q, k, v, mask="causal", dropout_p=0.3),
                      backend="aot_eager", fullgraph=True)
    q, k = (randn(gen, 2, 6, 2, 8, requires_grad=True) for _ in range(2))
    v = torch.ones(2, 6, 2, 8, dtype=torch.float64, requires_grad=True)
    first, second = f(q, k, v), f(q, k, v)
    assert not torch.equal(first, second), "two compiled calls dropped the same elements"
    # With v all ones, out_i = sum_j p_ij z_ij, and with dout all ones
    # dv_j = sum_i p_ij z_ij: the backward's dropout mask is the forward's
    # exactly when sum_j dv_j = sum_i out_i for every (batch, head).
    (dv,) = torch.autograd.grad(second.sum(), (v,))
    torch.testing.assert_close(dv.sum(dim=1), second.detach().sum(dim=1))


def test_errors_pass_through_the_custom_op(gen):
    q = randn(gen, 2, 8, 64)
    with pytest.raises(ValueError, match="split the hidden dimension into heads first"):
        at.attention(q, q, q)


# ---- DotProductAttention ---------------------------------------------------------


def test_dot_product_attention_sbhd(gen):
    s, b, h, g, d = 6, 2, 4, 2, 8
    dpa = at.DotProductAttention(h, d, num_gqa_groups=g)  # TE's defaults: sbhd, causal
    q = randn(gen, s, b, h, d, requires_grad=True)
    k, v = randn(gen, s, b, g, d, requires_grad=True), randn(gen, s, b, g, d, requires_grad=True)
    out = dpa(q, k, v)
    assert out.shape == (s, b, h * d)  # TE's convention: heads merged
    want = attn.forward(q.detach(), k.detach(), v.detach(), qkv_format="sbhd", mask="causal")
    torch.testing.assert_close(out, want.reshape(s, b, h * d))
    out.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape


def test_dot_product_attention_bshd_window_and_kv_channels_pair(gen):
    b, s, h, dqk, dv = 2, 7, 2, 8, 4
    dpa = at.DotProductAttention(h, (dqk, dv), qkv_format="bshd", attn_mask_type="no_mask", window_size=(2, 1))
    q, k, v = randn(gen, b, s, h, dqk), randn(gen, b, s, h, dqk), randn(gen, b, s, h, dv)
    out = dpa(q, k, v)
    assert out.shape == (b, s, h * dv)
    want = ref.attention(q.numpy(), k.numpy(), v.numpy(), window=(2, 1))[0]
    assert_close(out.numpy(), want.reshape(b, s, h * dv), atol=1e-10, rtol=1e-10)


def test_dot_product_attention_thd(gen):
    cu = torch.tensor([0, 3, 3, 8], dtype=torch.int32)
    dpa = at.DotProductAttention(4, 8, num_gqa_groups=1, qkv_format="thd", attn_mask_type="padding_causal")
    q, k, v = randn(gen, 8, 4, 8), randn(gen, 8, 1, 8), randn(gen, 8, 1, 8)
    out = dpa(q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu)  # max_seqlen_* None: derived
    assert out.shape == (8, 32)
    want = ref.attention(q.numpy(), k.numpy(), v.numpy(), fmt="thd", mask="padding_causal", cu_q=cu, cu_kv=cu)[0]
    assert_close(out.numpy(), want.reshape(8, 32), atol=1e-10, rtol=1e-10)


def test_dot_product_attention_padding_mask_from_attention_mask(gen):
    b, s, h, d = 2, 5, 2, 8
    dpa = at.DotProductAttention(h, d, qkv_format="bshd", attn_mask_type="padding,causal")
    q, k, v = (randn(gen, b, s, h, d) for _ in range(3))
    lengths = [5, 3]
    pad = torch.tensor([[i >= n for i in range(s)] for n in lengths]).view(b, 1, 1, s)  # True = padded (TE)
    out = dpa(q, k, v, attention_mask=pad)
    cu = np.array([0, 5, 8], dtype=np.int32)
    want = ref.attention(q.numpy(), k.numpy(), v.numpy(), mask="padding_causal", cu_q=cu, cu_kv=cu)[0]
    assert_close(out.numpy(), want.reshape(b, s, h * d), atol=1e-10, rtol=1e-10)


def test_dot_product_attention_dropout_only_in_training(gen):
    dpa = at.DotProductAttention(2, 8, attention_dropout=0.5)
    q, k, v = (randn(gen, 4, 1, 2, 8) for _ in range(3))
    dpa.train()
    assert not torch.equal(dpa(q, k, v), dpa(q, k, v))
    dpa.eval()
    assert torch.equal(dpa(q, k, v), dpa(q, k, v))


def test_dot_product_attention_checks_heads(gen):
    dpa = at.DotProductAttention(4, 8)
    q = randn(gen, 3, 1, 2, 8)
    with pytest.raises(ValueError, match="4 heads of size 8"):
        dpa(q, q, q)
    hidden = randn(gen, 3, 1, 32)
    with pytest.raises(ValueError, match="split the hidden dimension into heads first"):
        dpa(hidden, hidden, hidden)
    with pytest.raises(ValueError, match="not a multiple of num_gqa_groups"):
        at.DotProductAttention(4, 8, num_gqa_groups=3)


def test_alibi_slopes():
    s = at.alibi_slopes(8)
    torch.testing.assert_close(s, torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    assert at.alibi_slopes(6).shape == (6,)
