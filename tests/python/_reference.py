"""An independent float64 NumPy attention, forward and backward, written from
docs/SEMANTICS.md (not from the C++ reference): the oracle of the Python tests.
Loops over sequences and heads; meant for tiny problems."""

import numpy as np

_M32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox 4x32-10 on uint64 arrays holding 32-bit words."""
    c = [np.asarray(x, dtype=np.uint64) & _M32 for x in (c0, c1, c2, c3)]
    k0, k1 = np.uint64(k0) & _M32, np.uint64(k1) & _M32
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & _M32
        hi1, lo1 = p1 >> np.uint64(32), p1 & _M32
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
        k0 = (k0 + np.uint64(0x9E3779B9)) & _M32
        k1 = (k1 + np.uint64(0xBB67AE85)) & _M32
    return c


def dropout_keep(seed, offset, bh, len_q, len_kv, p):
    """keep[i, j] for one (sequence, query head): SEMANTICS.md's Dropout rule."""
    i, j = np.meshgrid(np.arange(len_q, dtype=np.uint64), np.arange(len_kv, dtype=np.uint64), indexing="ij")
    words = philox4x32_10(j >> np.uint64(3), i, np.full_like(i, bh), np.full_like(i, offset),
                          seed & 0xFFFFFFFF, seed >> 32)
    w = np.choose(((j & np.uint64(7)) >> np.uint64(1)).astype(np.int64), words)
    r = (w >> (np.uint64(16) * (j & np.uint64(1)))) & np.uint64(0xFFFF)
    t = p * 65536.0
    threshold = 0xFFFF if t >= 65535.0 else int(t)
    return r >= np.uint64(threshold)


def _visible(len_q, len_kv, mask, window):
    causal = "causal" in mask
    bottom_right = mask not in ("causal", "padding_causal")
    left, right = window
    if causal:
        right = 0
    shift = len_kv - len_q if bottom_right else 0
    i = np.arange(len_q)[:, None]
    j = np.arange(len_kv)[None, :]
    vis = np.ones((len_q, len_kv), dtype=bool)
    if left >= 0:
        vis &= j >= i + shift - left
    if right >= 0:
        vis &= j <= i + shift + right
    return vis, shift


def _sequences(x, fmt, cu, lengths_padded=None):
    """Per-sequence [len, h, d] float64 blocks and where they came from."""
    x = np.asarray(x, dtype=np.float64)
    if fmt == "thd":
        return [x[cu[b]:cu[b + 1]] for b in range(len(cu) - 1)]
    xb = x if fmt == "bshd" else x.transpose(1, 0, 2, 3)
    if cu is None:
        return [xb[b] for b in range(xb.shape[0])]
    return [xb[b, : cu[b + 1] - cu[b]] for b in range(xb.shape[0])]


def _place(blocks, like, fmt, cu):
    """Inverse of _sequences: scatter per-sequence blocks into an array shaped like `like` (zeros elsewhere)."""
    out = np.zeros(like, dtype=np.float64)
    for b, blk in enumerate(blocks):
        if fmt == "thd":
            out[cu[b]:cu[b + 1]] = blk
        elif fmt == "bshd":
            out[b, : blk.shape[0]] = blk
        else:
            out[: blk.shape[0], b] = blk
    return out


def _scores(qs, ks, b, h, hk, scale, softcap, bias, alibi, vis, shift):
    x = scale * (qs[:, h, :] @ ks[:, hk, :].T)
    s = softcap * np.tanh(x / softcap) if softcap > 0 else x
    if bias is not None:
        bb = np.asarray(bias, dtype=np.float64)
        blk = bb[b if bb.shape[0] > 1 else 0, h if bb.shape[1] > 1 else 0]
        blk = blk[: s.shape[0]] if blk.shape[0] > 1 else blk  # thd: positions inside the sequence
        blk = blk[:, : s.shape[1]] if blk.shape[1] > 1 else blk
        s = s + blk
    if alibi is not None:
        a = np.asarray(alibi, dtype=np.float64)
        slope = a[h] if a.ndim == 1 else a[b, h]
        i = np.arange(s.shape[0])[:, None]
        j = np.arange(s.shape[1])[None, :]
        s = s - slope * np.abs(i + shift - j)
    return x, np.where(vis, s, -np.inf)


def attention(q, k, v, *, fmt="bshd", mask="no_mask", window=(-1, -1), scale=None, softcap=0.0,
              cu_q=None, cu_kv=None, bias=None, alibi=None, dropout_p=0.0, seed=0, offset=0, dout=None):
    """Returns out, lse (and dq, dk, dv when dout is given), float64, in the input layout."""
    cu_q = None if cu_q is None else [int(c) for c in cu_q]
    cu_kv = None if cu_kv is None else [int(c) for c in cu_kv]
    qs_all, ks_all, vs_all = (_sequences(t, fmt, c) for t, c in ((q, cu_q), (k, cu_kv), (v, cu_kv)))
    dos_all = None if dout is None else _sequences(dout, fmt, cu_q)
    h_q, h_kv, d_qk = q.shape[-2], k.shape[-2], q.shape[-1]
    group = h_q // h_kv
    scale = 1.0 / np.sqrt(d_qk) if scale is None else scale
    outs, lses, dqs, dks, dvs = [], [], [], [], []
    for b, (qs, ks, vs) in enumerate(zip(qs_all, ks_all, vs_all)):
        len_q, len_kv = qs.shape[0], ks.shape[0]
        vis, shift = _visible(len_q, len_kv, mask, window)
        o = np.zeros((len_q, h_q, vs.shape[-1]))
        lse = np.full((h_q, len_q), -np.inf)
        dq, dk, dv = np.zeros_like(qs), np.zeros_like(ks), np.zeros_like(vs)
        for h in range(h_q):
            hk = h // group
            x, s = _scores(qs, ks, b, h, hk, scale, softcap, bias, alibi, vis, shift)
            m = np.max(s, axis=1, keepdims=True) if len_kv else np.full((len_q, 1), -np.inf)
            m_safe = np.where(np.isfinite(m), m, 0.0)
            e = np.exp(s - m_safe)
            tot = e.sum(axis=1, keepdims=True)
            row_lse = np.where(tot > 0, np.log(np.where(tot > 0, tot, 1.0)) + m_safe, -np.inf)
            p = np.where(tot > 0, e / np.where(tot > 0, tot, 1.0), 0.0)
            z = np.ones_like(p)
            if dropout_p > 0:
                z = dropout_keep(seed, offset, b * h_q + h, len_q, len_kv, dropout_p) / (1.0 - dropout_p)
            o[:, h, :] = (p * z) @ vs[:, hk, :]
            lse[h] = row_lse[:, 0]
            if dos_all is not None:
                do = dos_all[b][:, h, :]
                dv[:, hk, :] += (p * z).T @ do
                dp = z * (do @ vs[:, hk, :].T)
                dd = np.sum(p * dp, axis=1, keepdims=True)
                ds = p * (dp - dd)
                dx = ds * (1.0 - np.tanh(x / softcap) ** 2) if softcap > 0 else ds
                dq[:, h, :] += scale * dx @ ks[:, hk, :]
                dk[:, hk, :] += scale * dx.T @ qs[:, h, :]
        outs.append(o)
        lses.append(lse)
        dqs.append(dq)
        dks.append(dk)
        dvs.append(dv)
    out = _place(outs, q.shape[:-1] + (v.shape[-1],), fmt, cu_q)
    if fmt == "thd":
        lse_all = np.full((h_q, q.shape[0]), -np.inf)
        for b, l in enumerate(lses):
            lse_all[:, cu_q[b]:cu_q[b + 1]] = l
    else:
        batch = q.shape[0] if fmt == "bshd" else q.shape[1]
        s_q = q.shape[1] if fmt == "bshd" else q.shape[0]
        lse_all = np.full((batch, h_q, s_q), -np.inf)
        for b, l in enumerate(lses):
            lse_all[b, :, : l.shape[1]] = l
    if dout is None:
        return out, lse_all
    return (out, lse_all, _place(dqs, q.shape, fmt, cu_q), _place(dks, k.shape, fmt, cu_kv),
            _place(dvs, v.shape, fmt, cu_kv))
