"""attn.torch's differentiable call and its TransformerEngine-style module
(attn.torch re-exports them; attn.layer builds on them): the call object, the
torch.library custom ops `attn::forward` and `attn::backward`, the eager
autograd Function, attention(), alibi_slopes() and DotProductAttention.

The custom ops are opaque to torch.compile (no graph breaks), with fake (meta)
implementations for tracing and autograd registered through
torch.library.register_autograd, which wraps them in a torch.autograd.Function.
Dropout draws a fresh 64-bit seed per call from PyTorch's default CPU
generator (so torch.manual_seed reproduces it), offset 0, and the backward
reuses it.
"""

import math
from typing import Any, List, NamedTuple, Optional, Tuple, Union

import torch

from attn import _C
from attn import _arrays
from attn import _keywords
from attn._arrays import torch_capsule as _capsule
from attn._arrays import torch_tensor_stream as _stream
from torch.utils.dlpack import to_dlpack

Tensor = torch.Tensor


def _lse_shape(q: Tensor, qkv_format: str) -> List[int]:
    # [0] for a rank that does not fit the format: the real op reports it.
    # (q.shape as it is: under torch.compile its sizes may be symbolic.)
    return list(_arrays.lse_shape(tuple(q.shape), qkv_format) or [0])


_NO_EXTRAS = (None, None, None, None, None)  # cu_seqlens_q, cu_seqlens_kv, bias, alibi_slopes, attn_mask
_NO_DISABLE: List[str] = []


class _CallFields(NamedTuple):
    """What one attention call chose (see _Call)."""

    qkv_format: str
    mask: str  # normalized: _keywords.mask_name
    window: Tuple[int, int]
    softmax_scale: Optional[float]
    softcap: float
    max_seqlen_q: int  # 0: derive from cu_seqlens_q
    max_seqlen_kv: int
    dropout_p: float
    seed: int
    offset: int
    deterministic: bool
    backend: Optional[str]
    cu_seqlens_q: Optional[Tensor] = None
    cu_seqlens_kv: Optional[Tensor] = None
    alibi_slopes: Optional[Tensor] = None
    attn_mask: Optional[Tensor] = None
    check_seqlens: bool = True
    softmax_type: str = "vanilla"  # "learnable": the sink travels beside bias (it has a gradient)


class _Call(_CallFields):
    """One attention call as both passes need it, immutable: its options,
    normalized (attention() builds it once), and the inputs that carry no
    gradient. The eager autograd Function carries it whole; the custom ops,
    whose schema is flat, get it from op_args() and rebuild it with
    from_op_args(), the one place each.

    A NamedTuple, not a frozen dataclass: construction is a tuple's, where a
    frozen dataclass's 17 guarded attribute writes cost about 3 us more per
    call (measured on the CPU), and torch.compile traces either.

    The passes call attn._C directly, with positional arguments: every tensor
    here is PyTorch's, so the array-generic layer of attn.forward (framework
    dispatch, allocation through _arrays, keyword parsing) would only add host
    time, which shows when a model makes many small calls (bench/overhead.py)."""

    @property
    def opts(self) -> Any:
        """The compiled core's Options, made on first use by a pass (never while
        torch.compile traces) and kept for the other pass."""
        cache = self.__dict__
        o = cache.get("opts")
        if o is None:
            o = cache["opts"] = _keywords.options(
                self.qkv_format, self.mask, self.window, self.softmax_scale, self.softcap, self.max_seqlen_q,
                self.max_seqlen_kv, self.dropout_p, self.seed, self.offset, self.deterministic, self.check_seqlens,
                self.softmax_type)
        return o

    # ---- the flat spelling of the custom ops (_OP_ARGS) ----

    def op_args(self, bias: Optional[Tensor], sink: Optional[Tensor], rng_state: Optional[Tensor] = None) -> tuple:
        """The ops' arguments after their own tensors, in _OP_ARGS order. The
        seed travels in a tensor (rng_state), so that a compiled graph does not
        hold it as a constant: the one given (int64 [2] (seed, offset) on q's
        device, drawn in the graph), or this call's seed as an int64 CPU
        tensor [seed_lo32, seed_hi32, offset]."""
        if rng_state is None and self.dropout_p > 0:
            rng_state = torch.tensor([self.seed & 0xFFFFFFFF, self.seed >> 32, self.offset], dtype=torch.int64)
        return (self.cu_seqlens_q, self.cu_seqlens_kv, bias, self.alibi_slopes, self.attn_mask, rng_state, sink,
                self.qkv_format, self.mask, self.window[0], self.window[1], self.softmax_scale, self.softcap,
                self.max_seqlen_q, self.max_seqlen_kv, self.dropout_p, self.deterministic, self.backend,
                self.check_seqlens, self.softmax_type)

    @classmethod
    def from_op_args(cls, cu_seqlens_q, cu_seqlens_kv, bias, alibi_slopes, attn_mask, rng_state, sink, qkv_format,
                     mask, window_left, window_right, softmax_scale, softcap, max_seqlen_q, max_seqlen_kv, dropout_p,
                     deterministic, backend, check_seqlens,
                     softmax_type) -> Tuple["_Call", Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
        """(call, bias, sink, device_rng_state) from op_args()'s tuple, inside
        the ops' real implementations; device_rng_state: an rng_state drawn in
        the graph, which the kernels read themselves (None: the seed is the call's)."""
        device_rng = rng_state if rng_state is not None and rng_state.numel() == 2 else None
        seed, offset = (0, 0) if rng_state is None or device_rng is not None else _seed_offset(rng_state)
        call = cls(qkv_format, mask, (window_left, window_right), softmax_scale, softcap, max_seqlen_q,
                   max_seqlen_kv, dropout_p, seed, offset, deterministic, backend, cu_seqlens_q, cu_seqlens_kv,
                   alibi_slopes, attn_mask, check_seqlens, softmax_type)
        return call, bias, sink, device_rng

    # ---- the passes ----

    def _extras(self, bias: Optional[Tensor]) -> tuple:
        """The optional inputs in _C's positional order (capsules are single use: made per pass)."""
        if (bias is None and self.cu_seqlens_q is None and self.cu_seqlens_kv is None and self.alibi_slopes is None
                and self.attn_mask is None):
            return _NO_EXTRAS
        c = _capsule
        return c(self.cu_seqlens_q), c(self.cu_seqlens_kv), c(bias), c(self.alibi_slopes), c(self.attn_mask)

    def _capture_workspace(self, q: Tensor, rng_state: Optional[Tensor]) -> Any:
        """PyTorch's allocator for the workspace under CUDA graph capture (else
        None: attn's pool). Dropout there needs its seed in device memory
        (capture_rng_state), or every replay would drop the same elements."""
        ws = _arrays.torch_capture_workspace(q)
        if ws is not None and self.dropout_p > 0 and rng_state is None:
            raise RuntimeError(
                "attn: dropout inside CUDA graph capture through torch.compile's custom op: its seed is a host "
                "value, so every replay would drop the same elements. Capture the eager attn.torch.attention, "
                "which draws the seed on the device, or capture with dropout_p=0.")
        return ws

    def capture_rng_state(self, q: Tensor) -> Optional[Tensor]:
        """Under CUDA graph capture with dropout: (seed, 0) drawn on the device
        by PyTorch's CUDA generator, which advances on every replay, so each
        replay drops fresh elements; both passes read it. None otherwise."""
        if self.dropout_p == 0 or _arrays.torch_capture_workspace(q) is None:
            return None
        return _device_rng_state(q)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], sink: Optional[Tensor] = None,
                rng_state: Optional[Tensor] = None, need_lse: bool = True) -> Tuple[Tensor, Optional[Tensor]]:
        """(out, lse); lse is None with need_lse=False (the call then writes none)."""
        out = q.new_empty(q.shape[:-1] + v.shape[-1:])
        lse = q.new_empty(_lse_shape(q, self.qkv_format), dtype=torch.float32) if need_lse else None
        try:
            _C.forward(self.opts, to_dlpack(q), to_dlpack(k), to_dlpack(v), to_dlpack(out), _capsule(lse),
                       *self._extras(bias), self.backend, _NO_DISABLE, _stream(q),
                       self._capture_workspace(q, rng_state), _capsule(rng_state), _capsule(sink))
        except (TypeError, ValueError) as e:
            _arrays.adapt_error(e, "torch")
            raise
        return out, lse

    def backward(self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                 bias: Optional[Tensor], bias_grad: bool, sink: Optional[Tensor] = None, sink_grad: bool = False,
                 rng_state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor, Optional[Tensor],
                                                               Optional[Tensor]]:
        # Gradients arriving from reductions are often expanded (stride 0); attn
        # needs a contiguous last dimension.
        if dout.dim() and dout.shape[-1] > 1 and dout.stride(-1) != 1:
            dout = dout.contiguous()
        dq, dk, dv = q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)
        dbias = bias.new_empty(bias.shape) if bias_grad else None
        dsink = sink.new_empty(sink.shape, dtype=torch.float32) if sink_grad else None
        try:
            _C.backward(self.opts, to_dlpack(q), to_dlpack(k), to_dlpack(v), to_dlpack(out), to_dlpack(dout),
                        to_dlpack(lse), to_dlpack(dq), to_dlpack(dk), to_dlpack(dv), _capsule(dbias),
                        *self._extras(bias), self.backend, _NO_DISABLE, _stream(q),
                        self._capture_workspace(q, rng_state), _capsule(rng_state), _capsule(sink),
                        _capsule(dsink))
        except (TypeError, ValueError) as e:
            _arrays.adapt_error(e, "torch")
            raise
        return dq, dk, dv, dbias, dsink


def _device_rng_state(q: Tensor) -> Tensor:
    """(seed, 0), int64 [2] on q's device, the seed drawn by q's device's
    generator (a CUDA graph's replays advance it). Below 2^62: torch.compile
    passes randint's range to its kernel as a signed 64-bit integer."""
    seed = torch.randint(0, 1 << 62, (1,), device=q.device, dtype=torch.int64)
    return torch.cat([seed, torch.zeros_like(seed)])


def _seed_offset(rng_state: Tensor) -> Tuple[int, int]:
    """rng_state: int64 CPU tensor [seed_lo32, seed_hi32, offset]."""
    lo, hi, offset = (int(x) for x in rng_state.tolist())
    return lo | (hi << 32), offset


# ---- the custom ops (torch.compile) ----------------------------------------------

# The ops' arguments after their own tensors (the forward's q, k, v; the
# backward's dout, q, k, v, out, lse): a _Call and its bias, flat, as
# _Call.op_args() makes them and _Call.from_op_args() reads them. Written as
# the schema torch.library would infer from annotations.
_OP_ARGS = (
    ("cu_seqlens_q", "Tensor?"), ("cu_seqlens_kv", "Tensor?"), ("bias", "Tensor?"), ("alibi_slopes", "Tensor?"),
    ("attn_mask", "Tensor?"), ("rng_state", "Tensor?"), ("sink", "Tensor?"), ("qkv_format", "str"),
    ("mask", "str"), ("window_left", "SymInt"), ("window_right", "SymInt"), ("softmax_scale", "float?"),
    ("softcap", "float"), ("max_seqlen_q", "SymInt"), ("max_seqlen_kv", "SymInt"), ("dropout_p", "float"),
    ("deterministic", "bool"), ("backend", "str?"), ("check_seqlens", "bool"), ("softmax_type", "str"),
)
_OP_SCHEMA = ", ".join(f"{kind} {name}" for name, kind in _OP_ARGS)
_OP_TENSORS = sum(kind.startswith("Tensor") for _, kind in _OP_ARGS)  # they lead the list
_OP_FORMAT = [name for name, _ in _OP_ARGS].index("qkv_format")
_OP_BIAS = [name for name, _ in _OP_ARGS].index("bias")
_OP_SINK = [name for name, _ in _OP_ARGS].index("sink")


def _forward_impl(q: Tensor, k: Tensor, v: Tensor, *args: Any) -> Tuple[Tensor, Tensor]:
    call, bias, sink, rng_state = _Call.from_op_args(*args)
    return call.forward(q, k, v, bias, sink, rng_state)


def _forward_fake(q: Tensor, k: Tensor, v: Tensor, *args: Any) -> Tuple[Tensor, Tensor]:
    out = q.new_empty(list(q.shape[:-1]) + [v.shape[-1]])
    return out, q.new_empty(_lse_shape(q, args[_OP_FORMAT]), dtype=torch.float32)


def _backward_impl(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, *args: Any) -> tuple:
    *args, bias_grad, sink_grad = args
    call, bias, sink, rng_state = _Call.from_op_args(*args)
    dq, dk, dv, dbias, dsink = call.backward(dout, q, k, v, out, lse, bias, bias_grad, sink, sink_grad, rng_state)
    return dq, dk, dv, dbias if bias_grad else q.new_empty([0]), dsink if sink_grad else q.new_empty([0])


def _backward_fake(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, *args: Any) -> tuple:
    *args, bias_grad, sink_grad = args
    bias, sink = args[_OP_BIAS], args[_OP_SINK]
    dbias = torch.empty_like(bias, memory_format=torch.contiguous_format) if bias_grad else q.new_empty([0])
    dsink = sink.new_empty(sink.shape, dtype=torch.float32) if sink_grad else q.new_empty([0])
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            torch.empty_like(k, memory_format=torch.contiguous_format),
            torch.empty_like(v, memory_format=torch.contiguous_format), dbias, dsink)


_forward_op = torch.library.custom_op(
    "attn::forward", _forward_impl, mutates_args=(),
    schema=f"(Tensor q, Tensor k, Tensor v, {_OP_SCHEMA}) -> (Tensor, Tensor)")
_forward_op.register_fake(_forward_fake)
_backward_op = torch.library.custom_op(
    "attn::backward", _backward_impl, mutates_args=(),
    schema=f"(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, {_OP_SCHEMA}, bool bias_grad, "
           "bool sink_grad) -> (Tensor, Tensor, Tensor, Tensor, Tensor)")
_backward_op.register_fake(_backward_fake)


def _setup_context(ctx, inputs, output):
    q, k, v, *args = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, *args[:_OP_TENSORS])
    ctx.options = tuple(args[_OP_TENSORS:])
    ctx.mark_non_differentiable(lse)


def _backward(ctx, dout, dlse):
    del dlse  # lse is not differentiable (marked so in _setup_context)
    q, k, v, out, lse, *tensors = ctx.saved_tensors
    bias, sink = tensors[_OP_BIAS], tensors[_OP_SINK]
    bias_grad = bias is not None and ctx.needs_input_grad[3 + _OP_BIAS]
    sink_grad = sink is not None and ctx.needs_input_grad[3 + _OP_SINK]
    dq, dk, dv, dbias, dsink = torch.ops.attn.backward(dout, q, k, v, out, lse, *tensors, *ctx.options, bias_grad,
                                                       sink_grad)
    grads = [None] * (3 + len(_OP_ARGS))
    grads[:3] = dq, dk, dv
    grads[3 + _OP_BIAS] = dbias if bias_grad else None
    grads[3 + _OP_SINK] = dsink if sink_grad else None
    return tuple(grads)


torch.library.register_autograd("attn::forward", _backward, setup_context=_setup_context)


class _EagerAttention(torch.autograd.Function):
    """The same passes without the custom-op dispatch, for eager mode: PyTorch's
    Python custom-op machinery costs a few hundred microseconds of host time per
    call, which shows when the GPU's work per call is small. Only q, k, v,
    bias and sink are autograd inputs; the rest travels in the _Call. torch.compile
    traces the custom op instead (see attention())."""

    @staticmethod
    def forward(ctx, q, k, v, bias, sink, call):
        rng_state = call.capture_rng_state(q)
        out, lse = call.forward(q, k, v, bias, sink, rng_state)
        ctx.save_for_backward(q, k, v, out, lse, bias, sink, rng_state)
        ctx.call = call
        ctx.mark_non_differentiable(lse)
        ctx.set_materialize_grads(False)  # no zero tensor for lse's (absent) gradient
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        del dlse  # lse is not differentiable
        if dout is None:  # out did not reach the loss: every gradient is zero
            return None, None, None, None, None, None
        q, k, v, out, lse, bias, sink, rng_state = ctx.saved_tensors
        bias_grad = bias is not None and ctx.needs_input_grad[3]
        sink_grad = sink is not None and ctx.needs_input_grad[4]
        dq, dk, dv, dbias, dsink = ctx.call.backward(dout, q, k, v, out, lse, bias, bias_grad, sink, sink_grad,
                                                     rng_state)
        return dq, dk, dv, dbias, dsink, None


# ---- the functional API ----------------------------------------------------------


def _draw_seed(seed: Optional[int]) -> int:
    """The call's 64-bit dropout seed: a fresh one from PyTorch's default CPU
    generator unless one is given."""
    if seed is None:
        lo, hi = torch.randint(0, 1 << 32, (2,), dtype=torch.int64).tolist()  # consumes the default generator
        return lo | (hi << 32)
    return _keywords.uint(int(seed), "seed", limit_text="2^64")


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    qkv_format: str = "bshd",
    mask: str = "no_mask",
    window: Tuple[int, int] = (-1, -1),
    softmax_scale: Optional[float] = None,
    softcap: float = 0.0,
    cu_seqlens_q: Optional[Tensor] = None,
    cu_seqlens_kv: Optional[Tensor] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_kv: Optional[int] = None,
    bias: Optional[Tensor] = None,
    alibi_slopes: Optional[Tensor] = None,
    attn_mask: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    seed: Optional[int] = None,
    offset: int = 0,
    backend: Optional[str] = None,
    return_lse: bool = False,
    deterministic: bool = False,
    check_seqlens: bool = True,
    cp: Any = None,
    cp_fallback: bool = False,
    softmax_type: str = "vanilla",
    sink: Optional[Tensor] = None,
) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Differentiable attention on PyTorch tensors (CPU or CUDA): attn.forward's
    keywords and semantics, gradients for q, k, v (and bias when it requires
    grad) through attn.backward. With dropout_p > 0 and seed=None, a fresh seed
    comes from PyTorch's default generator; pass seed= to fix it. Returns out,
    or (out, lse) with return_lse=True (lse carries no gradient). cp=: an
    attn.cp.Communicator; q, k, v are this rank's shards (attn.cp.shard).
    cp_fallback=True: a batch breaking the 2*cp rule runs unsplit (K/V gathered
    to every rank); shard/unshard with the same cp_fallback. check_seqlens=False
    (with max_seqlen_q/kv given) skips reading cu_seqlens back in both passes,
    a wait for the GPU each: for cu_seqlens your own code built.
    softmax_type: "vanilla", "off-by-one" or "learnable" with sink= (float32
    [h_q], the sink logit per query head; it gets a gradient when it requires
    one)."""
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"attn.torch.attention: {name} must be a torch.Tensor, got {type(t).__name__}; "
                            "attn.forward takes NumPy, JAX and CuPy arrays")
    if cp is not None:
        # Context parallelism: the Communicator runs it (attn.cp.attention), with
        # every keyword, so the ring refuses what it lacks by name.
        _keywords.check_cp_inputs(cu_seqlens_q, cu_seqlens_kv, bias=bias, alibi_slopes=alibi_slopes,
                                  attn_mask=attn_mask)
        return cp._attention(q, k, v, qkv_format=qkv_format, mask=mask, window=window,
                             softmax_scale=softmax_scale, softcap=softcap, cu_seqlens_q=cu_seqlens_q,
                             cu_seqlens_kv=cu_seqlens_kv, max_seqlen_q=max_seqlen_q, max_seqlen_kv=max_seqlen_kv,
                             bias=bias, alibi_slopes=alibi_slopes, attn_mask=attn_mask, dropout_p=dropout_p,
                             seed=0 if seed is None else seed, offset=offset, backend=backend,
                             deterministic=deterministic, return_lse=return_lse, cp_fallback=cp_fallback,
                             softmax_type=softmax_type, sink=sink)
    compiling = torch.compiler.is_compiling()
    # Traced by torch.compile, a fresh seed is drawn in the graph (on q's
    # device), so every run of the compiled graph, CUDA graph replays
    # included, drops fresh elements; eager calls draw it on the host.
    device_rng = _device_rng_state(q) if compiling and dropout_p > 0 and seed is None else None
    seed, offset = (_draw_seed(seed), int(offset)) if dropout_p > 0 and device_rng is None else (0, 0)
    call = _Call(qkv_format=qkv_format, mask=_keywords.mask_name(mask), window=_keywords.window_pair(window),
                 softmax_scale=None if softmax_scale is None else float(softmax_scale), softcap=float(softcap),
                 max_seqlen_q=_keywords.max_seqlen(max_seqlen_q), max_seqlen_kv=_keywords.max_seqlen(max_seqlen_kv),
                 dropout_p=float(dropout_p), seed=seed, offset=offset, deterministic=bool(deterministic),
                 backend=backend, cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv, alibi_slopes=alibi_slopes,
                 attn_mask=attn_mask, check_seqlens=bool(check_seqlens),
                 softmax_type=_keywords.softmax_type_name(softmax_type))
    if compiling:  # the custom op: opaque to the compiler, with fake implementations
        out, lse = torch.ops.attn.forward(q, k, v, *call.op_args(bias, sink, device_rng))
    elif torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, bias, sink)):
        out, lse = _EagerAttention.apply(q, k, v, bias, sink, call)
    else:  # no gradient to take (inference, a decode step): the forward alone, without autograd's Function
        out, lse = call.forward(q, k, v, bias, sink, call.capture_rng_state(q), need_lse=return_lse)
    return (out, lse) if return_lse else out


def alibi_slopes(num_heads: int, device: Any = None) -> Tensor:
    """ALiBi's standard slopes (Press et al.): a geometric sequence per head,
    as TransformerEngine and FlashAttention use, float32 [num_heads]."""
    def power_of_2(n: int) -> List[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(num_heads).is_integer():
        slopes = power_of_2(num_heads)
    else:
        closest = 2 ** math.floor(math.log2(num_heads))
        slopes = power_of_2(closest) + power_of_2(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32, device=device)


# ---- TransformerEngine-style module -----------------------------------------------


def _seqlens_from_padding_mask(m: Tensor) -> Tensor:
    """TE's padding mask [b, 1, 1, s] (True = padded, padding at the end) -> cu_seqlens int32 [b + 1]."""
    lengths = (~m.reshape(m.shape[0], -1)).sum(dim=1, dtype=torch.int32)
    return torch.nn.functional.pad(torch.cumsum(lengths, 0, dtype=torch.int32), (1, 0))


class DotProductAttention(torch.nn.Module):
    """Core attention with TransformerEngine's DotProductAttention interface, so
    TE code switches by changing the import.

    Constructor arguments, in TE's order: num_attention_heads, kv_channels (an
    int, or (d_qk, d_v)), num_gqa_groups (KV heads; default = query heads),
    attention_dropout (applied in training mode only), qkv_format ("sbhd",
    "bshd" or "thd"), attn_mask_type (TE's names, "padding,causal" too),
    window_size ((left, right), None = unbounded), then keyword-only
    softmax_scale (default 1/sqrt(d_qk)), softcap, deterministic, and attn's
    backend (force one by name), layer_number and attention_type ("self" or
    "cross", accepted for compatibility), softmax_type ("vanilla",
    "off-by-one", "learnable": the module then owns the sink logits as the
    float32 parameter `softmax_offset` [num_attention_heads], zeros at first,
    TransformerEngine's name) and device (of that parameter).

    forward(query_layer, key_layer, value_layer, attention_mask=None, *,
    qkv_format, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv,
    attn_mask_type, window_size, core_attention_bias_type ("no_bias",
    "post_scale_bias", "alibi"), core_attention_bias, alibi_slopes). Inputs
    are split into heads ([s, b, h, d] for sbhd); the output, as in TE, merges
    heads and head_dim: [s, b, h*d_v] (sbhd), [b, s, h*d_v] (bshd), [t, h*d_v]
    (thd). attention_mask follows TE: True marks a position that is masked
    out; for padding masks a [b, 1, 1, s] tensor (or a (q, kv) pair) of
    right-padded sequences, converted to cu_seqlens.
    """

    def __init__(
        self,
        num_attention_heads: int,
        kv_channels: Union[int, Tuple[int, int]],
        num_gqa_groups: Optional[int] = None,
        attention_dropout: float = 0.0,
        qkv_format: str = "sbhd",
        attn_mask_type: str = "causal",
        window_size: Optional[Tuple[int, int]] = None,
        *,
        softmax_scale: Optional[float] = None,
        softcap: float = 0.0,
        deterministic: bool = False,
        backend: Optional[str] = None,
        layer_number: Optional[int] = None,
        attention_type: str = "self",
        softmax_type: str = "vanilla",
        device: Any = None,
    ) -> None:
        super().__init__()
        self.num_attention_heads = int(num_attention_heads)
        if isinstance(kv_channels, int):
            self.head_dim_qk = self.head_dim_v = kv_channels
        else:
            self.head_dim_qk, self.head_dim_v = (int(x) for x in kv_channels)
        self.num_gqa_groups = self.num_attention_heads if num_gqa_groups is None else int(num_gqa_groups)
        if self.num_attention_heads % self.num_gqa_groups != 0:
            raise ValueError(
                f"attn: num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_gqa_groups={self.num_gqa_groups}; choose a number of KV heads that divides it"
            )
        self.attention_dropout = float(attention_dropout)
        self.qkv_format = qkv_format
        self.attn_mask_type = _keywords.mask_name(attn_mask_type)
        self.window_size = window_size
        self.softmax_scale = 1.0 / math.sqrt(self.head_dim_qk) if softmax_scale is None else float(softmax_scale)
        self.softcap = float(softcap)
        self.deterministic = bool(deterministic)
        self.backend = backend
        self.layer_number = 1 if layer_number is None else layer_number
        if attention_type not in ("self", "cross"):
            raise ValueError(f"attn: attention_type must be \"self\" or \"cross\", got {attention_type!r}")
        self.attention_type = attention_type
        if softmax_type not in ("vanilla", "off-by-one", "learnable"):
            raise ValueError(f"attn: softmax_type must be \"vanilla\", \"off-by-one\" or \"learnable\", "
                             f"got {softmax_type!r}")
        self.softmax_type = softmax_type
        self.softmax_offset = (torch.nn.Parameter(torch.zeros(self.num_attention_heads, dtype=torch.float32,
                                                              device=device))
                               if softmax_type == "learnable" else None)

    def extra_repr(self) -> str:
        return (f"heads={self.num_attention_heads}, kv_heads={self.num_gqa_groups}, "
                f"head_dim={self.head_dim_qk}/{self.head_dim_v}, qkv_format={self.qkv_format}, "
                f"attn_mask_type={self.attn_mask_type}, window_size={self.window_size}, "
                f"attention_dropout={self.attention_dropout}, softmax_type={self.softmax_type}")

    def _check_heads(self, q: Tensor, k: Tensor, v: Tensor, qkv_format: str) -> None:
        rank = 3 if qkv_format == "thd" else 4
        for t, name, heads, dim in ((q, "query_layer", self.num_attention_heads, self.head_dim_qk),
                                    (k, "key_layer", self.num_gqa_groups, self.head_dim_qk),
                                    (v, "value_layer", self.num_gqa_groups, self.head_dim_v)):
            if t.dim() == rank and t.shape[-2] == heads and t.shape[-1] == dim:
                continue
            if t.dim() == rank - 1:
                fix = f"split the hidden dimension into heads first: {name}.view(*{name}.shape[:-1], {heads}, {dim})"
            elif t.dim() == rank:
                fix = "build the module with the heads and head sizes of the tensors, or pass matching tensors"
            else:
                continue  # another rank: attn's own validation names the format and the fix
            raise ValueError(
                f"attn: {name} of shape {list(t.shape)} does not fit this DotProductAttention "
                f"(qkv_format={qkv_format}, {heads} heads of size {dim}); {fix}"
            )

    def forward(
        self,
        query_layer: Tensor,
        key_layer: Tensor,
        value_layer: Tensor,
        attention_mask: Optional[Union[Tensor, Tuple[Tensor, Tensor]]] = None,
        *,
        qkv_format: Optional[str] = None,
        cu_seqlens_q: Optional[Tensor] = None,
        cu_seqlens_kv: Optional[Tensor] = None,
        max_seqlen_q: Optional[int] = None,
        max_seqlen_kv: Optional[int] = None,
        attn_mask_type: Optional[str] = None,
        window_size: Optional[Tuple[int, int]] = None,
        core_attention_bias_type: str = "no_bias",
        core_attention_bias: Optional[Tensor] = None,
        alibi_slopes: Optional[Tensor] = None,
    ) -> Tensor:
        qkv_format = self.qkv_format if qkv_format is None else qkv_format
        mask = self.attn_mask_type if attn_mask_type is None else _keywords.mask_name(attn_mask_type)
        window = self.window_size if window_size is None else window_size
        self._check_heads(query_layer, key_layer, value_layer, qkv_format)

        arbitrary = None
        if attention_mask is not None:
            if mask == "arbitrary":
                # TE: True = masked out; attn (like PyTorch's SDPA): True = visible.
                m = attention_mask
                arbitrary = ~m if m.dtype == torch.bool else m
            elif "padding" in mask and qkv_format != "thd" and cu_seqlens_q is None:
                m_q, m_kv = attention_mask if isinstance(attention_mask, (tuple, list)) else (attention_mask,) * 2
                cu_seqlens_q = _seqlens_from_padding_mask(m_q)
                cu_seqlens_kv = _seqlens_from_padding_mask(m_kv)
        if cu_seqlens_q is not None and cu_seqlens_kv is None and self.attention_type == "self":
            cu_seqlens_kv = cu_seqlens_q

        bias = slopes = None
        if core_attention_bias_type == "post_scale_bias":
            bias = core_attention_bias
        elif core_attention_bias_type == "alibi":
            slopes = alibi_slopes if alibi_slopes is not None else _alibi_cached(
                self.num_attention_heads, query_layer.device)
        elif core_attention_bias_type != "no_bias":
            raise ValueError(
                f"attn: core_attention_bias_type={core_attention_bias_type!r} is not supported; "
                "use \"no_bias\", \"post_scale_bias\" (scores + bias) or \"alibi\""
            )

        out = attention(
            query_layer, key_layer, value_layer, qkv_format=qkv_format, mask=mask, window=window,
            softmax_scale=self.softmax_scale, softcap=self.softcap, cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_kv=cu_seqlens_kv, max_seqlen_q=max_seqlen_q, max_seqlen_kv=max_seqlen_kv, bias=bias,
            alibi_slopes=slopes, attn_mask=arbitrary,
            dropout_p=self.attention_dropout if self.training else 0.0, backend=self.backend,
            deterministic=self.deterministic, softmax_type=self.softmax_type, sink=self.softmax_offset,
        )
        # TE's output convention: ...hd -> ...(hd)
        return out.reshape(*out.shape[:-2], out.shape[-2] * out.shape[-1])


_ALIBI_CACHE: dict = {}


def _alibi_cached(num_heads: int, device: Any) -> Tensor:
    key = (num_heads, str(device))
    if key not in _ALIBI_CACHE:
        _ALIBI_CACHE[key] = alibi_slopes(num_heads, device)
    return _ALIBI_CACHE[key]
