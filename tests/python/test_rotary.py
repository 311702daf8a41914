"""attn.rotary: the fused rotary kernel (attn::rotary, CPU float64 math and
CUDA float32) against an independent float64 rotation written here, forward
and backward, every format, partial rotation, strided views, packed
sequences with an empty one and tokens past the last; its errors; the op's
registration (torch.library.opcheck). The CUDA cases run where a GPU is."""

import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
from attn.rotary import RotaryPositionEmbedding, apply_rotary_pos_emb  # noqa: E402

HAS_CUDA = attn.cuda_device_count() > 0 and torch.cuda.is_available()


@pytest.fixture
def gen():
    seed = int(torch.randint(0, 1 << 31, ()).item())
    print(f"torch seed {seed}")
    return torch.Generator().manual_seed(seed)


def positions(fmt, shape, cu):
    """[tokens] position of each token of x (flattened over the token dims); -1: outside every sequence."""
    if fmt == "sbhd":
        return torch.arange(shape[0])[:, None].expand(shape[0], shape[1]).reshape(-1)
    if fmt == "bshd":
        return torch.arange(shape[1])[None, :].expand(shape[0], shape[1]).reshape(-1)
    pos = torch.full((shape[0],), -1, dtype=torch.long)
    for i in range(cu.numel() - 1):
        a, b = int(cu[i]), int(cu[i + 1])
        pos[a:b] = torch.arange(b - a)
    return pos


def rotate64(x, freqs, fmt, cu=None, backward=False):
    """The rotation (or its transpose) in float64, one token at a time, from the definition."""
    tokens = x.shape[:-2]
    flat = x.detach().double().cpu().reshape(-1, *x.shape[-2:])
    pos = positions(fmt, x.shape, None if cu is None else cu.cpu())
    f = freqs.detach().double().cpu().reshape(freqs.shape[0], -1)
    half = f.shape[-1] // 2
    out = flat.clone()
    for t in range(flat.shape[0]):
        if pos[t] < 0:
            continue
        a = f[pos[t]]
        c, s = a.cos(), a.sin()
        xi, xj = flat[t, :, :half], flat[t, :, half:2 * half]
        if not backward:
            out[t, :, :half] = xi * c[:half] - xj * s[:half]
            out[t, :, half:2 * half] = xj * c[half:] + xi * s[half:]
        else:
            out[t, :, :half] = xi * c[:half] + xj * s[half:]
            out[t, :, half:2 * half] = xj * c[half:] - xi * s[:half]
    return out.reshape(*tokens, *x.shape[-2:])


# The fused kernel rounds once, to x's dtype: half an ulp (2^-9 for bf16,
# 2^-11 for f16) of the largest value, with room for float32 math.
TOL = {torch.float64: 1e-12, torch.float32: 2e-6, torch.bfloat16: 4e-3, torch.float16: 1e-3}
# TE's unfused form also rounds cos, sin and each product and sum to x's dtype.
TOL_UNFUSED = {torch.float64: 2e-6, torch.float32: 2e-6, torch.bfloat16: 1.6e-2}


def check(got, want, dtype, tol=TOL):
    err = (got.double().cpu() - want).abs().max().item()
    scale = want.abs().max().item()
    assert err <= tol[dtype] * max(scale, 1.0), f"max error {err:.3g} (scale {scale:.3g}) over {tol[dtype]}"


def make(gen, fmt, d, heads=3, dtype=torch.float32, device="cpu", s=7, b=2, cu=None, extra_heads=0):
    """x in fmt, as a head slice of a wider buffer (strided, like q inside a fused QKV output)."""
    if fmt == "thd":
        shape = (int(cu[-1]) + 2, heads + extra_heads, d)  # two tokens past the last sequence
    else:
        shape = (s, b, heads + extra_heads, d) if fmt == "sbhd" else (b, s, heads + extra_heads, d)
    buf = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype=dtype, device=device)
    return buf[..., :heads, :]


CASES = [("bshd", 16, 16), ("sbhd", 16, 16), ("bshd", 20, 8), ("thd", 16, 16), ("sbhd", 64, 64), ("thd", 24, 12)]


@pytest.mark.parametrize("fmt,d,rot", CASES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_fused_cpu_against_float64(gen, fmt, d, rot, dtype):
    cu = torch.tensor([0, 3, 3, 9], dtype=torch.int32) if fmt == "thd" else None  # an empty sequence
    x = make(gen, fmt, d, dtype=dtype, cu=cu, extra_heads=2)
    freqs = RotaryPositionEmbedding(rot, device="cpu")(12)
    got = apply_rotary_pos_emb(x, freqs, fmt, cu, fused=True)
    check(got, rotate64(x, freqs, fmt, cu), dtype)
    # The unfused form (TE's fused=False) agrees within its rounding of cos/sin to x's dtype.
    if fmt != "thd":
        check(apply_rotary_pos_emb(x, freqs, fmt, cu, fused=False), rotate64(x, freqs, fmt, cu), dtype, TOL_UNFUSED)


@pytest.mark.parametrize("fmt", ["bshd", "thd"])
def test_fused_gradient(gen, fmt):
    cu = torch.tensor([0, 2, 5], dtype=torch.int32) if fmt == "thd" else None
    x = make(gen, fmt, 8, heads=2, dtype=torch.float64, s=4, cu=cu).detach().requires_grad_()
    freqs = torch.rand(6, 1, 1, 6, generator=gen, dtype=torch.float64).float() * 7  # halves differ: general angles
    assert torch.autograd.gradcheck(lambda t: apply_rotary_pos_emb(t, freqs, fmt, cu, fused=True), (x,))
    g = torch.randn(x.shape, generator=gen, dtype=torch.float64)
    (dx,) = torch.autograd.grad(apply_rotary_pos_emb(x, freqs, fmt, cu, fused=True), x, g)
    check(dx, rotate64(g, freqs, fmt, cu, backward=True), torch.float64)


def test_opcheck(gen):
    x = make(gen, "bshd", 8, s=4, dtype=torch.float32).contiguous().requires_grad_()
    freqs = RotaryPositionEmbedding(8, device="cpu")(4)
    torch.library.opcheck(torch.ops.attn.rotary.default, (x, freqs, None, "bshd", False))


def test_compiled_matches_eager(gen):
    # torch.compile traces the custom op attn::rotary (eager calls take a plain autograd.Function).
    x = make(gen, "sbhd", 8, s=5, dtype=torch.float32).detach().requires_grad_()
    freqs = RotaryPositionEmbedding(8, device="cpu")(5)
    f = lambda t: apply_rotary_pos_emb(t, freqs, "sbhd", fused=True)  # noqa: E731
    g = torch.randn(x.shape, generator=gen)
    want, (dwant,) = f(x), torch.autograd.grad(f(x), x, g)
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    got = compiled(x)
    (dgot,) = torch.autograd.grad(got, x, g)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(dgot, dwant, rtol=0, atol=0)


def test_errors(gen):
    x = make(gen, "bshd", 8, s=6)
    with pytest.raises(ValueError, match="freqs cover 4 positions, the sequence has 6"):
        apply_rotary_pos_emb(x, RotaryPositionEmbedding(8, device="cpu")(4), "bshd", fused=True)
    with pytest.raises(ValueError, match="at most x's 8"):
        apply_rotary_pos_emb(x, RotaryPositionEmbedding(16, device="cpu")(6), "bshd", fused=True)
    with pytest.raises(ValueError, match="rank 3"):
        apply_rotary_pos_emb(x, RotaryPositionEmbedding(8, device="cpu")(6), "thd", fused=True)
    with pytest.raises(ValueError, match="needs cu_seqlens"):
        apply_rotary_pos_emb(x[0], RotaryPositionEmbedding(8, device="cpu")(6), "thd", fused=True)
    with pytest.raises(TypeError, match="unsupported dtype"):
        apply_rotary_pos_emb(x.to(torch.int32), RotaryPositionEmbedding(8, device="cpu")(6), "bshd", fused=True)


def test_thd_position_past_the_table_is_nan(gen):
    cu = torch.tensor([0, 5], dtype=torch.int32)
    x = make(gen, "thd", 8, cu=cu)
    out = apply_rotary_pos_emb(x, RotaryPositionEmbedding(8, device="cpu")(3), "thd", cu, fused=True)
    assert not out[:3].isnan().any() and out[3:5].isnan().all()
    assert torch.equal(out[5:], x[5:])  # past cu_seqlens[-1]: copied


# ---- CUDA --------------------------------------------------------------------------------


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
@pytest.mark.parametrize("fmt,d,rot", CASES + [("bshd", 128, 128), ("thd", 256, 128)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fused_cuda_against_float64(gen, fmt, d, rot, dtype):
    cu = torch.tensor([0, 3, 3, 40], dtype=torch.int32) if fmt == "thd" else None
    x = make(gen, fmt, d, heads=5, dtype=dtype, device="cuda", s=33, cu=cu, extra_heads=3).requires_grad_()
    freqs = RotaryPositionEmbedding(rot, device="cuda")(40)
    cu_dev = None if cu is None else cu.cuda()
    out = apply_rotary_pos_emb(x, freqs, fmt, cu_dev, fused=True)
    check(out, rotate64(x, freqs, fmt, cu), dtype)
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(dtype)
    (dx,) = torch.autograd.grad(out, x, g.cuda())
    check(dx, rotate64(g, freqs, fmt, cu, backward=True), dtype)


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_cuda_unaligned_and_past_table(gen):
    # d 20: 10 pairs per head, not a multiple of 8: the one-pair path; a view starting one head in.
    cu = torch.tensor([0, 6], dtype=torch.int32)
    buf = make(gen, "thd", 20, heads=4, dtype=torch.bfloat16, device="cuda", cu=cu)
    x = buf[:, 1:]
    out = apply_rotary_pos_emb(x, RotaryPositionEmbedding(20, device="cuda")(4), "thd", cu.cuda(), fused=True)
    want = rotate64(x, RotaryPositionEmbedding(20, device="cpu")(6), "thd", cu)
    check(out[:4], want[:4], torch.bfloat16)
    assert out[4:6].isnan().all() and torch.equal(out[6:], x[6:])
