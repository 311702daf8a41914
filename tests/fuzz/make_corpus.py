#!/usr/bin/env python3
"""Writes the fuzz target's seed corpus (tests/fuzz/corpus/): one small input
per named case, encoded field by field in the order fuzz_attention.cpp reads
them (its header lists the fields; keep the two in step). Each seed is a call
a person would write: every format and mask, GQA, d_qk != d_v, windows,
softcap, dropout, bias / ALiBi / attn_mask shapes, softmax sinks and the max
logit, packed sequences with empty ones, strided and reversed layouts, and the bad calls validation must refuse,
including the inputs of the bugs the fuzzer found (regress_*).

Usage: python3 tests/fuzz/make_corpus.py [out-dir]   (default: tests/fuzz/corpus)
"""
import os
import struct
import sys

FORMATS = {"bshd": 0, "sbhd": 1, "thd": 2}
MASKS = {"no_mask": 0, "causal": 1, "causal_bottom_right": 2, "padding": 3, "padding_causal": 4,
         "padding_causal_bottom_right": 5, "arbitrary": 6}
DTYPES = {"f32": 0, "bf16": 1, "f16": 2, "f64": 3, "i32": 4, "i64": 5, "u8": 6, "bool": 7}
WINDOWS = [-1, 0, 1, 2, 3, 5, 8, -2, "max", "max-1", "2^62", "2^31", "min", 4, 6, 7]
SCALES = [None, 1.0, 0.5, 0.125, 2.0, 0.0, -1.0, 1e3, 1e300, "inf", "nan", "-inf", 1e-300, 0.25, 4.0, -0.5]
SOFTCAPS = [0.0, 1.0, 5.0, 30.0, 0.5, 0.01, -1.0, "nan", "inf", 1e300, 1e-300, 2.0]
DROPOUTS = [0.0, 0.1, 0.5, 0.25, 0.9, 0.999999, 1.0, -0.1, "nan", 1e-10, 0.75, 0.3]
OFFSETS = [0, 1, 7, 2**32 - 1, 2**32, 2**64 - 1, 12345, 3]
BIG = [0, 1, 2, 3, 7, 64, 2**31 - 1, 2**31, 2**32, 2**40, 2**62, 2**63 - 1, -1, -2**31, 4096, 2**20]
BIAS = {"none": 0, "bias": 1, "alibi": 2, "alibi_batch": 3, "bias_and_alibi": 4}
SOFTMAX = {"vanilla": 0, "off-by-one": 1, "learnable": 2}
MASK_DTYPES = {"bool": 0, "u8": 1, "f32": 2, "q": 3, "f16": 4, "f64": 5, "i32": 6, "i64": 7}
TENSORS = ["q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv", "bias", "dbias", "alibi", "attn_mask",
           "cu_seqlens_q", "cu_seqlens_kv", "rng_state"]
CU_DAMAGE = {"none": 0, "last+1": 1, "first=1": 2, "minus2": 3, "int32_max": 4, "int32_min": 5,
             "drop_last": 6, "repeat_last": 7}
SPECIALS = {"nan": 0, "inf": 1, "-inf": 2, "1e30": 3, "-1e30": 4, "131008": 5, "denormal": 6, "-0": 7}
PERTURB = {"dtype": 0, "rank": 1, "dim+-1": 2, "dim_big": 3, "drop": 4, "stride": 5, "device": 6, "alias": 7}


def encode(backward=False, check_seqlens=True, shape_only=False, deterministic=False, lse=True, dbias=False,
           cu_padded=False, mask_always=False, fmt="bshd", mask="no_mask", dtype="f32", batch=1, s_q=1, s_kv=1,
           h_kv=1, group=1, d_qk=4, d_v=4, window=(-1, -1), scale=None, softcap=0.0, dropout=0.0, seed=0,
           offset=0, rng_state=None, bias="none", softmax="vanilla", sink_mismatch=False, max_logit=False, dsink=False,
           sink_of_kv_heads=False, bias_broadcast="", bias_dtype="q", bias_wrong_dim=None, mask_dtype="bool",
           mask_broadcast="", mask_wrong_dim=None, lens_q=None, lens_kv=None, max_seqlen=(0, 0),
           cu_damage="none", cu_damage_kv=False, cu_index=0, layouts=None, value_seed=1, specials=(),
           perturb=(), big=None):
    """Bytes of one seed; softmax ("off-by-one", "learnable") with sink_mismatch
    (a sink where the type wants none, or none where it wants one), max_logit,
    dsink and sink_of_kv_heads ride on the bias byte's upper values, as the
    target reads them. rng_state=n (0-127) passes dropout's seed and offset
    in an int64 [2] tensor, picked by n. Sizes are the call's own, except in shape-only mode,
    where big={field: size} picks batch, s_q, s_kv, h_kv, h_q, d_qk, d_v from
    the target's table of large sizes (default 1, and 64 for head dims)."""
    flags = (backward * 1 | (not check_seqlens) * 2 | shape_only * 4 | deterministic * 8 | (not lse) * 16
             | dbias * 32 | cu_padded * 64 | mask_always * 128)
    out = [flags, FORMATS[fmt], MASKS[mask], DTYPES[dtype]]
    if shape_only:
        sizes = dict(batch=1, s_q=1, s_kv=1, h_kv=1, h_q=1, d_qk=64, d_v=64)
        sizes.update(big or {})
        out += [BIG.index(sizes[key]) for key in ("batch", "s_q", "s_kv", "h_kv", "h_q", "d_qk", "d_v")]
    else:
        out += [(batch - 1) % 4, (s_q - 1) % 6, (s_kv - 1) % 6, h_kv - 1, group - 1, (d_qk - 4) % 8, (d_v - 4) % 8]
    out += [WINDOWS.index(window[0]), WINDOWS.index(window[1]), SCALES.index(scale), SOFTCAPS.index(softcap),
            DROPOUTS.index(dropout), seed, OFFSETS.index(offset),
            0 if rng_state is None else 1 | (rng_state << 1) & 0xFF,
            BIAS[bias] + 5 * (SOFTMAX[softmax] + 3 * (3 * sink_mismatch) + 12 * max_logit + 24 * dsink
                              + 48 * sink_of_kv_heads)]
    assert out[-1] <= 255, "sink_of_kv_heads goes with the softmax type alone (one byte)"
    bits = sum(1 << "bhqk".index(c) for c in bias_broadcast)
    if bias_wrong_dim is not None:
        bits |= 16  # one dimension one too large: which one is bits % 4, so the broadcast bits must agree
        assert bits % 4 == bias_wrong_dim, "bias_wrong_dim needs matching low bits"
    bits |= {"q": 0, "f32": 1, "i32": 4, "f64": 3}[bias_dtype] << 5
    out.append(bits)
    out.append(MASK_DTYPES[mask_dtype])
    mbits = sum(1 << "bhqk".index(c) for c in mask_broadcast)
    if mask_wrong_dim is not None:
        mbits |= 16
    out.append(mbits)
    cap_q = 5 if fmt == "thd" else s_q
    cap_kv = 5 if fmt == "thd" else s_kv
    lens_q = list(lens_q or [cap_q] * 3) + [cap_q] * 3
    lens_kv = list(lens_kv or [cap_kv] * 3) + [cap_kv] * 3
    for i in range(3):
        out += [0 if shape_only else cap_q - lens_q[i], 0 if shape_only else cap_kv - lens_kv[i]]
    codes = {0: 0, "longest": 1, "longest+1": 2, "longest-1": 3, -1: 4, "2^40": 5, "longest+5": 6}
    out += [codes[max_seqlen[0]], codes[max_seqlen[1]]]
    out += [CU_DAMAGE[cu_damage] | (8 if cu_damage_kv else 0), cu_index]
    layouts = layouts or {}
    out += [layouts.get(t, 0) for t in TENSORS]
    out += list(struct.pack("<I", value_seed))
    out.append(len(specials))
    for tensor, index, value in specials:
        out += [TENSORS.index(tensor), index, SPECIALS[value]]
    for tensor, op, arg in perturb:
        out += [TENSORS.index(tensor), PERTURB[op], arg]
    assert all(0 <= b < 256 for b in out), out
    return bytes(out)


# Layout bytes (fuzz_attention.cpp apply_layout): padding 1-3, 4 reversed
# dimensions, 8 first dimension backwards, 16 last dimension strided, 32 a
# stride-0 dimension, 64 on cuda:0, 128 no data.
PADDED, REVERSED, BACKWARDS, LAST_STRIDED, STRIDE0, ON_CUDA, NO_DATA = 3, 4, 8, 16, 32, 64, 128

SEEDS = {
    # Calls that run: every format and mask, forward and backward.
    "fwd_bshd_plain": dict(batch=2, s_q=3, s_kv=4, h_kv=2, group=2, d_qk=8, d_v=8),
    "bwd_bshd_plain": dict(backward=True, batch=2, s_q=3, s_kv=4, h_kv=2, group=2, d_qk=8, d_v=8),
    "fwd_sbhd_causal": dict(fmt="sbhd", mask="causal", batch=2, s_q=5, s_kv=5, group=3, d_qk=6, d_v=6),
    "bwd_sbhd_causal_br": dict(backward=True, fmt="sbhd", mask="causal_bottom_right", batch=1, s_q=2, s_kv=5,
                               h_kv=2, group=2, dtype="bf16"),
    "fwd_thd_gqa": dict(fmt="thd", mask="padding_causal", batch=3, h_kv=2, group=3, d_qk=8, d_v=4,
                        lens_q=[3, 0, 5], lens_kv=[3, 0, 5], dtype="bf16"),
    "bwd_thd_gqa_window": dict(backward=True, fmt="thd", mask="padding_causal", batch=3, h_kv=1, group=3, d_qk=8,
                               d_v=5, lens_q=[1, 4, 5], lens_kv=[1, 4, 5], window=(2, 0)),
    "fwd_thd_cross_lengths": dict(fmt="thd", mask="padding_causal_bottom_right", batch=3, lens_q=[2, 5, 0],
                                  lens_kv=[5, 1, 3], dtype="f16"),
    "bwd_thd_empty_batch": dict(backward=True, fmt="thd", mask="padding", batch=3, lens_q=[0, 0, 0],
                                lens_kv=[0, 2, 0]),
    "fwd_bshd_padded": dict(cu_padded=True, mask="padding", batch=3, s_q=5, s_kv=4, lens_q=[5, 0, 2],
                            lens_kv=[4, 1, 0]),
    "bwd_sbhd_padded_causal_br": dict(backward=True, cu_padded=True, fmt="sbhd", mask="padding_causal_bottom_right",
                                      batch=2, s_q=4, s_kv=5, lens_q=[4, 1], lens_kv=[2, 5], group=2),
    "fwd_window_no_mask": dict(batch=1, s_q=5, s_kv=5, window=(1, 2), d_qk=3, d_v=7),
    "bwd_window_left_only": dict(backward=True, batch=1, s_q=5, s_kv=3, window=(0, -1), dtype="f64"),
    "fwd_window_2_62": dict(batch=1, s_q=4, s_kv=4, window=("2^62", "2^62")),
    "fwd_softcap_scale": dict(batch=1, s_q=3, s_kv=5, softcap=5.0, scale=0.25, dtype="f16"),
    "bwd_softcap_dropout": dict(backward=True, batch=2, s_q=4, s_kv=4, softcap=30.0, dropout=0.25, seed=7,
                                offset=2**32 - 1),
    "fwd_dropout_rng_state": dict(batch=2, s_q=4, s_kv=4, dropout=0.25, rng_state=3, group=2),
    "bwd_dropout_rng_state_thd": dict(backward=True, fmt="thd", mask="padding_causal", batch=2, lens_q=[3, 5],
                                      lens_kv=[3, 5], dropout=0.1, rng_state=42),
    "fwd_dropout_f16": dict(batch=2, s_q=5, s_kv=5, dropout=0.1, seed=3, offset=7, dtype="f16"),
    "fwd_bias_full": dict(bias="bias", batch=2, s_q=3, s_kv=4, group=2),
    "bwd_bias_broadcast_dbias": dict(backward=True, dbias=True, bias="bias", bias_broadcast="bq", batch=2, s_q=3,
                                     s_kv=4, group=2, bias_dtype="f32"),
    "bwd_bias_dbias_bf16": dict(backward=True, dbias=True, bias="bias", bias_broadcast="h", batch=1, s_q=4, s_kv=4,
                                dtype="bf16", mask="causal"),
    "fwd_alibi": dict(bias="alibi", mask="causal", batch=1, s_q=4, s_kv=4, group=3),
    "bwd_alibi_batch_br": dict(backward=True, bias="alibi_batch", mask="causal_bottom_right", batch=2, s_q=2,
                               s_kv=5, group=2),
    "fwd_arbitrary_bool": dict(mask="arbitrary", mask_dtype="bool", batch=2, s_q=4, s_kv=5, group=2),
    "bwd_arbitrary_additive": dict(backward=True, mask="arbitrary", mask_dtype="f32", mask_broadcast="h", batch=1,
                                   s_q=5, s_kv=5, window=(3, 1)),
    "fwd_arbitrary_u8_thd": dict(fmt="thd", mask="arbitrary", mask_dtype="u8", batch=2, lens_q=[2, 3],
                                 lens_kv=[4, 1]),
    "fwd_unchecked_seqlens": dict(fmt="thd", mask="padding", check_seqlens=False, max_seqlen=("longest", "longest+1"),
                                  batch=3, lens_q=[1, 2, 3], lens_kv=[3, 2, 1]),
    "bwd_strided_layouts": dict(backward=True, batch=2, s_q=3, s_kv=4, group=2,
                                layouts={"q": PADDED, "k": REVERSED | 1, "v": BACKWARDS | 2, "out": 1,
                                         "dout": REVERSED, "dq": 2, "dk": BACKWARDS, "dv": PADDED, "lse": 1}),
    "fwd_stride0_inputs": dict(batch=2, s_q=3, s_kv=3, layouts={"k": STRIDE0, "v": STRIDE0 | 1}),
    "fwd_nan_in_q": dict(batch=1, s_q=3, s_kv=3, specials=[("q", 4, "nan")]),
    "bwd_inf_in_v": dict(backward=True, batch=1, s_q=3, s_kv=3, specials=[("v", 2, "inf"), ("k", 0, "-1e30")]),
    # Calls validation refuses.
    "bad_dtype_int": dict(dtype="i32"),
    "bad_heads_ratio": dict(h_kv=2, group=1, perturb=[("k", "dim+-1", 2 + 8)]),
    "bad_rank": dict(perturb=[("q", "rank", 2)]),
    "bad_last_dim_strided": dict(layouts={"v": LAST_STRIDED}),
    "bad_window": dict(window=(-2, 0)),
    "bad_window_huge": dict(window=(0, "max-1")),
    "bad_scale_nan": dict(scale="nan"),
    "bad_softcap": dict(softcap=-1.0),
    "bad_dropout_one": dict(dropout=1.0),
    "bad_offset": dict(dropout=0.1, offset=2**32),
    "bad_dbias_no_bias": dict(backward=True, dbias=True, perturb=[("dbias", "rank", 3)]),
    "bad_rng_state_dtype": dict(dropout=0.1, rng_state=1, perturb=[("rng_state", "dtype", 0)]),
    "bad_rng_state_shape": dict(dropout=0.1, rng_state=1, perturb=[("rng_state", "rank", 1)]),
    "bad_alibi_and_bias": dict(bias="bias_and_alibi"),
    "fwd_sink_learnable_max_logit": dict(softmax="learnable", max_logit=True, mask="causal", batch=2, s_q=3, s_kv=5,
                                         group=2),
    "bwd_sink_learnable_dsink_thd": dict(backward=True, softmax="learnable", dsink=True, fmt="thd", mask="padding_causal",
                                         batch=3, lens_q=(2, 0, 3), lens_kv=(2, 0, 3), window=(1, 0)),
    "bwd_sink_off_by_one_padded": dict(backward=True, softmax="off-by-one", mask="padding", cu_padded=True, batch=2,
                                       s_q=4, s_kv=4, lens_q=(4, 1), lens_kv=(2, 4)),
    "bad_sink_missing": dict(softmax="learnable", sink_mismatch=True),
    "bad_sink_for_vanilla": dict(sink_mismatch=True),
    "bad_sink_of_kv_heads": dict(softmax="learnable", sink_of_kv_heads=True, group=2),
    "bad_dsink_off_by_one": dict(backward=True, softmax="off-by-one", dsink=True),
    "bad_mask_without_arbitrary": dict(mask_always=True),
    "bad_cu_without_padding": dict(cu_padded=True, mask="causal", batch=2, s_q=3, s_kv=3),
    "bad_cu_last": dict(fmt="thd", mask="padding", batch=2, cu_damage="last+1"),
    "bad_cu_decreasing": dict(fmt="thd", mask="padding", batch=3, lens_q=[1, 5, 5], cu_damage="minus2", cu_index=1),
    "bad_max_seqlen_negative": dict(shape_only=True, fmt="thd", mask="padding", check_seqlens=False,
                                    max_seqlen=(-1, 0)),
    "bad_max_seqlen_small": dict(fmt="thd", mask="padding", batch=2, max_seqlen=("longest-1", 0)),
    "bad_device": dict(layouts={"k": ON_CUDA}),
    "bad_cu_on_cuda": dict(fmt="thd", mask="padding", batch=2, layouts={n: ON_CUDA for n in TENSORS}),
    "bad_null_data": dict(layouts={"v": NO_DATA}),
    "shape_only_big": dict(shape_only=True, fmt="bshd", big={"batch": 64, "s_q": 2**31, "s_kv": 2**31,
                                                             "h_kv": 64, "h_q": 64, "d_qk": 64, "d_v": 64}),
    "shape_only_thd_unchecked": dict(shape_only=True, fmt="thd", mask="padding", check_seqlens=False, max_seqlen=("2^40", "2^40"),
                           big={"s_q": 2**32, "s_kv": 2**32, "h_kv": 7, "h_q": 7, "d_qk": 64, "d_v": 64}),
    # The inputs of the bugs the fuzzer found (each threw no attn::Error, or ran into UB, before its fix).
    # TensorView::numel() overflowed on [2^62, 2^31-1, 0, 0]-like views (an empty dimension after huge ones).
    "regress_numel_empty_dim": dict(shape_only=True, big={"batch": 2**62, "s_q": 2**31 - 1, "s_kv": 0, "h_kv": 0,
                                                          "h_q": 0, "d_qk": 0, "d_v": 0}),
    # q [2^20, 2^62, 0, 64]: batch * seq overflowed in validation's read_sizes.
    "regress_tokens_overflow": dict(shape_only=True, big={"batch": 2**20, "s_q": 2**62, "s_kv": 1, "h_kv": 0,
                                                          "h_q": 0, "d_qk": 64, "d_v": 64}),
    # batch 2^63-1 with cu_seqlens: batch + 1 overflowed in the length check.
    "regress_cu_batch_overflow": dict(shape_only=True, cu_padded=True, mask="padding",
                                      big={"batch": 2**63 - 1, "s_q": 1, "s_kv": 1, "h_kv": 0, "h_q": 0,
                                           "d_qk": 1, "d_v": 1}),
    # A window of 2^63-2 keys: i + shift + right + 1 overflowed in the mask rule (every key hidden).
    "regress_window_overflow": dict(batch=1, s_q=3, s_kv=3, window=(-1, "max-1")),
    # check_seqlens off, an offset of INT32_MIN: cu[b + 1] - cu[b] overflowed in int.
    "regress_cu_int32_min": dict(fmt="thd", mask="padding", check_seqlens=False, max_seqlen=("longest", "longest"),
                                 batch=2, cu_damage="int32_min", cu_index=1),
    # validate_forward with thd cu_seqlens without data read a null pointer.
    "regress_cu_null_data": dict(shape_only=True, fmt="thd", mask="padding", layouts={"cu_seqlens_q": NO_DATA},
                                 big={"s_q": 3, "s_kv": 3, "h_kv": 1, "h_q": 1, "d_qk": 64, "d_v": 64}),
    # A stride of 2^63-1 elements: stride * element size overflowed in row_alignment.
    "regress_stride_bytes": dict(shape_only=True, big={"batch": 1, "s_q": 2, "s_kv": 2, "h_kv": 1, "h_q": 1,
                                                       "d_qk": 64, "d_v": 64},
                                 perturb=[("q", "stride", 1 + 8 * 7)]),
}


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    os.makedirs(out_dir, exist_ok=True)
    for name, fields in SEEDS.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(encode(**fields))
    print(f"{len(SEEDS)} seeds in {out_dir}")


if __name__ == "__main__":
    main()
