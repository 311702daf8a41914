"""attn.forward_with_kvcache (flash_attn_with_kvcache's arguments) on CPU
tensors: the new tokens land in a paged or contiguous cache, rotated as
q is, and q attends to each sequence's cache bottom-right aligned; the same
answer as plain PyTorch on the gathered cache; a length past the cache is a
ValueError that leaves the cache as it was."""

import math

import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402


def rotate(x, cos, sin, pos, interleaved):
    """x [..., d] rotated at integer positions pos (broadcast over x's leading dims)."""
    half = cos.shape[-1]
    c, s = cos[pos].double(), sin[pos].double()
    y = x.double().clone()
    if interleaved:
        a, b = x[..., 0:2 * half:2].double(), x[..., 1:2 * half:2].double()
        y[..., 0:2 * half:2], y[..., 1:2 * half:2] = a * c - b * s, b * c + a * s
    else:
        a, b = x[..., :half].double(), x[..., half:2 * half].double()
        y[..., :half], y[..., half:2 * half] = a * c - b * s, b * c + a * s
    return y


def rotary_table(rows, rotary_dim):
    inv = 10000.0 ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(rows, dtype=torch.float64)[:, None] * inv[None]
    return angles.cos().float(), angles.sin().float()


@pytest.mark.parametrize("paged,interleaved", [(True, False), (False, True)])
def test_append_rotate_and_attend_like_pytorch(paged, interleaved):
    g = torch.Generator().manual_seed(0)
    b, s_q, s_new, h_q, h_kv, d, block = 3, 2, 2, 4, 2, 16, 8
    lens = torch.tensor([0, 7, 13], dtype=torch.int32)
    capacity = 24
    if paged:
        blocks = b * capacity // block + 1
        k_cache = torch.randn(blocks, block, h_kv, d, generator=g)
        table = torch.randperm(blocks, generator=g)[: b * capacity // block].view(b, -1).int()
    else:
        k_cache = torch.randn(b, capacity, h_kv, d, generator=g)
        table = None
    v_cache = torch.randn(k_cache.shape, generator=g)
    q = torch.randn(b, s_q, h_q, d, generator=g)
    k, v = torch.randn(b, s_new, h_kv, d, generator=g), torch.randn(b, s_new, h_kv, d, generator=g)
    cos, sin = rotary_table(capacity + 1, 8)
    kc0, vc0 = k_cache.clone(), v_cache.clone()

    out, lse = attn.forward_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens, block_table=table,
                                         rotary_cos=cos, rotary_sin=sin, rotary_interleaved=interleaved,
                                         return_lse=True)

    def at(i, p):  # (sequence i, position p) -> the cache's row
        return (table[i, p // block], p % block) if paged else (i, p)

    written = torch.zeros(k_cache.shape[:2], dtype=torch.bool)
    for i in range(b):
        total = int(lens[i]) + s_new
        keys, vals = [], []
        for p in range(total):
            r = at(i, p)
            if p >= lens[i]:  # appended: the new token, rotated at its position
                j = p - int(lens[i])
                torch.testing.assert_close(k_cache[r].double(), rotate(k[i, j], cos, sin, p, interleaved),
                                           atol=1e-5, rtol=0)
                assert torch.equal(v_cache[r], v[i, j])
                written[r] = True
            keys.append(k_cache[r].double())
            vals.append(v_cache[r].double())
        kk, vv = torch.stack(keys), torch.stack(vals)  # [total, h_kv, d]
        qpos = torch.arange(total - s_q, total)
        qr = rotate(q[i], cos, sin, qpos[:, None].expand(s_q, h_q), interleaved)  # [s_q, h_q, d]
        kk, vv = kk.repeat_interleave(h_q // h_kv, dim=1), vv.repeat_interleave(h_q // h_kv, dim=1)
        scores = torch.einsum("qhd,khd->hqk", qr, kk) / math.sqrt(d)
        visible = torch.arange(total)[None, :] <= qpos[:, None]
        scores = scores.masked_fill(~visible, float("-inf"))
        want = torch.einsum("hqk,khd->qhd", scores.softmax(-1), vv)
        torch.testing.assert_close(out[i].double(), want, atol=2e-5, rtol=0)
        torch.testing.assert_close(lse[i].double(), scores.logsumexp(-1), atol=2e-5, rtol=0)
    assert torch.equal(k_cache[~written], kc0[~written]) and torch.equal(v_cache[~written], vc0[~written])


def test_a_length_past_the_cache_is_an_error_before_any_write():
    k_cache, v_cache = torch.randn(2, 8, 1, 16), torch.randn(2, 8, 1, 16)
    kc0 = k_cache.clone()
    q, k, v = torch.randn(2, 1, 2, 16), torch.randn(2, 3, 1, 16), torch.randn(2, 3, 1, 16)
    with pytest.raises(ValueError, match=r"cache_seqlens\[1\]=6 with 3 new tokens"):
        attn.forward_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=torch.tensor([0, 6], dtype=torch.int32))
    assert torch.equal(k_cache, kc0)


def test_cache_seqlens_as_one_int_for_every_sequence():
    # flash_attn_with_kvcache takes an int there too: every sequence's length.
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 1, 4, 16, generator=g)
    k, v = torch.randn(2, 1, 2, 16, generator=g), torch.randn(2, 1, 2, 16, generator=g)
    caches = [torch.randn(2, 8, 2, 16, generator=g) for _ in range(2)]
    outs = []
    for lens in (5, torch.tensor([5, 5], dtype=torch.int32)):
        k_cache, v_cache = (c.clone() for c in caches)
        outs.append((attn.forward_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens), k_cache, v_cache))
    for a, b in zip(outs[0], outs[1]):
        assert torch.equal(a, b)
    out_np = attn.forward_with_kvcache(q.numpy(), caches[0].numpy().copy(), caches[1].numpy().copy(), k.numpy(),
                                       v.numpy(), cache_seqlens=5)
    torch.testing.assert_close(torch.from_numpy(out_np), outs[0][0])
    with pytest.raises(ValueError, match=r"cache_seqlens\[0\]=8 with 1 new tokens"):
        attn.forward_with_kvcache(q, caches[0].clone(), caches[1].clone(), k, v, cache_seqlens=8)
    with pytest.raises(TypeError, match="cache_seqlens must be an array"):
        attn.forward_with_kvcache(q, caches[0].clone(), caches[1].clone(), k, v, cache_seqlens=True)


def test_rotary_tables_of_another_dtype_are_errors_before_any_write():
    # float32 or q's dtype, one for both: the GPU's append would read any other as one of those.
    q = torch.randn(2, 1, 2, 16).bfloat16()
    k_cache, v_cache = torch.randn(2, 8, 1, 16).bfloat16(), torch.randn(2, 8, 1, 16).bfloat16()
    k, v = torch.randn(2, 1, 1, 16).bfloat16(), torch.randn(2, 1, 1, 16).bfloat16()
    lens = torch.tensor([0, 3], dtype=torch.int32)
    cos, sin = rotary_table(8, 8)
    kc0 = k_cache.clone()
    for c, s, match in [(cos.double(), sin.double(), "rotary_cos has the wrong dtype"),
                        (cos, sin.half(), "rotary_sin has the wrong dtype"),
                        (cos, sin.bfloat16(), "rotary_cos and rotary_sin have different dtypes")]:
        with pytest.raises(TypeError, match=match):
            attn.forward_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens, rotary_cos=c, rotary_sin=s)
        assert torch.equal(k_cache, kc0)
    attn.forward_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens, rotary_cos=cos.bfloat16(),
                              rotary_sin=sin.bfloat16())  # q's dtype for both: accepted


cuda = pytest.mark.skipif(not torch.cuda.is_available() or attn.cuda_device_count() == 0, reason="needs a CUDA device")


def _decode_inputs(paged, b=3, s_q=1, s_new=1, h_q=8, h_kv=2, d=128, block=16, capacity=256, seed=0, rotary=True):
    g = torch.Generator().manual_seed(seed)
    dt = torch.bfloat16
    if paged:
        blocks = b * capacity // block + 2
        k_cache = torch.randn(blocks, block, h_kv, d, generator=g).to(dt)
        table = torch.randperm(blocks, generator=g)[: b * capacity // block].view(b, -1).int()
    else:
        k_cache = torch.randn(b, capacity, h_kv, d, generator=g).to(dt)
        table = None
    v_cache = torch.randn(k_cache.shape, generator=g).to(dt)
    q = torch.randn(b, s_q, h_q, d, generator=g).to(dt)
    k, v = (torch.randn(b, s_new, h_kv, d, generator=g).to(dt) for _ in range(2))
    lens = torch.tensor([0, 77, capacity - s_new][:b], dtype=torch.int32)
    cos, sin = rotary_table(capacity + s_q, 64) if rotary else (None, None)
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, k=k, v=v, cache_seqlens=lens, block_table=table,
                rotary_cos=cos, rotary_sin=sin)


def _call(t, **kw):
    return attn.forward_with_kvcache(t["q"], t["k_cache"], t["v_cache"], t["k"], t["v"],
                                     cache_seqlens=t["cache_seqlens"], block_table=t["block_table"],
                                     rotary_cos=t["rotary_cos"], rotary_sin=t["rotary_sin"], **kw)


def _expect_cuda_matches_cpu(host, **kw):
    dev = {n: (x.cuda() if x is not None else None) for n, x in host.items()}
    dev_kw = {n: (x.cuda() if isinstance(x, torch.Tensor) else x) for n, x in kw.items()}
    out, lse = _call(dev, return_lse=True, **dev_kw)
    ref, ref_lse = _call(host, return_lse=True, **kw)
    torch.testing.assert_close(out.cpu().float(), ref.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse.cpu(), ref_lse, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(dev["v_cache"].cpu(), host["v_cache"], atol=0, rtol=0)
    torch.testing.assert_close(dev["k_cache"].cpu().float(), host["k_cache"].float(), atol=1e-2, rtol=1e-2)


@cuda
@pytest.mark.parametrize("paged", [True, False])
@pytest.mark.parametrize("s_q", [4, 48])  # decode (flash_decode), chunked prefill (flash_sm90 on Hopper)
@pytest.mark.parametrize("rotary", [True, False])  # decode: the append kernel first, or the decode kernel appends
def test_cuda_matches_the_cpu_path(paged, s_q, rotary):
    _expect_cuda_matches_cpu(_decode_inputs(paged, s_q=s_q, s_new=s_q, rotary=rotary))


@cuda
@pytest.mark.parametrize("paged", [True, False])
@pytest.mark.parametrize("s_q", [1, 4])
@pytest.mark.parametrize("heads", [(16, 1), (8, 2), (4, 4)])
@pytest.mark.parametrize("feature", ["window", "softcap", "alibi", "sink", "splits"])
def test_cuda_matches_the_cpu_path_with_score_changes(paged, s_q, heads, feature):
    # The decode kernel's row set-up and its epilogue per feature: a window
    # (rows whose keys start inside the cache), softcap, ALiBi slopes per
    # query head, a learnable sink, and a fixed split count (the combine
    # kernel), at GQA 16, 4 and 1 with one and four query tokens; the
    # lengths include an empty cache (the new tokens alone).
    h_q, h_kv = heads
    g = torch.Generator().manual_seed(17)
    kw = {"window": dict(window=(40, 0)),
          "softcap": dict(softcap=15.0),
          "alibi": dict(alibi_slopes=torch.rand(h_q, generator=g) * 0.1),
          "sink": dict(softmax_type="learnable", sink=torch.rand(h_q, generator=g) * 2 - 0.5),
          "splits": dict(num_splits=3)}[feature]
    _expect_cuda_matches_cpu(_decode_inputs(paged, s_q=s_q, s_new=s_q, h_q=h_q, h_kv=h_kv, rotary=False, seed=5),
                             **kw)


@cuda
@pytest.mark.parametrize("paged", [True, False])
def test_new_tokens_whose_rows_are_not_16_byte_aligned_are_refused(paged):
    # Rows of d + 4 elements on the device (8-byte aligned): the kernels copy
    # rows 16 bytes at a time, so the call is refused before anything is
    # written, naming the alignment.
    t = {n: (x.cuda() if x is not None else None)
         for n, x in _decode_inputs(paged, s_q=3, s_new=3, rotary=False).items()}
    for n in ("k", "v"):
        wide = torch.zeros(*t[n].shape[:-1], t[n].shape[-1] + 4, dtype=t[n].dtype, device="cuda")
        wide[..., :-4] = t[n]
        t[n] = wide[..., :-4]
    k_cache = t["k_cache"].clone()
    with pytest.raises(attn.BackendUnavailableError, match="aligned to 8 bytes"):
        _call(t)
    assert torch.equal(t["k_cache"], k_cache)


@cuda
@pytest.mark.parametrize("s_q", [1, 40])  # a decode step, a prefill chunk
@pytest.mark.parametrize("rotary", [True, False])
def test_cuda_graph_replays_a_decode_step_on_new_lengths(s_q, rotary):
    t = {n: (x.cuda() if x is not None else None)
         for n, x in _decode_inputs(True, s_q=s_q, s_new=s_q, rotary=rotary).items()}
    out = _call(t, check_seqlens=False)  # warm-up: sizes the workspace before capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = _call(t, check_seqlens=False)
    for seed, lens in ((1, [5, 150, 31]), (2, [256 - s_q, 0, 100])):
        fresh = _decode_inputs(True, s_q=s_q, s_new=s_q, seed=seed, rotary=rotary)
        fresh["cache_seqlens"] = torch.tensor(lens, dtype=torch.int32)
        for n in ("q", "k_cache", "v_cache", "k", "v", "cache_seqlens", "block_table"):
            t[n].copy_(fresh[n])
        g.replay()
        eager = {n: (x.cuda() if x is not None else None) for n, x in fresh.items()}
        want = _call(eager)
        torch.cuda.synchronize()
        assert torch.equal(out, want)
        assert torch.equal(t["k_cache"], eager["k_cache"])


@cuda
@pytest.mark.parametrize("s_q", [1, 4])
@pytest.mark.parametrize("num_splits", [0, 3])  # the plan's count, or a combine kernel after the decode kernel
def test_lengths_and_block_table_written_by_the_kernel_just_before_are_read(s_q, num_splits):
    # On sm_90 the decode kernel starts before the kernel ahead of it on the
    # stream has finished (programmatic dependent launch), so it must wait
    # for that kernel before it reads the lengths or the block table. Here
    # one long PyTorch kernel (an add over 2^25 integers) writes both in its
    # last elements right before each call, eagerly and inside a CUDA graph;
    # every answer equals the same call made after a synchronization.
    b = 3
    t = {n: (x.cuda() if x is not None else None)
         for n, x in _decode_inputs(True, b=b, s_q=s_q, s_new=s_q, rotary=False).items()}
    n_big, n_table = 1 << 25, t["block_table"].numel()
    src = torch.zeros(n_big + b + n_table, dtype=torch.int32, device="cuda")
    dst = torch.zeros_like(src)
    t["cache_seqlens"], t["block_table"] = dst[n_big:n_big + b], dst[n_big + b:].view(b, -1)

    def step():
        torch.add(src, 0, out=dst)  # the lengths and the table come last
        return _call(t, check_seqlens=False, num_splits=num_splits)

    def load(seed, lens):
        fresh = _decode_inputs(True, b=b, s_q=s_q, s_new=s_q, seed=seed, rotary=False)
        for n in ("q", "k_cache", "v_cache", "k", "v"):
            t[n].copy_(fresh[n])
        src[n_big:n_big + b] = torch.tensor(lens, dtype=torch.int32)
        src[n_big + b:] = fresh["block_table"].reshape(-1)
        dst.zero_()  # stale values: every length 0, every block 0
        torch.cuda.synchronize()

    def expect(out):
        want = _call(t, check_seqlens=False, num_splits=num_splits)  # the same call, its inputs in place
        torch.cuda.synchronize()
        assert torch.equal(out, want)

    for seed, lens in ((1, [5, 150, 256 - s_q]), (2, [200, 0, 33])):
        load(seed, lens)
        expect(step())
    load(3, [1, 1, 1])
    step()  # warm-up: sizes the workspace before capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step()
    for seed, lens in ((4, [77, 256 - s_q, 3]), (5, [0, 64, 130])):
        load(seed, lens)
        g.replay()
        expect(out.clone())


@cuda
@pytest.mark.parametrize("b, capacity, num_splits", [
    (1, 64, 0),  # one split, a grid of 8 CTAs: the next call may start before this one's merge
    (1, 2048, 1),  # the same over 32 tiles
    (1, 2048, 0),  # 16 splits, a combine of 32 CTAs: the next call may start right after the combine's wait
    (8, 2048, 0),  # 2 splits, a combine of 256 CTAs: the next call may start once the combine has read
])
@pytest.mark.parametrize("paged", [False, True])
def test_consecutive_calls_read_what_the_call_before_wrote(b, capacity, num_splits, paged):
    # On sm_90 a call's decode kernel may start before the call ahead of it
    # has ended (programmatic dependent launch). Here each call's queries are
    # the call before's output and its keys include the token that call
    # appended, with no other kernel between them: the chain, eagerly and
    # replayed from a CUDA graph on new data, equals the same calls made one
    # at a time after a synchronization.
    steps, h_q, h_kv, d = 6, 32, 8, 128
    t = {n: (x.cuda() if x is not None else None)
         for n, x in _decode_inputs(paged, b=b, h_q=h_q, h_kv=h_kv, d=d, capacity=capacity, rotary=False).items()}
    base = torch.tensor([capacity - steps - j % 3 for j in range(b)], dtype=torch.int32, device="cuda")
    lens = [base + i for i in range(steps)]  # each call appends one token after the last call's
    q0, k0, v0 = t["q"].clone(), t["k_cache"].clone(), t["v_cache"].clone()
    new = torch.empty(steps, 2, b, 1, h_kv, d, dtype=torch.bfloat16, device="cuda")

    def load(seed):
        g = torch.Generator().manual_seed(seed)
        for x in (q0, k0, v0, new):
            x.copy_(torch.randn(x.shape, generator=g).to(x.dtype))

    def chain(synchronize):
        t["k_cache"].copy_(k0)
        t["v_cache"].copy_(v0)
        q = q0
        for i in range(steps):
            if synchronize:
                torch.cuda.synchronize()
            q = attn.forward_with_kvcache(q, t["k_cache"], t["v_cache"], new[i, 0], new[i, 1], cache_seqlens=lens[i],
                                          block_table=t["block_table"], num_splits=num_splits, check_seqlens=False)
        return q

    def expect(out):
        want = chain(synchronize=True)
        torch.cuda.synchronize()
        assert torch.equal(out, want)

    load(1)
    expect(chain(synchronize=False).clone())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = chain(synchronize=False)
    for seed in (2, 3):
        load(seed)
        g.replay()
        expect(out.clone())


def _unchecked_call(paged, rotary, s_q, device):
    """forward_with_kvcache with check_seqlens=False on values outside the
    cache: lengths below 0 and past the capacity, block ids and cache rows
    outside it, rotary positions past the table. The caches are views inside
    larger tensors; returns (out, the whole tensors, their guard rows before)."""
    b, h_q, h_kv, d, cap, block = 3, 8, 2, 128, 256, 16
    dt = torch.bfloat16
    g = torch.Generator().manual_seed(4)
    rows = table = None
    if paged:
        blocks = b * cap // block
        k_all = torch.randn(blocks + 2, block, h_kv, d, generator=g).to(dt)
        table = torch.randint(0, blocks, (b, cap // block), generator=g, dtype=torch.int32)
        table[0, 0], table[1, -1] = -7, blocks + 100
    else:
        k_all = torch.randn(b + 2, cap, h_kv, d, generator=g).to(dt)
        rows = torch.tensor([0, b + 5, -2], dtype=torch.int32)
    v_all = torch.randn(k_all.shape, generator=g).to(dt)
    q = torch.randn(b, s_q, h_q, d, generator=g).to(dt)
    k, v = (torch.randn(b, s_q, h_kv, d, generator=g).to(dt) for _ in range(2))
    lens = torch.tensor([-5, cap + 3, cap - s_q // 2], dtype=torch.int32)
    cos, sin = rotary_table(cap // 2, 64) if rotary else (None, None)  # shorter than the positions
    on = lambda x: None if x is None else x.to(device)  # noqa: E731
    k_all, v_all = k_all.to(device), v_all.to(device)
    guards = [t[[0, -1]].clone() for t in (k_all, v_all)]
    out = attn.forward_with_kvcache(on(q), k_all[1:-1], v_all[1:-1], on(k), on(v), cache_seqlens=on(lens),
                                    cache_batch_idx=on(rows), block_table=on(table), rotary_cos=on(cos),
                                    rotary_sin=on(sin), check_seqlens=False)
    return out, (k_all, v_all), guards


@cuda
@pytest.mark.parametrize("paged", [True, False])
@pytest.mark.parametrize("rotary", [True, False])
@pytest.mark.parametrize("s_q", [1, 40])  # the decode kernel (appending itself, or after the append kernel); a prefill
def test_unchecked_values_write_nothing_outside_the_callers_tensors(paged, rotary, s_q):
    # With the checks off nothing is read back: the kernels bound each value
    # (SEMANTICS.md "KV cache"). The call returns, and the rows around the
    # caches' views stay as they were.
    out, whole, guards = _unchecked_call(paged, rotary, s_q, "cuda")
    torch.cuda.synchronize()
    assert out.shape == (3, s_q, 8, 128)
    for t, g in zip(whole, guards):
        assert torch.equal(t[[0, -1]], g)


def test_unchecked_values_are_still_errors_on_the_cpu():
    # The CPU path reads every value anyway, so it checks them all.
    with pytest.raises(ValueError, match="cache length"):
        _unchecked_call(False, False, 1, "cpu")
