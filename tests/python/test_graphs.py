"""attn inside torch.cuda.graph (DESIGN.md, "Calls inside CUDA graphs"):
forward, forward with backward, packed sequences with check_seqlens=False, and
the functional API, each captured once and replayed on new inputs, equal to
eager calls on the same inputs. torch.cuda.graph captures on a stream attn has
not seen: the workspace comes from PyTorch's allocator. Skipped without a
CUDA device and a GPU backend."""

import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
import attn.torch  # noqa: E402

HAS_GPU = attn.cuda_device_count() > 0 and any(
    b.available and b.device == "cuda" for b in attn.backends(detail=True))
pytestmark = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA device and a GPU backend")

BACKENDS = ["auto", "flash_sm90", "flash_sm80", "cudnn", "unfused"]


def _claims(backend, q, k, v, **kw):
    if backend == "auto":
        return True
    return attn.explain(q, k, v, backward=True, **kw)[backend].ok and attn.explain(q, k, v, **kw)[backend].ok


def _inputs(seed, b=2, s=200, h=4, h_kv=2, d=64):
    g = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda heads: torch.rand(b, s, heads, d, device="cuda", generator=g, dtype=torch.bfloat16) * 2 - 1  # noqa: E731
    return mk(h), mk(h_kv), mk(h_kv)


def _capture(fn):
    """PyTorch's recipe: warm up on a side stream, then capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = fn()
    return g, outs


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_and_backward_replay_on_new_inputs(backend):
    q, k, v = (x.requires_grad_() for x in _inputs(1))
    dout = torch.randn(q.shape[:-1] + v.shape[-1:], device="cuda", dtype=torch.bfloat16)
    kw = dict(mask="causal", backend=None if backend == "auto" else backend)
    if not _claims(backend, q.detach(), k.detach(), v.detach(), mask="causal"):
        pytest.skip(f"{backend} does not run this call here")

    def step():
        out = attn.torch.attention(q, k, v, **kw)
        return (out,) + torch.autograd.grad(out, (q, k, v), dout)

    g, static = _capture(step)
    for seed in (2, 3):
        nq, nk, nv = _inputs(seed)
        with torch.no_grad():
            q.copy_(nq), k.copy_(nk), v.copy_(nv)
            dout.normal_()
        g.replay()
        torch.cuda.synchronize()
        eager = step()
        for name, got, want in zip(("out", "dq", "dk", "dv"), static, eager):
            # The same kernels on the same inputs; gradients summed with atomics may differ in the last bits.
            torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2, msg=f"{name} after replay")


def test_packed_sequences_with_unchecked_lengths_replay_with_new_lengths():
    h, d, total = 4, 64, 400
    q = torch.randn(total, h, d, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    cu = torch.tensor([0, 1, 101, 400], device="cuda", dtype=torch.int32)
    kw = dict(qkv_format="thd", mask="padding_causal", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=300,
              max_seqlen_kv=300, check_seqlens=False)
    g, (out,) = _capture(lambda: (attn.torch.attention(q, k, v, **kw),))
    cu.copy_(torch.tensor([0, 300, 300, 400], dtype=torch.int32))  # other lengths, the same longest
    q.normal_()
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, attn.torch.attention(q, k, v, **kw), atol=2e-2, rtol=2e-2)


def test_checked_lengths_under_capture_name_the_keyword():
    q = torch.randn(10, 2, 64, device="cuda", dtype=torch.bfloat16)
    cu = torch.tensor([0, 4, 10], device="cuda", dtype=torch.int32)
    kw = dict(qkv_format="thd", mask="padding_causal", cu_seqlens_q=cu, cu_seqlens_kv=cu)
    attn.torch.attention(q, q, q, **kw)
    g = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match="check_seqlens"):
        with torch.cuda.graph(g):
            attn.torch.attention(q, q, q, **kw)


def test_functional_api_replays():
    q, k, v = _inputs(4)
    g, (out,) = _capture(lambda: (attn.forward(q, k, v, mask="causal"),))
    nq, _, _ = _inputs(5)
    q.copy_(nq)
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, attn.forward(q, k, v, mask="causal"), atol=2e-2, rtol=2e-2)


def test_dropout_seed_in_device_memory_replays_with_new_values():
    q, k, v = _inputs(6)
    state = torch.tensor([11, 0], device="cuda", dtype=torch.int64)
    g, (out,) = _capture(lambda: (attn.forward(q, k, v, mask="causal", dropout_p=0.2, rng_state=state),))
    for seed in (12, 13):
        state.copy_(torch.tensor([seed, 3]))
        g.replay()
        torch.cuda.synchronize()
        eager = attn.forward(q, k, v, mask="causal", dropout_p=0.2, seed=seed, offset=3)
        assert torch.equal(out, eager), f"replay with seed {seed} differs from the eager call with it"


def test_attn_torch_dropout_under_capture_draws_a_fresh_seed_per_replay():
    q, k, v = (x.requires_grad_() for x in _inputs(7))

    def step():
        out = attn.torch.attention(q, k, v, mask="causal", dropout_p=0.2)
        return (out,) + torch.autograd.grad(out, (q, k, v), torch.ones_like(out))

    g, static = _capture(step)
    seen = []
    for _ in range(2):
        g.replay()
        torch.cuda.synchronize()
        assert all(torch.isfinite(t).all() for t in static)
        seen.append(static[0].clone())
    assert not torch.equal(seen[0], seen[1]), "two replays dropped the same elements"


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_compile_reduce_overhead_trains_on_new_inputs(backend):
    """torch.compile(mode="reduce-overhead") records the custom ops in CUDA
    graphs (cudagraph trees: forward and the compiled backward) and replays
    them; each step on fresh inputs equals the eager call."""
    from torch._dynamo.utils import counters

    q0, k0, v0 = _inputs(20)
    kw = dict(mask="causal", backend=None if backend == "auto" else backend)
    if not _claims(backend, q0, k0, v0, mask="causal"):
        pytest.skip(f"{backend} does not run this call here")
    torch._dynamo.reset()
    counters.clear()
    step = torch.compile(lambda q, k, v: attn.torch.attention(q, k, v, **kw), mode="reduce-overhead", fullgraph=True)
    for seed in range(21, 26):  # warm-up, recording, then replays
        q, k, v = (x.requires_grad_() for x in _inputs(seed))
        dout = torch.randn(q.shape[:-1] + v.shape[-1:], device="cuda", dtype=torch.bfloat16)
        out = step(q, k, v)
        got = (out.detach().clone(),) + torch.autograd.grad(out, (q, k, v), dout)
        eager_out = attn.torch.attention(q, k, v, **kw)
        want = (eager_out,) + torch.autograd.grad(eager_out, (q, k, v), dout)
        for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
            torch.testing.assert_close(g.float(), w.float(), atol=2e-2, rtol=2e-2, msg=f"{name}, step seed {seed}")
    assert not counters["inductor"]["cudagraph_skips"], f"cudagraphs skipped: {dict(counters['inductor'])}"
    from torch._inductor import cudagraph_trees  # the recorded graphs' tree (PyTorch 2.x internals)
    manager = cudagraph_trees.get_manager(torch.cuda.current_device(), create_if_none_exists=False)
    assert manager is not None and any(manager.roots.values()), "no CUDA graph was recorded"


def test_torch_compile_reduce_overhead_with_dropout_gives_fresh_masks():
    torch._dynamo.reset()
    step = torch.compile(lambda q, k, v: attn.torch.attention(q, k, v, mask="causal", dropout_p=0.2),
                         mode="reduce-overhead")
    q, k, v = (x.requires_grad_() for x in _inputs(30))
    outs = []
    for _ in range(4):
        out = step(q, k, v)
        grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
        assert all(torch.isfinite(t).all() for t in (out,) + grads)
        outs.append(out.detach().clone())
    assert not torch.equal(outs[-2], outs[-1]), "two compiled steps dropped the same elements"
