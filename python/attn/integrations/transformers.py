"""attn as a HuggingFace transformers attention implementation.

    import attn.integrations.transformers as attn_hf
    attn_hf.register()                       # once per process
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="attn")
    model.set_attn_implementation("attn")    # or switch a loaded model

Written for transformers 5.x (AttentionInterface and AttentionMaskInterface),
tested with 5.17.0. register() adds "attn" to both interfaces:
- the mask function hands the attention function transformers' 2-D padding
  mask (or None), as for flash_attention_2, never a dense [b, 1, s_q, s_kv]
  mask, for causal, bidirectional, sliding-window and packed sequences; a
  model whose mask is more than that (bidirectional image blocks, chunked
  attention, custom overlays) gets the dense boolean mask, which attn runs as
  an "arbitrary" mask (slow paths only, but correct);
- the attention function takes q/k/v as transformers passes them ([b, h, s,
  d] strided views) and gives attn their bshd transposes: no copies. Causal
  attention is aligned bottom-right (KV-cache decoding); right-padded batches
  become cu_seqlens over the padded tensors (no copy); other padding (left
  padding, as in generation) gathers the real tokens into a packed thd batch,
  as transformers' flash_attention_2 does; packed sequences (position_ids that
  restart, or cu_seq_lens_q/k keyword arguments) run as thd. GQA, sliding
  windows (`sliding_window`), softcap (Gemma-2) and dropout go to attn as they
  are.
"""

import weakref
from typing import Any, Optional, Tuple

import torch

from attn.torch import attention

__all__ = ["register", "attention_forward", "paged_attention_forward", "attention_mask", "NAME"]

NAME = "attn"
Tensor = torch.Tensor


def register(name: str = NAME) -> str:
    """Adds attn to transformers' AttentionInterface and AttentionMaskInterface
    under `name` (default "attn"), so attn_implementation=name selects it.
    Idempotent. Returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, attention_forward)
    AttentionInterface.register("paged|" + name, paged_attention_forward)
    AttentionMaskInterface.register(name, attention_mask)
    return name


# ---- the mask function ---------------------------------------------------------------


# Mask functions attn expresses without a dense mask: causal or bidirectional,
# the sliding window (the attention function gets its size), and packed
# sequences in one row (read from position_ids). Anything else (or_masks,
# chunked attention, image blocks, custom overlays) gets the dense mask.
_EXPRESSED = ("causal_mask_function", "bidirectional_mask_function", "sliding_window_overlay.<locals>.inner_mask",
              "sliding_window_bidirectional_overlay.<locals>.inner_mask")
_PACKED = "packed_sequence_mask_function.<locals>.inner_mask"


def _leaves(fn: Any) -> list:
    """Qualified names of the functions an and_masks() combination is made of."""
    name = getattr(fn, "__qualname__", repr(fn))
    if name != "and_masks.<locals>.and_mask":
        return [name]
    parts = [c.cell_contents for c in (fn.__closure__ or ())]
    funcs = [f for p in parts for f in (p if isinstance(p, (tuple, list)) else (p,)) if callable(f)]
    return [leaf for f in funcs for leaf in _leaves(f)]


def _expressible(mask_function: Any, batch_size: int) -> bool:
    if mask_function is None:
        return True
    leaves = _leaves(mask_function)
    ok = set(_EXPRESSED) | ({_PACKED} if batch_size == 1 else set())
    return all(leaf in ok for leaf in leaves)


def attention_mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0,
                   mask_function: Any = None, attention_mask: Optional[Tensor] = None, use_vmap: bool = False,
                   **kwargs: Any) -> Optional[Tensor]:
    """transformers' mask hook: the 2-D padding mask (or None), or a dense
    boolean mask where a model's mask function is more than attn expresses."""
    from transformers import masking_utils as mu

    if use_vmap or not _expressible(mask_function, batch_size):
        kwargs.update(allow_is_causal_skip=False, allow_is_bidirectional_skip=False)
        return mu.sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                            kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask,
                            use_vmap=use_vmap, **kwargs)
    if attention_mask is not None and _capturing(attention_mask):
        mask = attention_mask[:, -kv_length:]  # flash_attention_mask's .all() would wait for the GPU
    else:
        mask = mu.flash_attention_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length,
                                       q_offset=q_offset, kv_offset=kv_offset, attention_mask=attention_mask)
    # A static cache's mask spans the whole cache, its columns past the
    # queries unfilled: the queries end at column q_offset + q_length, not at
    # the mask's end. The offset is a tensor there, which the layers' cache
    # updates move on in place, so its sum is taken now (on the device).
    if mask is not None and kv_offset == 0 and q_offset is not None:
        q_end = q_offset + q_length
        if isinstance(q_end, torch.Tensor) or q_end < mask.shape[1]:
            mask = mask[:, :]  # a view of our own to carry it
            mask._attn_q_end = q_end
    return mask


# ---- from transformers' masks to attn's sequences --------------------------------------

# The same mask (and position_ids) reach every layer of a forward pass; their
# analysis needs one host sync, so it is kept for the next layers, keyed on
# the tensor's identity and version (a weak reference proves identity).
_CACHE: dict = {}
_CACHE_SIZE = 8


def _cached(t: Tensor, extra: tuple, build: Any) -> Any:
    if torch.compiler.is_compiling():
        return build()
    key = (id(t), t._version, t.data_ptr()) + extra
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is t:
        return hit[1]
    value = build()
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = (weakref.ref(t), value)
    return value


def _capturing(t: Tensor) -> bool:
    """Whether a CUDA graph is being captured on t's device (nothing may wait for the GPU)."""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def _cu(lengths: Tensor) -> Tensor:
    return torch.nn.functional.pad(torch.cumsum(lengths, 0, dtype=torch.int32), (1, 0))


def _key_columns(mask: Tensor, s_kv: int) -> Tensor:
    """The 2-D mask as booleans over the keys' columns (the last s_kv; wider never comes from transformers)."""
    m = mask.to(torch.bool)
    return m[:, -s_kv:] if m.shape[1] > s_kv else m


def _right_padding(m: Tensor, s_q: int, end: Any) -> tuple:
    """m [b, L] (bool) read as right padding, the queries the s_q columns
    before `end` (an int, or a tensor on the device): the key lengths, the
    query lengths (len_q = len_kv - (end - s_q)) and whether m is that (each
    row a prefix reaching the queries), all as tensors: no host read."""
    cols = torch.arange(m.shape[1], device=m.device)
    lengths = m.sum(dim=1, dtype=torch.int32)
    q_lengths = lengths - (end - s_q)
    ok = ((cols[None, :] < lengths[:, None]) == m).all() & (q_lengths >= 0).all()
    return lengths, q_lengths, ok


class _Padding:
    """How a 2-D mask [b, L] (True = real token) maps onto attn's sequences.
    Queries are the s_q columns before q_end (a static cache's unfilled
    columns follow them), else the last s_q columns (transformers' convention
    with a dynamic cache)."""

    def __init__(self, mask: Tensor, s_q: int, s_kv: int, q_end: Any = None) -> None:
        m = _key_columns(mask, s_kv)
        if q_end is not None:
            m = m[:, :int(q_end)]
        b, L = m.shape
        self.L = L
        # Right padding with every sequence reaching the query rows: cu_seqlens
        # over the padded tensors describe it exactly (query i of sequence b
        # sits at column L - s_q + i).
        lengths, q_lengths, ok = _right_padding(m, s_q, L)
        self.right_padded = bool(ok)  # the one host sync
        if self.right_padded:
            self.cu_kv = _cu(lengths)
            self.cu_q = _cu(q_lengths)
        else:
            q_m = m[:, L - s_q:]
            self.m, self.q_m = m, q_m
            self.cu_kv = _cu(lengths)
            self.cu_q = _cu(q_m.sum(dim=1, dtype=torch.int32))
            self.max_q = int(q_m.sum(dim=1).max()) if b else 0
            self.max_kv = int(lengths.max()) if b else 0


def _packed_cu_seqlens(position_ids: Optional[Tensor], b: int, s_q: int, s_kv: int) -> Optional[tuple]:
    """cu_seqlens of sequences packed into one row, told by position_ids that
    restart (as transformers' flash_attention_2 reads them), or None."""
    if position_ids is None or b != 1 or s_q != s_kv or s_q < 2 or _capturing(position_ids):
        return None  # (inside a CUDA graph capture the restarts cannot be read: one sequence)

    def build() -> Optional[tuple]:
        pos = position_ids.reshape(-1)[-s_q:]
        starts = torch.nonzero(pos[1:] != pos[:-1] + 1).reshape(-1) + 1
        if starts.numel() == 0:
            return None
        bounds = torch.cat([starts.new_zeros(1), starts, starts.new_full((1,), s_q)])
        cu, longest = bounds.to(torch.int32), int(bounds.diff().max())
        return (cu, cu), (longest, longest)

    return _cached(position_ids, ("packed", s_q), build)


# ---- the attention function ------------------------------------------------------------


def attention_forward(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor,
                      attention_mask: Optional[Tensor], dropout: float = 0.0, scaling: Optional[float] = None,
                      sliding_window: Optional[int] = None, softcap: Optional[float] = None,
                      is_causal: Optional[bool] = None, **kwargs: Any) -> Tuple[Tensor, None]:
    """transformers' attention-function signature: query [b, h_q, s_q, d],
    key/value [b, h_kv, s_kv, d] (any strides), attention_mask from
    attention_mask() above (None, 2-D, or a 4-D mask a caller built). Returns
    (out [b, s_q, h_q, d_v], None): attention weights are never materialized."""
    if kwargs.get("position_bias") is not None:
        raise NotImplementedError("attn: position_bias is not supported; use attn_implementation=\"sdpa\"")
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)  # bshd views, no copies
    if k.dtype != q.dtype:  # e.g. float32 queries from an upcast norm (PEFT) against a bf16 cache
        k, v = k.to(q.dtype), v.to(q.dtype)
    b, s_q, h, _ = q.shape
    s_kv, d_v = k.shape[1], v.shape[-1]
    causal = bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)
    window = (-1, -1)
    if sliding_window is not None and sliding_window > 0:
        # transformers: key j visible when i - j < sliding_window (both sides if not causal); attn counts inclusively.
        window = (sliding_window - 1, 0 if causal else sliding_window - 1)
    kw = dict(softmax_scale=scaling, softcap=float(softcap or 0.0), dropout_p=float(dropout), window=window)
    if kwargs.get("s_aux") is not None:  # gpt-oss's attention sinks: a learnable logit per query head
        kw.update(softmax_type="learnable", sink=kwargs["s_aux"].float())

    if attention_mask is not None and attention_mask.dim() == 4:
        # A dense mask (True or 0 = visible, as for SDPA): attn's "arbitrary" mask. It already holds causality.
        m = attention_mask[..., :s_kv]
        out = attention(q, k, v, mask="arbitrary", attn_mask=m, **kw)
        return out, None

    if attention_mask is None:
        varlen = _varlen_kwargs(kwargs, b)  # the caller's cu_seqlens: checked
        packed = varlen or _packed_cu_seqlens(kwargs.get("position_ids"), b, s_q, s_kv)
        if packed is not None:  # several sequences in one row: thd over the same memory
            (cu_q, cu_kv), (max_q, max_kv) = packed
            out = attention(q.reshape(-1, h, q.shape[-1]), k.reshape(-1, k.shape[2], k.shape[3]),
                            v.reshape(-1, v.shape[2], d_v), qkv_format="thd",
                            mask="padding_causal_bottom_right" if causal else "padding", cu_seqlens_q=cu_q,
                            cu_seqlens_kv=cu_kv, max_seqlen_q=max_q, max_seqlen_kv=max_kv,
                            check_seqlens=varlen is not None, **kw)
            return out.view(b, s_q, h, d_v), None
        out = attention(q, k, v, mask="causal_bottom_right" if causal else "no_mask", **kw)
        return out, None

    # From here on cu_seqlens are _Padding's, valid by construction: attn need not
    # read them back (a wait for the GPU in each pass of each layer).
    q_end = getattr(attention_mask, "_attn_q_end", None)
    if _capturing(attention_mask):
        return _captured_padding(q, k, v, attention_mask, q_end, causal, kw), None
    pad = _cached(attention_mask, (s_q, s_kv), lambda: _Padding(attention_mask, s_q, s_kv, q_end))
    if pad.right_padded:  # cu_seqlens over the padded tensors, no copy
        out = attention(q, k, v, mask="padding_causal_bottom_right" if causal else "padding",
                        cu_seqlens_q=pad.cu_q, cu_seqlens_kv=pad.cu_kv, max_seqlen_q=s_q, max_seqlen_kv=s_kv,
                        check_seqlens=False, **kw)
        return out, None
    # Left padding or holes: gather the real tokens into a packed batch. Bottom-right
    # alignment on the packed sequences is exact: the real queries are the last
    # real keys of each sequence.
    L = pad.L
    out_t = attention(q[pad.q_m], k[:, :L][pad.m], v[:, :L][pad.m], qkv_format="thd",
                      mask="padding_causal_bottom_right" if causal else "padding", cu_seqlens_q=pad.cu_q,
                      cu_seqlens_kv=pad.cu_kv, max_seqlen_q=max(pad.max_q, 1), max_seqlen_kv=max(pad.max_kv, 1),
                      check_seqlens=False, **kw)  # (0 would ask attn to read the maxima)
    out = out_t.new_zeros(b, s_q, h, d_v).index_put((pad.q_m,), out_t)  # padding rows: 0
    return out, None


def _captured_padding(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, q_end: Any, causal: bool, kw: dict) -> Tensor:
    """A 2-D mask inside a CUDA graph capture, where nothing may wait for the
    GPU: the mask is taken as right padding (no padding, or a static cache's
    unfilled columns), its lengths computed on the device, so a replay reads
    the new mask and lengths. Left padding needs its token counts on the host
    (the gather above) and cannot be captured: a replayed step whose mask is
    not right padding writes NaN (visible), never another answer."""
    s_q, s_kv = q.shape[1], k.shape[1]
    m = _key_columns(mask, s_kv)
    end = m.shape[1] if q_end is None else q_end
    m = m & (torch.arange(m.shape[1], device=m.device) < end)[None, :]  # a static cache's unfilled columns out
    lengths, q_lengths, ok = _right_padding(m, s_q, end)
    # Clamped so that the lengths are valid whatever the mask (the output is NaN where it was not right padding).
    out = attention(q, k, v, mask="padding_causal_bottom_right" if causal else "padding",
                    cu_seqlens_q=_cu(q_lengths.clamp(0, s_q)), cu_seqlens_kv=_cu(lengths), max_seqlen_q=s_q,
                    max_seqlen_kv=s_kv, check_seqlens=False, **kw)
    return out.masked_fill(~ok, float("nan"))


# ---- continuous batching ("paged|attn") ------------------------------------------------


def paged_attention_forward(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor,
                            attention_mask: Optional[Tensor], cache: Any = None, cu_seq_lens_q: Optional[Tensor] = None,
                            cu_seq_lens_k: Any = None, max_seqlen_q: Any = None, max_seqlen_k: Any = None,
                            block_table: Optional[Tensor] = None, dropout: float = 0.0,
                            scaling: Optional[float] = None, **kwargs: Any) -> Tuple[Tensor, None]:
    """transformers' continuous batching (generate_batch, its serving API)
    over its paged cache, as its "paged|flash_attention_2" does without a
    block table: query [1, h_q, T, d] holds the batch's requests packed (a
    prompt chunk, or one new token each); the cache writes the new keys and
    gathers each request's (cache.update), and attn runs the batch as thd,
    bottom-right causal per request. Returns (out [T, h_q, d_v], None).
    transformers 5.17 hands block tables (its decode fast path) to
    FlashAttention 2/3 only; one given here is refused with a reason."""
    del attention_mask, dropout  # continuous batching passes flash-style functions no mask, and serves inference
    if cache is None:
        raise ValueError("attn: \"paged|attn\" runs inside transformers' continuous batching (generate_batch), "
                         "which passes its paged cache; use attn_implementation=\"attn\" for a standard forward")
    if block_table is not None:
        raise NotImplementedError("attn: transformers passed a block table (its decode fast path), which "
                                  "\"paged|attn\" does not take; set ContinuousBatchingConfig(max_blocks_per_request=0)")
    window = (module.sliding_window - 1, 0) if getattr(module, "sliding_window", None) else (-1, -1)
    if isinstance(cu_seq_lens_k, dict):  # one per layer type
        layer_type = "full_attention" if window == (-1, -1) else "sliding_attention"
        cu_seq_lens_k, max_seqlen_k = cu_seq_lens_k[layer_type], max_seqlen_k[layer_type]
    kw: dict = dict(softmax_scale=scaling, window=window)
    if kwargs.get("s_aux") is not None:
        kw.update(softmax_type="learnable", sink=kwargs["s_aux"].float())
    k, v = cache.update(key_states=key, value_states=value, layer_idx=module.layer_idx,
                        read_index=kwargs["read_index"], write_index=kwargs["write_index"])  # [T_kv, h_kv, d]
    out = attention(query[0].transpose(0, 1), k, v, qkv_format="thd", mask="padding_causal_bottom_right",
                    cu_seqlens_q=cu_seq_lens_q.to(torch.int32), cu_seqlens_kv=cu_seq_lens_k.to(torch.int32),
                    max_seqlen_q=max(int(max_seqlen_q), 1), max_seqlen_kv=max(int(max_seqlen_k), 1),
                    check_seqlens=False, **kw)
    return out, None


def _varlen_kwargs(kwargs: dict, b: int) -> Optional[tuple]:
    """transformers' padding-free keywords (DataCollatorWithFlattening):
    cu_seq_lens_q / cu_seq_lens_k / max_length_q / max_length_k."""
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is None or cu_k is None:
        return None
    max_q, max_k = kwargs.get("max_length_q"), kwargs.get("max_length_k")
    return ((cu_q.to(torch.int32), cu_k.to(torch.int32)),
            (None if max_q is None else int(max_q), None if max_k is None else int(max_k)))
