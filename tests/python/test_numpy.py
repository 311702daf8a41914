"""attn.forward / attn.backward on NumPy arrays (the CPU reference backend)
against the independent float64 NumPy attention of _reference.py."""

import numpy as np
import pytest

import attn
import _reference as ref
from conftest import assert_close

F64 = dict(atol=1e-10, rtol=1e-10)


def qkv(rng, shape_q, shape_k, shape_v, dtype=np.float64):
    return tuple(rng.standard_normal(s).astype(dtype) for s in (shape_q, shape_k, shape_v))


CASES = {
    "mha": dict(shapes=((2, 7, 4, 16), (2, 7, 4, 16), (2, 7, 4, 16)), kw={}),
    "gqa_causal_dqk_ne_dv_sq_ne_skv": dict(
        shapes=((2, 5, 6, 24), (2, 9, 2, 24), (2, 9, 2, 8)), kw=dict(mask="causal")),
    "bottom_right_window_softcap": dict(
        shapes=((1, 6, 2, 8), (1, 11, 1, 8), (1, 11, 1, 8)),
        kw=dict(mask="causal_bottom_right", window=(3, 0), softcap=5.0, softmax_scale=0.7)),
    "no_mask_window_alibi": dict(
        shapes=((2, 6, 4, 8), (2, 6, 4, 8), (2, 6, 4, 8)), kw=dict(window=(2, 1)), alibi=True),
    "bias_broadcast": dict(shapes=((2, 5, 2, 8), (2, 4, 2, 8), (2, 4, 2, 8)), kw={}, bias=(1, 2, 5, 4)),
    "dropout": dict(shapes=((2, 6, 2, 8), (2, 9, 2, 8), (2, 9, 2, 8)),
                    kw=dict(dropout_p=0.3, seed=(7 << 40) + 12345, offset=5)),
    "query_length_1": dict(shapes=((3, 1, 4, 8), (3, 10, 2, 8), (3, 10, 2, 8)), kw=dict(mask="causal_bottom_right")),
}


def run_case(rng, case, dtype=np.float64):
    q, k, v = qkv(rng, *case["shapes"], dtype=dtype)
    kw = dict(case["kw"])
    if case.get("alibi"):
        kw["alibi_slopes"] = rng.uniform(0.1, 1.0, q.shape[2]).astype(np.float32)
    if case.get("bias"):
        kw["bias"] = rng.standard_normal(case["bias"]).astype(dtype)
    return q, k, v, kw


def ref_kw(kw):
    return dict(mask=kw.get("mask", "no_mask"), window=kw.get("window", (-1, -1)), scale=kw.get("softmax_scale"),
                softcap=kw.get("softcap", 0.0), bias=kw.get("bias"), alibi=kw.get("alibi_slopes"),
                dropout_p=kw.get("dropout_p", 0.0), seed=kw.get("seed", 0), offset=kw.get("offset", 0))


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_matches_numpy_reference(rng, name):
    q, k, v, kw = run_case(rng, CASES[name])
    out, lse = attn.forward(q, k, v, return_lse=True, **kw)
    want_out, want_lse = ref.attention(q, k, v, **ref_kw(kw))
    assert isinstance(out, np.ndarray) and out.dtype == np.float64 and lse.dtype == np.float32
    assert_close(out, want_out, what="out", **F64)
    assert_close(lse, want_lse, atol=1e-5, rtol=1e-6, what="lse")  # lse is float32


@pytest.mark.parametrize("name", sorted(CASES))
def test_backward_matches_numpy_reference(rng, name):
    q, k, v, kw = run_case(rng, CASES[name])
    out, lse = attn.forward(q, k, v, return_lse=True, **kw)
    dout = rng.standard_normal(out.shape)
    dq, dk, dv = attn.backward(q, k, v, out, dout, lse, **kw)
    _, _, want_dq, want_dk, want_dv = ref.attention(q, k, v, dout=dout, **ref_kw(kw))
    # lse travels as float32 between the passes: gradients agree to its precision.
    for got, want, what in ((dq, want_dq, "dq"), (dk, want_dk, "dk"), (dv, want_dv, "dv")):
        assert_close(got, want, atol=1e-5, rtol=1e-5, what=what)


def test_float32_inputs(rng):
    q, k, v, kw = run_case(rng, CASES["gqa_causal_dqk_ne_dv_sq_ne_skv"], dtype=np.float32)
    out = attn.forward(q, k, v, **kw)
    assert out.dtype == np.float32
    assert_close(out, ref.attention(q, k, v, **ref_kw(kw))[0], atol=1e-5, rtol=1e-5)


def test_bias_gradient(rng):
    q, k, v, kw = run_case(rng, CASES["bias_broadcast"])
    out, lse = attn.forward(q, k, v, return_lse=True, **kw)
    dout = rng.standard_normal(out.shape)
    dq, dk, dv, dbias = attn.backward(q, k, v, out, dout, lse, return_dbias=True, **kw)
    assert dbias.shape == kw["bias"].shape
    # d(loss)/d(bias) by central differences on a few entries.
    bias = kw["bias"]
    for idx in [(0, 0, 0, 0), (0, 1, 4, 3), (0, 1, 2, 1)]:
        eps = 1e-6
        plus, minus = bias.copy(), bias.copy()
        plus[idx] += eps
        minus[idx] -= eps
        f = lambda b: np.sum(attn.forward(q, k, v, **{**kw, "bias": b}) * dout)  # noqa: E731
        assert abs((f(plus) - f(minus)) / (2 * eps) - dbias[idx]) < 1e-5


def test_thd_with_empty_sequence_matches_reference(rng):
    cu_q = np.array([0, 3, 3, 8], dtype=np.int32)
    cu_kv = np.array([0, 4, 6, 13], dtype=np.int32)
    q, k, v = qkv(rng, (8, 4, 8), (13, 2, 8), (13, 2, 16))
    kw = dict(qkv_format="thd", mask="padding_causal_bottom_right", window=(2, 0), cu_seqlens_q=cu_q,
              cu_seqlens_kv=cu_kv)
    out, lse = attn.forward(q, k, v, return_lse=True, **kw)
    dout = rng.standard_normal(out.shape)
    dq, dk, dv = attn.backward(q, k, v, out, dout, lse, **kw)
    want = ref.attention(q, k, v, fmt="thd", mask=kw["mask"], window=(2, 0), cu_q=cu_q, cu_kv=cu_kv, dout=dout)
    assert lse.shape == (4, 8)
    assert_close(out, want[0], what="out", **F64)
    assert_close(lse, want[1], atol=1e-5, rtol=1e-6, what="lse")
    for got, w, what in zip((dq, dk, dv), want[2:], ("dq", "dk", "dv")):
        assert_close(got, w, atol=1e-5, rtol=1e-5, what=what)


def test_padded_bshd_with_cu_seqlens(rng):
    q, k, v = qkv(rng, (3, 6, 2, 8), (3, 7, 2, 8), (3, 7, 2, 8))
    cu_q = np.array([0, 6, 8, 8], dtype=np.int32)  # lengths 6, 2, 0
    cu_kv = np.array([0, 7, 10, 11], dtype=np.int32)  # lengths 7, 3, 1
    out, lse = attn.forward(q, k, v, mask="padding_causal", cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, return_lse=True)
    want_out, want_lse = ref.attention(q, k, v, mask="padding_causal", cu_q=cu_q, cu_kv=cu_kv)
    assert_close(out, want_out, what="out", **F64)
    assert_close(lse, want_lse, atol=1e-5, rtol=1e-6, what="lse")
    assert np.all(out[1, 2:] == 0) and np.all(np.isneginf(lse[1, :, 2:]))  # padded rows: 0 and -inf


def test_three_formats_agree(rng):
    b, s, h, d = 3, 5, 2, 8
    q, k, v = qkv(rng, (b, s, h, d), (b, s, h, d), (b, s, h, d))
    kw = dict(mask="causal", window=(2, 0))
    out_bshd, lse_bshd = attn.forward(q, k, v, return_lse=True, **kw)
    # sbhd as strided views of the same memory: no copy, strides honoured.
    t = lambda x: x.transpose(1, 0, 2, 3)  # noqa: E731
    out_sbhd, lse_sbhd = attn.forward(t(q), t(k), t(v), qkv_format="sbhd", return_lse=True, **kw)
    cu = np.arange(0, (b + 1) * s, s, dtype=np.int32)
    p = lambda x: x.reshape(b * s, h, d)  # noqa: E731
    out_thd, lse_thd = attn.forward(p(q), p(k), p(v), qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu,
                                    return_lse=True, **kw)
    assert out_sbhd.shape == (s, b, h, d) and out_thd.shape == (b * s, h, d)
    np.testing.assert_array_equal(t(out_sbhd), out_bshd)
    np.testing.assert_array_equal(out_thd.reshape(b, s, h, d), out_bshd)
    np.testing.assert_array_equal(lse_sbhd, lse_bshd)
    np.testing.assert_array_equal(lse_thd.reshape(h, b, s).transpose(1, 0, 2), lse_bshd)


def test_packed_qkv_views_and_preallocated_out(rng):
    b, s, h, d = 2, 6, 3, 8
    qkv_packed = rng.standard_normal((b, s, 3, h, d))
    q, k, v = (qkv_packed[:, :, i] for i in range(3))  # views with a token stride of 3*h*d
    assert not q.flags.c_contiguous
    out = np.full((b, s, h, d), np.nan)
    lse = np.full((b, h, s), np.nan, dtype=np.float32)
    got_out, got_lse = attn.forward(q, k, v, mask="causal", out=out, lse=lse, return_lse=True)
    assert got_out is out and got_lse is lse  # written in place, no copies
    assert_close(out, ref.attention(q, k, v, mask="causal")[0], what="out", **F64)


def test_read_only_inputs(rng):
    q, k, v = qkv(rng, (1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8))
    for x in (q, k, v):
        x.setflags(write=False)
    out = attn.forward(q, k, v)
    assert_close(out, ref.attention(q, k, v)[0], what="out", **F64)


def test_forced_reference_backend_and_env(rng, monkeypatch):
    q, k, v = qkv(rng, (1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8))
    a = attn.forward(q, k, v, backend="reference")
    monkeypatch.setenv("ATTN_BACKEND", "reference")
    b = attn.forward(q, k, v)
    np.testing.assert_array_equal(a, b)


def test_zero_sized_problem(rng):
    q, k, v = qkv(rng, (0, 4, 2, 8), (0, 4, 2, 8), (0, 4, 2, 8))
    out, lse = attn.forward(q, k, v, return_lse=True)
    assert out.shape == (0, 4, 2, 8) and lse.shape == (0, 2, 4)
