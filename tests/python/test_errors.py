"""Validation errors surface as ValueError / TypeError with the core's message;
backend problems as attn.BackendUnavailableError (a RuntimeError)."""

import numpy as np
import pytest

import attn


def arrays(*shapes, dtype=np.float32):
    return [np.zeros(s, dtype=dtype) for s in shapes]


def test_hidden_dimension_not_split_is_a_value_error():
    q, k, v = arrays((2, 8, 64), (2, 8, 64), (2, 8, 64))
    with pytest.raises(ValueError, match="split the hidden dimension into heads first") as e:
        attn.forward(q, k, v, qkv_format="bshd")
    msg = str(e.value)
    assert msg.startswith("attn: q has rank 3 but qkv_format=bshd needs rank 4")
    assert "[2, 8, 64]" in msg
    assert e.value.kind == "value" and e.value.got == "[2, 8, 64]" and "split the hidden" in e.value.fix


def test_bad_dtypes_are_type_errors():
    q, k, v = arrays((1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8), dtype=np.int32)
    with pytest.raises(TypeError, match="q has an unsupported dtype"):
        attn.forward(q, k, v)
    q, k, v = arrays((1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8))
    with pytest.raises(TypeError, match="k's dtype differs from q's"):
        attn.forward(q, k.astype(np.float64), v)
    with pytest.raises(TypeError, match="q has a dtype attn does not take"):
        attn.forward(q.astype(np.complex64), k, v)
    cu = np.array([0, 4], dtype=np.int64)
    with pytest.raises(TypeError, match="cu_seqlens_q has the wrong dtype"):
        attn.forward(q[0], k[0], v[0], qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu)


def test_not_an_array_is_a_type_error():
    with pytest.raises(TypeError, match="q must be an array"):
        attn.forward([[1.0]], np.zeros(1), np.zeros(1))


@pytest.mark.parametrize("kw, match", [
    (dict(mask="causl"), "unknown mask type"),
    (dict(qkv_format="bsd"), "unknown qkv_format"),
    (dict(dropout_p=1.0), r"dropout probability outside \[0, 1\)"),
    (dict(offset=1 << 33), "offset does not fit"),
    (dict(window=(-3, 0)), "window left is below -1"),
    (dict(backend="nope"), "names an unknown backend"),
    (dict(seed=-1), "seed must be an integer"),
])
def test_bad_values_are_value_errors(kw, match):
    q, k, v = arrays((1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8))
    with pytest.raises(ValueError, match=match):
        attn.forward(q, k, v, **kw)


def test_bad_window_type():
    q, k, v = arrays((1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8))
    with pytest.raises(TypeError, match="window must be a pair"):
        attn.forward(q, k, v, window=3)


def test_shape_mismatches():
    q, k, v = arrays((1, 4, 3, 8), (1, 4, 2, 8), (1, 4, 2, 8))
    with pytest.raises(ValueError, match="h_q is not a multiple of h_kv"):
        attn.forward(q, k, v)
    q, k, v = arrays((6, 2, 8), (6, 2, 8), (6, 2, 8))
    with pytest.raises(ValueError, match="qkv_format=thd needs cu_seqlens_q and cu_seqlens_kv"):
        attn.forward(q, k, v, qkv_format="thd")
    q, k, v = arrays((1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8))
    with pytest.raises(ValueError, match="out has the wrong shape"):
        attn.forward(q, k, v, out=np.zeros((1, 4, 2, 9), np.float32))
    with pytest.raises(ValueError, match="last dimension is not contiguous"):
        attn.forward(q, k, np.zeros((1, 4, 2, 16), np.float32)[..., ::2])


def test_backward_needs_lse():
    q, k, v = arrays((1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8))
    with pytest.raises(ValueError, match="lse has the wrong shape"):
        attn.backward(q, k, v, q, q, np.zeros((1, 2), np.float32))
    with pytest.raises(ValueError, match="needs the forward's bias"):
        attn.backward(q, k, v, q, q, np.zeros((1, 2, 4), np.float32), return_dbias=True)


def test_forcing_a_backend_that_cannot_run_the_call():
    q, k, v = arrays((1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8))
    assert issubclass(attn.BackendUnavailableError, RuntimeError)
    with pytest.raises(attn.BackendUnavailableError, match="the forced backend unfused cannot run this call") as e:
        attn.forward(q, k, v, backend="unfused")
    # The reason (host arrays), and every backend's verdict ("not part of this
    # build" for any this build lacks).
    assert "runs on CUDA tensors" in str(e.value) and e.value.kind == "unsupported"
    assert all(name in str(e.value) for name in ("flash_sm90", "flash_sm80", "unfused", "reference"))


def test_disabling_every_backend(monkeypatch):
    q, k, v = arrays((1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8))
    with pytest.raises(attn.BackendUnavailableError, match="no attention backend can run this call") as e:
        attn.forward(q, k, v, disable=["reference"])
    assert "disabled by ATTN_DISABLE" in str(e.value)
    monkeypatch.setenv("ATTN_DISABLE", "reference")
    with pytest.raises(attn.BackendUnavailableError):
        attn.forward(q, k, v)


def test_a_list_where_an_array_belongs_is_an_attn_type_error():
    q, k, v = arrays((6, 2, 8), (6, 2, 8), (6, 2, 8))
    # Not nanobind's signature dump: attn's message, naming the argument.
    with pytest.raises(TypeError, match="attn: cu_seqlens_q must be an array") as e:
        attn.forward(q, k, v, qkv_format="thd", cu_seqlens_q=[0, 6], cu_seqlens_kv=np.array([0, 6], np.int32))
    assert "incompatible function arguments" not in str(e.value)
    q4, k4, v4 = arrays((1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8))
    with pytest.raises(TypeError, match="attn: out must be an array"):
        attn.forward(q4, k4, v4, out=[0.0])
    out = attn.forward(q4, k4, v4)
    lse = np.zeros((1, 2, 4), np.float32)
    with pytest.raises(TypeError, match="attn: dq must be an array"):
        attn.backward(q4, k4, v4, out, out, lse, dq=(1, 2))


def test_read_only_outputs_are_refused_before_any_write():
    q, k, v = arrays((1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8))
    out = np.full((1, 4, 2, 8), 7.0, np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="attn: out is read-only") as e:
        attn.forward(q, k, v, out=out)
    assert "numpy.array(out)" in str(e.value)
    assert (out == 7.0).all()  # untouched
    dq = np.zeros_like(q)
    dq.flags.writeable = False
    o = attn.forward(q, k, v)
    with pytest.raises(ValueError, match="attn: dq is read-only"):
        attn.backward(q, k, v, o, o, np.zeros((1, 2, 4), np.float32), dq=dq)


@pytest.mark.parametrize("kw, match", [
    (dict(window=(2.7, 0)), "window's left side must be an integer, got 2.7"),
    (dict(window=(3, 0.5)), "window's right side must be an integer, got 0.5"),
    (dict(max_seqlen_q=3.5), "max_seqlen must be an integer, got 3.5"),
])
def test_fractional_integers_are_refused_not_truncated(kw, match):
    q, k, v = arrays((1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8))
    with pytest.raises(TypeError, match=match):
        attn.forward(q, k, v, **kw)


def test_numpy_and_index_integers_are_accepted():
    q, k, v = arrays((1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8))
    a = attn.forward(q + 1, k + 1, v + np.arange(8, dtype=np.float32), window=(np.int64(1), np.int32(0)))
    b = attn.forward(q + 1, k + 1, v + np.arange(8, dtype=np.float32), window=(1, 0))
    assert np.array_equal(a, b)
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, "):
        attn.forward(q, k, v, seed=1.5)


def test_dtype_fixes_speak_numpy_to_numpy_users():
    q, k, v = arrays((6, 2, 8), (6, 2, 8), (6, 2, 8))
    cu = np.array([0, 6], dtype=np.int64)
    with pytest.raises(TypeError, match="cu_seqlens_q has the wrong dtype") as e:
        attn.forward(q, k, v, qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu)
    assert e.value.fix == "convert it: cu_seqlens_q.astype(numpy.int32)"
    assert "torch" not in str(e.value) and "fix:      convert it: cu_seqlens_q.astype(numpy.int32)" in str(e.value)
    qi = q.astype(np.int32)
    with pytest.raises(TypeError, match="q has an unsupported dtype") as e:
        attn.forward(qi, qi, qi, qkv_format="thd", cu_seqlens_q=cu.astype(np.int32), cu_seqlens_kv=cu.astype(np.int32))
    assert e.value.fix.startswith("convert it: q.astype(numpy.float32)") and "NumPy has no bfloat16" in e.value.fix
    with pytest.raises(TypeError, match="k's dtype differs from q's") as e:
        attn.forward(q, k.astype(np.float64), v, qkv_format="thd", cu_seqlens_q=cu.astype(np.int32),
                     cu_seqlens_kv=cu.astype(np.int32))
    assert e.value.fix == "convert it: k.astype(numpy.float32)"


@pytest.mark.parametrize("framework, fix, want", [
    ("torch", "convert cu_seqlens_q to int32", "convert it: cu_seqlens_q.to(torch.int32)"),
    ("torch", "convert q to bfloat16 or float16", "convert it: q.to(torch.bfloat16) or q.to(torch.float16)"),
    ("jax", "convert attn_mask to bool", "convert it: attn_mask.astype(jax.numpy.bool)"),
    ("cupy", "convert bias to float16", "convert it: bias.astype(cupy.float16)"),
    ("dlpack", "convert bias to float16", None),
    ("torch", "pass one slope per query head", None),
])
def test_framework_fix_words(framework, fix, want):
    from attn import _arrays
    assert _arrays.framework_fix(framework, fix) == want
