"""CUDA tensors from PyTorch and CuPy against torch's SDPA (or the NumPy
reference) in float64. Skipped without a CUDA device, and while this build has
no GPU backend (then CUDA tensors get attn's "no backend" error, checked by the
last test)."""

import numpy as np
import pytest

import attn
import _reference as ref
from conftest import assert_close

HAS_CUDA = attn.cuda_device_count() > 0
GPU_BACKENDS = [b.name for b in attn.backends(detail=True) if b.available and b.device == "cuda"]

_WHY_NOT = ("no CUDA device" if not HAS_CUDA else
            "" if GPU_BACKENDS else f"no GPU backend in this build: attn.backends() offers only {attn.backends()}")
needs_gpu_backend = pytest.mark.skipif(bool(_WHY_NOT), reason=_WHY_NOT or "a GPU backend runs here")

# DESIGN.md's accuracy bars: (atol = rtol for out, for gradients, relative Frobenius error).
TOL = {"float32": (1e-4, 1e-4, 1e-5), "bfloat16": (2e-2, 5e-2, 1e-2), "float16": (1e-2, 2.5e-2, 5e-3)}

CASES = {
    "gqa_causal": dict(shapes=((2, 128, 8, 64), (2, 128, 2, 64), (2, 128, 2, 64)), kw=dict(mask="causal")),
    "dqk192_dv128_cross": dict(shapes=((1, 77, 4, 192), (1, 300, 4, 192), (1, 300, 4, 128)), kw={}),
    "window_bottom_right": dict(shapes=((2, 64, 4, 128), (2, 200, 4, 128), (2, 200, 4, 128)),
                                kw=dict(mask="causal_bottom_right", window=(31, 0))),
    "query_length_1": dict(shapes=((4, 1, 8, 64), (4, 513, 1, 64), (4, 513, 1, 64)),
                           kw=dict(mask="causal_bottom_right")),
}


def skip_unless_supported(q, k, v, **kw):
    ex = attn.explain(q, k, v, backward=True, **kw)
    if ex.chosen is None:
        pytest.skip(f"no backend of this build runs it:\n{ex}")


def rel_frobenius(x, ref_x):
    return float(np.linalg.norm(x - ref_x) / max(np.linalg.norm(ref_x), 1e-30))


@pytest.mark.parametrize("dtype", sorted(TOL))
@pytest.mark.parametrize("name", sorted(CASES))
@needs_gpu_backend
def test_torch_cuda_against_sdpa_float64(name, dtype):
    torch = pytest.importorskip("torch")
    import attn.torch as at

    case = CASES[name]
    dt = getattr(torch, dtype)
    q, k, v = (torch.randn(*s, device="cuda", dtype=dt, requires_grad=True) for s in case["shapes"])
    skip_unless_supported(q, k, v, **case["kw"])
    out = at.attention(q, k, v, **case["kw"])
    dout = torch.randn_like(out)
    out.backward(dout)

    # torch's SDPA in float64 on the same (upcast) inputs: [b, h, s, d] layout, GQA by repetition,
    # masks as explicit boolean matrices (SDPA's is_causal is top-left only).
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    t = lambda x: x.transpose(1, 2)  # noqa: E731
    kk, vv = t(k64).repeat_interleave(group, 1), t(v64).repeat_interleave(group, 1)
    vis, _ = ref._visible(q.shape[1], k.shape[1], case["kw"].get("mask", "no_mask"), case["kw"].get("window", (-1, -1)))
    visible = torch.from_numpy(vis).to("cuda")
    want = t(torch.nn.functional.scaled_dot_product_attention(t(q64), kk, vv, attn_mask=visible))
    want.backward(dout.double())

    atol_out, atol_grad, frob = TOL[dtype]
    for got, w, tol, what in ((out, want, atol_out, "out"), (q.grad, q64.grad, atol_grad, "dq"),
                              (k.grad, k64.grad, atol_grad, "dk"), (v.grad, v64.grad, atol_grad, "dv")):
        g64, w64 = got.detach().double().cpu().numpy(), w.detach().cpu().numpy()
        assert_close(g64, w64, atol=tol, rtol=tol, what=what)
        assert rel_frobenius(g64, w64) < frob, what


@needs_gpu_backend
def test_torch_cuda_runs_on_the_current_stream():
    torch = pytest.importorskip("torch")
    q = torch.randn(2, 256, 4, 64, device="cuda", dtype=torch.bfloat16)
    skip_unless_supported(q, q, q, mask="causal")
    want = attn.forward(q, q, q, mask="causal")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = attn.forward(q, q, q, mask="causal")
    s.synchronize()
    torch.testing.assert_close(got, want, atol=0, rtol=0)


@needs_gpu_backend
def test_torch_compile_on_cuda():
    torch = pytest.importorskip("torch")
    import attn.torch as at

    q = torch.randn(2, 64, 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    skip_unless_supported(q, q, q, mask="causal")
    f = torch.compile(lambda x: at.attention(x, x, x, mask="causal").float().sum(), backend="aot_eager",
                      fullgraph=True)
    f(q).backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


@needs_gpu_backend
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cupy_against_numpy_reference(dtype):
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng()
    shapes = ((2, 96, 4, 64), (2, 130, 2, 64), (2, 130, 2, 64))
    host = [rng.standard_normal(s).astype(dtype) for s in shapes]
    q, k, v = (cupy.asarray(x) for x in host)
    skip_unless_supported(q, k, v, mask="causal_bottom_right")
    out, lse = attn.forward(q, k, v, mask="causal_bottom_right", return_lse=True)
    assert isinstance(out, cupy.ndarray) and out.dtype == q.dtype and isinstance(lse, cupy.ndarray)
    dout_host = rng.standard_normal(out.shape).astype(dtype)
    dq, dk, dv = attn.backward(q, k, v, out, cupy.asarray(dout_host), lse, mask="causal_bottom_right")
    want = ref.attention(*host, mask="causal_bottom_right", dout=dout_host)
    atol_out, atol_grad, _ = TOL[dtype]
    assert_close(cupy.asnumpy(out), want[0], atol=atol_out, rtol=atol_out, what="out")
    assert_close(cupy.asnumpy(lse), want[1], atol=1e-3, rtol=1e-3, what="lse")
    for got, w, what in zip((dq, dk, dv), want[2:], ("dq", "dk", "dv")):
        assert_close(cupy.asnumpy(got), w, atol=atol_grad, rtol=atol_grad, what=what)


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
@pytest.mark.skipif(bool(GPU_BACKENDS), reason=f"this build has GPU backends: {GPU_BACKENDS}")
def test_cuda_tensors_without_a_gpu_backend_get_a_clear_error():
    torch = pytest.importorskip("torch")
    q = torch.randn(1, 16, 2, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(attn.BackendUnavailableError, match="no attention backend can run this call") as e:
        attn.forward(q, q, q)
    assert "reference" in str(e.value)
