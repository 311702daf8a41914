"""attn: an attention engine for NVIDIA GPUs (and an exact CPU reference).

    import attn
    out = attn.forward(q, k, v, mask="causal")            # NumPy, PyTorch, JAX or CuPy arrays
    out, lse = attn.forward(q, k, v, return_lse=True)
    dq, dk, dv = attn.backward(q, k, v, out, dout, lse)
    print(attn.explain(q, k, v, mask="causal", device="sm80"))   # every backend's verdict
    attn.backends()                                        # what this build and machine offer

Tensors travel through DLPack without copies; outputs are allocated in the
caller's framework on the caller's device (or passed in: out=, lse=, dq=, ...).
Semantics: docs/SEMANTICS.md; this layer: docs/PYTHON.md. `attn.torch` adds
autograd, a torch.library custom op and TransformerEngine-style modules.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple, Optional, Sequence, Tuple, Union

from . import _C
from . import _arrays
from . import _keywords
from ._C import BackendUnavailableError, ExecutionError

__version__ = "0.1.0"

__all__ = [
    "forward",
    "forward_with_kvcache",
    "backward",
    "explain",
    "backends",
    "cuda_device_count",
    "device_info",
    "build_info",
    "Explanation",
    "Verdict",
    "BackendInfo",
    "BackendUnavailableError",
    "ExecutionError",
]

_options = _keywords.options  # the core's Options from the keywords (cached); bench/overhead.py calls it here


# ---- shapes of outputs -----------------------------------------------------


def _out_shape(q: Any, v: Any) -> tuple:
    qs, vs = _arrays.shape_of(q), _arrays.shape_of(v)
    return qs[:-1] + vs[-1:] if qs and vs else qs


def _capture_workspace(q: Any, stream: Optional[int]) -> Any:
    """Under CUDA graph capture of PyTorch's current stream (the call's stream
    when none is given), the workspace comes from PyTorch's allocator."""
    if stream is not None or _arrays.framework(q) != "torch":
        return None
    return _arrays.torch_capture_workspace(q)


def _stream(q: Any, stream: Optional[int]) -> int:
    return _arrays.stream_of(q) if stream is None else int(stream)


def _inputs(cu_seqlens_q, cu_seqlens_kv, bias, alibi_slopes, attn_mask) -> dict:
    d = _arrays.as_dlpack
    return dict(
        cu_seqlens_q=d(cu_seqlens_q),
        cu_seqlens_kv=d(cu_seqlens_kv),
        bias=d(bias),
        alibi_slopes=d(alibi_slopes),
        attn_mask=d(attn_mask),
    )


# ---- the functional API ----------------------------------------------------


def forward(
    q: Any,
    k: Any,
    v: Any,
    *,
    qkv_format: str = "bshd",
    mask: str = "no_mask",
    window: Tuple[int, int] = (-1, -1),
    softmax_scale: Optional[float] = None,
    softcap: float = 0.0,
    cu_seqlens_q: Any = None,
    cu_seqlens_kv: Any = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_kv: Optional[int] = None,
    bias: Any = None,
    alibi_slopes: Any = None,
    dropout_p: float = 0.0,
    seed: int = 0,
    offset: int = 0,
    backend: Optional[str] = None,
    return_lse: bool = False,
    attn_mask: Any = None,
    out: Any = None,
    lse: Any = None,
    deterministic: bool = False,
    check_seqlens: bool = True,
    disable: Sequence[str] = (),
    stream: Optional[int] = None,
    cp: Any = None,
    cp_fallback: bool = False,
    rng_state: Any = None,
    softmax_type: str = "vanilla",
    sink: Any = None,
    return_max_logit: bool = False,
    max_logit: Any = None,
) -> Any:
    """Attention forward: softmax(softmax_scale * q k^T [softcap, bias, mask]) v.

    q: bshd [b, s_q, h_q, d_qk] | sbhd [s_q, b, h_q, d_qk] | thd [t_q, h_q, d_qk];
    k, v likewise with s_kv, h_kv (h_q % h_kv == 0) and d_qk / d_v. Any strides
    with a contiguous last dimension. Returns out (like q with d_v), or
    (out, lse) with return_lse=True (float32 [b, h_q, s_q], thd: [h_q, t_q]).

    mask: no_mask, causal, causal_bottom_right, padding, padding_causal,
    padding_causal_bottom_right, arbitrary (with attn_mask, true = visible).
    window=(left, right), -1 unbounded. thd needs cu_seqlens_q/kv (int32,
    [b + 1]); max_seqlen_* None derives them. backend="name" forces a backend
    (as ATTN_BACKEND does); disable=[...] removes some (as ATTN_DISABLE).
    out= / lse= take preallocated outputs. stream: a CUDA stream handle; by
    default the current stream of q's framework (PyTorch, CuPy), else 0.
    Raises ValueError / TypeError for bad calls, BackendUnavailableError when
    no backend can run it, with the core's full message.
    cp=: an attn.cp.Communicator; q, k, v are this rank's shards (attn.cp.shard).
    cp_fallback=True: a batch whose sequence lengths break the 2*cp rule runs
    unsplit (K/V gathered to every rank; shard with the same cp_fallback).
    rng_state=: an int64 array [2] (seed, offset) on q's device that the
    kernels read when they run, instead of seed= and offset= (CUDA graphs:
    write new values before each replay).
    softmax_type=: "vanilla", "off-by-one" (a sink logit 0 in every row's
    softmax) or "learnable" (sink=, float32 [h_q], the sink logit per query
    head); the sink carries no value and lse includes it (SEMANTICS.md).
    return_max_logit=True (or max_logit=, float32 [h_q]) also returns the
    largest score over the call's visible pairs per query head: out, then lse
    if asked, then max_logit.
    """
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        _arrays.require_array(x, name)
    _arrays.require_arrays(out=out, lse=lse, cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv, bias=bias,
                           alibi_slopes=alibi_slopes, attn_mask=attn_mask, rng_state=rng_state, sink=sink,
                           max_logit=max_logit)
    _arrays.require_writable(out=out, lse=lse, max_logit=max_logit)
    opts = _options(qkv_format, mask, window, softmax_scale, softcap, max_seqlen_q, max_seqlen_kv,
                    dropout_p, seed, offset, deterministic, check_seqlens, softmax_type)
    if out is None:
        out = _arrays.empty(q, _out_shape(q, v))
    if lse is None and return_lse:
        shape = _arrays.lse_shape(_arrays.shape_of(q), qkv_format)
        if shape is not None:
            lse = _arrays.empty(q, shape, "float32")
    return_max_logit = return_max_logit or max_logit is not None
    if max_logit is None and return_max_logit:
        heads = _arrays.heads_of(_arrays.shape_of(q), qkv_format)
        if heads is not None:
            max_logit = _arrays.empty(q, (heads,), "float32")
    d = _arrays.as_dlpack

    def results() -> Any:
        r = (_arrays.finish(q, out),) + ((_arrays.finish(q, lse),) if return_lse else ())
        r += (_arrays.finish(q, max_logit),) if return_max_logit else ()
        return r if len(r) > 1 else r[0]

    if cp is not None:
        # Context parallelism: cp, an attn.cp.Communicator, runs the call on this
        # rank's shards (attn.cp is built on this module and imports it, never the reverse).
        _keywords.check_cp_inputs(cu_seqlens_q, cu_seqlens_kv, bias=bias, alibi_slopes=alibi_slopes,
                                  attn_mask=attn_mask, rng_state=rng_state)
        cp._forward(opts, cp_fallback, q, k, v, out, lse, cu_seqlens_q, backend, list(disable), _stream(q, stream),
                    sink, max_logit)
        return results()
    try:
        _C.forward(
            opts, d(q), d(k), d(v), d(out), d(lse),
            **_inputs(cu_seqlens_q, cu_seqlens_kv, bias, alibi_slopes, attn_mask),
            backend=backend, disable=list(disable), stream=_stream(q, stream),
            workspace_allocator=_capture_workspace(q, stream), rng_state=d(rng_state), sink=d(sink),
            max_logit=d(max_logit),
        )
    except (TypeError, ValueError) as e:
        _arrays.adapt_error(e, _arrays.framework(q))
        raise
    return results()


def forward_with_kvcache(
    q: Any,
    k_cache: Any,
    v_cache: Any,
    k: Any = None,
    v: Any = None,
    *,
    cache_seqlens: Any = None,
    cache_batch_idx: Any = None,
    block_table: Any = None,
    rotary_cos: Any = None,
    rotary_sin: Any = None,
    rotary_interleaved: bool = True,
    mask: str = "causal_bottom_right",
    window: Tuple[int, int] = (-1, -1),
    softmax_scale: Optional[float] = None,
    softcap: float = 0.0,
    alibi_slopes: Any = None,
    num_splits: int = 0,
    return_lse: bool = False,
    out: Any = None,
    lse: Any = None,
    softmax_type: str = "vanilla",
    sink: Any = None,
    backend: Optional[str] = None,
    disable: Sequence[str] = (),
    stream: Optional[int] = None,
    check_seqlens: bool = True,
) -> Any:
    """Attention against a KV cache, with FlashAttention's flash_attn_with_kvcache
    arguments: q [b, s_q, h_q, d]; k_cache / v_cache contiguous [b_cache,
    s_cache, h_kv, d] or paged [num_blocks, block_size, h_kv, d] with
    block_table (int32 [b, max_blocks]); cache_seqlens (int32 [b], or one int
    for every sequence, as FlashAttention takes it) the lengths before the
    append; new k / v [b, s_new, h_kv, d] are written into the cache
    there (rotated with rotary_cos / rotary_sin, [s_ro, r / 2], interleaved or
    not, as q is) and attended in the same call. mask "causal_bottom_right"
    (q's rows are each sequence's last s_q positions) or "no_mask"; window,
    softcap, alibi_slopes, softmax_type / sink as in forward. Returns out, or
    (out, lse) with return_lse=True. Every length, block index and rotary
    position is checked before the cache is written; on the GPU that reads
    them back to the host, which check_seqlens=False skips (required inside
    a CUDA graph capture: the kernels then bound every value to the cache).
    CUDA tensors run on flash_decode (split-KV, num_splits 0 = choose) up to
    16 query tokens per sequence, longer ones (chunked prefill) on
    flash_sm90's forward over the cache on Hopper GPUs (paged: blocks of a
    multiple of 16 keys; otherwise flash_decode); CPU arrays on the reference.
    """
    for x, name in ((q, "q"), (k_cache, "k_cache"), (v_cache, "v_cache")):
        _arrays.require_array(x, name)
    if isinstance(cache_seqlens, numbers.Integral) and not isinstance(cache_seqlens, bool):
        q_shape = _arrays.shape_of(q)
        cache_seqlens = _arrays.full_int32(q, q_shape[0] if q_shape else 0, int(cache_seqlens))
    _arrays.require_arrays(k=k, v=v, cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
                           block_table=block_table, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                           alibi_slopes=alibi_slopes, out=out, lse=lse, sink=sink)
    _arrays.require_writable(k_cache=k_cache, v_cache=v_cache, out=out, lse=lse)
    opts = _options("bshd", mask, window, softmax_scale, softcap, None, None, 0.0, 0, 0, False, check_seqlens,
                    softmax_type)
    if out is None:
        out = _arrays.empty(q, _out_shape(q, v_cache))
    if lse is None and return_lse:
        shape = _arrays.lse_shape(_arrays.shape_of(q), "bshd")
        if shape is not None:
            lse = _arrays.empty(q, shape, "float32")
    d = _arrays.as_dlpack
    try:
        _C.forward_with_kvcache(
            opts, d(q), d(k_cache), d(v_cache), d(out), k=d(k), v=d(v), cache_seqlens=d(cache_seqlens),
            cache_batch_idx=d(cache_batch_idx), block_table=d(block_table), rotary_cos=d(rotary_cos),
            rotary_sin=d(rotary_sin), rotary_interleaved=rotary_interleaved, alibi_slopes=d(alibi_slopes),
            sink=d(sink), lse=d(lse), num_splits=num_splits, backend=backend, disable=list(disable),
            stream=_stream(q, stream), workspace_allocator=_capture_workspace(q, stream),
        )
    except (TypeError, ValueError) as e:
        _arrays.adapt_error(e, _arrays.framework(q))
        raise
    return (_arrays.finish(q, out), _arrays.finish(q, lse)) if return_lse else _arrays.finish(q, out)


def backward(
    q: Any,
    k: Any,
    v: Any,
    out: Any,
    dout: Any,
    lse: Any,
    *,
    qkv_format: str = "bshd",
    mask: str = "no_mask",
    window: Tuple[int, int] = (-1, -1),
    softmax_scale: Optional[float] = None,
    softcap: float = 0.0,
    cu_seqlens_q: Any = None,
    cu_seqlens_kv: Any = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_kv: Optional[int] = None,
    bias: Any = None,
    alibi_slopes: Any = None,
    dropout_p: float = 0.0,
    seed: int = 0,
    offset: int = 0,
    backend: Optional[str] = None,
    return_lse: bool = False,
    attn_mask: Any = None,
    dq: Any = None,
    dk: Any = None,
    dv: Any = None,
    dbias: Any = None,
    return_dbias: bool = False,
    deterministic: bool = False,
    check_seqlens: bool = True,
    disable: Sequence[str] = (),
    stream: Optional[int] = None,
    cp: Any = None,
    cp_fallback: bool = False,
    rng_state: Any = None,
    softmax_type: str = "vanilla",
    sink: Any = None,
    dsink: Any = None,
) -> Tuple[Any, ...]:
    """Attention backward: (dq, dk, dv) from the forward's q, k, v, out, its lse
    (forward(..., return_lse=True)) and dout, with the same keywords as the
    forward (dropout needs the same seed and offset, or the same rng_state;
    return_lse is accepted and
    ignored so one keyword dict serves both passes). With a bias and
    return_dbias=True (or a preallocated dbias=) returns (dq, dk, dv, dbias).
    dq= / dk= / dv= take preallocated gradients. cp=, cp_fallback=: as for
    forward (the same values the forward had). softmax_type="learnable" (with
    the forward's sink=) adds dsink (float32 [h_q], or into dsink=) last:
    (dq, dk, dv[, dbias], dsink).
    """
    del return_lse
    for x, name in ((q, "q"), (k, "k"), (v, "v"), (out, "out"), (dout, "dout"), (lse, "lse")):
        _arrays.require_array(x, name)
    _arrays.require_arrays(dq=dq, dk=dk, dv=dv, dbias=dbias, cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv,
                           bias=bias, alibi_slopes=alibi_slopes, attn_mask=attn_mask, rng_state=rng_state,
                           sink=sink, dsink=dsink)
    _arrays.require_writable(dq=dq, dk=dk, dv=dv, dbias=dbias, dsink=dsink)
    opts = _options(qkv_format, mask, window, softmax_scale, softcap, max_seqlen_q, max_seqlen_kv,
                    dropout_p, seed, offset, deterministic, check_seqlens, softmax_type)
    want_dsink = opts.softmax_type == "learnable"
    if want_dsink and dsink is None and sink is not None:
        dsink = _arrays.empty(sink, _arrays.shape_of(sink), "float32")
    dq = _arrays.empty(q, _arrays.shape_of(q)) if dq is None else dq
    dk = _arrays.empty(k, _arrays.shape_of(k)) if dk is None else dk
    dv = _arrays.empty(v, _arrays.shape_of(v)) if dv is None else dv
    want_dbias = return_dbias or dbias is not None
    if want_dbias and bias is None:
        raise ValueError("attn: return_dbias=True (or dbias=) needs the forward's bias=")
    if want_dbias and dbias is None:
        dbias = _arrays.empty(bias, _arrays.shape_of(bias))
    d = _arrays.as_dlpack
    if cp is not None:  # context parallelism: as in forward
        _keywords.check_cp_inputs(cu_seqlens_q, cu_seqlens_kv, bias=bias, alibi_slopes=alibi_slopes,
                                  attn_mask=attn_mask, dbias=dbias, rng_state=rng_state)
        cp._backward(opts, cp_fallback, q, k, v, out, dout, lse, dq, dk, dv, cu_seqlens_q, backend, list(disable),
                     _stream(q, stream), sink, dsink)
        grads = tuple(_arrays.finish(q, g) for g in (dq, dk, dv))
        return grads + (_arrays.finish(q, dsink),) if want_dsink else grads
    try:
        _C.backward(
            opts, d(q), d(k), d(v), d(out), d(dout), d(lse), d(dq), d(dk), d(dv), d(dbias),
            **_inputs(cu_seqlens_q, cu_seqlens_kv, bias, alibi_slopes, attn_mask),
            backend=backend, disable=list(disable), stream=_stream(q, stream),
            workspace_allocator=_capture_workspace(q, stream), rng_state=d(rng_state), sink=d(sink),
            dsink=d(dsink),
        )
    except (TypeError, ValueError) as e:
        _arrays.adapt_error(e, _arrays.framework(q))
        raise
    grads = tuple(_arrays.finish(q, g) for g in (dq, dk, dv))
    grads += (_arrays.finish(q, dbias),) if want_dbias else ()
    return grads + (_arrays.finish(q, dsink),) if want_dsink else grads


# ---- explain ---------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """One backend's answer: can it run the call, and if not, why (each reason
    names the value and the limit)."""

    backend: str
    ok: bool
    in_build: bool
    reasons: Tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.backend}: yes" if self.ok else f"{self.backend}: no: " + "; ".join(self.reasons)


class Explanation(Sequence[Verdict]):
    """Every backend's verdict on one call, in the device's preference order,
    and the backend attn would choose. A sequence of Verdict (also indexable by
    backend name); str() gives the readable table of `attn explain`."""

    def __init__(self, data: dict):
        self.problem: str = data["problem"]
        self.device: str = data["device"]
        self.sm: int = data["sm"]
        self.simulated: bool = data["simulated"]
        self.chosen: Optional[str] = data["chosen"]
        self.why: str = data["why"]
        self.verdicts: Tuple[Verdict, ...] = tuple(
            Verdict(name, in_build and not reasons, in_build, tuple(reasons))
            for name, in_build, reasons in data["verdicts"]
        )
        self._table: str = data["table"]

    def __len__(self) -> int:
        return len(self.verdicts)

    def __iter__(self) -> Iterator[Verdict]:
        return iter(self.verdicts)

    def __getitem__(self, key: Union[int, str, slice]) -> Any:
        if isinstance(key, str):
            for v in self.verdicts:
                if v.backend == key:
                    return v
            raise KeyError(f"attn knows no backend named {key!r}; known: {[v.backend for v in self.verdicts]}")
        return self.verdicts[key]

    @property
    def supported(self) -> Tuple[str, ...]:
        """Backends that can run the call, in preference order."""
        return tuple(v.backend for v in self.verdicts if v.ok)

    def __str__(self) -> str:
        chosen = f"chosen: {self.chosen} ({self.why})" if self.chosen else f"chosen: none ({self.why})"
        return f"{self.problem}\ndevice: {self.device}\n{self._table}{chosen}"

    def __repr__(self) -> str:
        return f"<attn.Explanation chosen={self.chosen!r} supported={list(self.supported)} device={self.device!r}>"


def _spec(x: Any, dtype: str) -> Any:
    """A shape (tuple of ints) becomes a (shape, dtype) pair; arrays pass as they are."""
    if x is None:
        return None
    if isinstance(x, (tuple, list)):
        if len(x) == 2 and isinstance(x[1], str):
            return (tuple(int(s) for s in x[0]), x[1])
        return (tuple(int(s) for s in x), dtype)
    return _arrays.exportable(x)


def explain(
    q: Any,
    k: Any,
    v: Any,
    *,
    qkv_format: str = "bshd",
    mask: str = "no_mask",
    window: Tuple[int, int] = (-1, -1),
    softmax_scale: Optional[float] = None,
    softcap: float = 0.0,
    cu_seqlens_q: Any = None,
    cu_seqlens_kv: Any = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_kv: Optional[int] = None,
    bias: Any = None,
    alibi_slopes: Any = None,
    dropout_p: float = 0.0,
    seed: int = 0,
    offset: int = 0,
    backend: Optional[str] = None,
    return_lse: bool = False,
    attn_mask: Any = None,
    backward: bool = False,
    return_dbias: bool = False,
    device: Optional[str] = None,
    dtype: str = "bfloat16",
    deterministic: bool = False,
    check_seqlens: bool = True,
    disable: Sequence[str] = (),
    softmax_type: str = "vanilla",
    return_max_logit: bool = False,
) -> Explanation:
    """Every backend's verdict on the call forward(q, k, v, **same keywords)
    would make (backward=True: the backward pass), without running anything.

    q, k, v (and bias, alibi_slopes, attn_mask) may be arrays or shapes:
    explain((2, 4096, 16, 192), (2, 4096, 16, 192), (2, 4096, 16, 128),
    dtype="bfloat16", device="sm80"). device: None (the arrays' device; for
    shapes a CUDA GPU if there is one, else the CPU), "cpu", "cuda:N", or a
    simulated architecture "sm80", "sm86", "sm89", "sm90". cu_seqlens must be
    arrays (their values decide the sequence lengths) unless check_seqlens=False
    with max_seqlen_q/kv given. Validation errors raise as in forward().
    softmax_type="learnable" asks with a float32 [h_q] sink (and its gradient
    in the backward).
    """
    opts = _options(qkv_format, mask, window, softmax_scale, softcap, max_seqlen_q, max_seqlen_kv,
                    dropout_p, seed, offset, deterministic, check_seqlens, softmax_type)
    d = _arrays.exportable
    data = _C.explain(
        opts, "backward" if backward else "forward", _spec(q, dtype), _spec(k, dtype), _spec(v, dtype),
        cu_seqlens_q=d(cu_seqlens_q), cu_seqlens_kv=d(cu_seqlens_kv), bias=_spec(bias, dtype),
        alibi_slopes=_spec(alibi_slopes, "float32"), attn_mask=_spec(attn_mask, "bool"),
        return_lse=bool(return_lse), bias_grad=bool(return_dbias), return_max_logit=bool(return_max_logit),
        device=device, backend=backend,
        disable=list(disable),
    )
    return Explanation(data)


# ---- what this build and machine offer --------------------------------------


class BackendInfo(NamedTuple):
    name: str
    in_build: bool  # compiled into this build
    available: bool  # in the build and its device is on this machine
    device: str  # "cpu" or "cuda"


@functools.lru_cache(maxsize=None)
def _backend_infos() -> Tuple[BackendInfo, ...]:
    # A backend is available when it says yes to a tiny problem on a device
    # this machine has: the CPU (float32), and the first GPU (bfloat16) if any.
    gpu = cuda_device_count() > 0

    def probe(device: str, dtype: str) -> Tuple[str, ...]:
        shape = (1, 1, 1, 64)
        return explain(shape, shape, shape, dtype=dtype, device=device).supported

    on_cpu = probe("cpu", "float32")
    on_gpu = probe("cuda:0", "bfloat16") + probe("cuda:0", "float16") if gpu else ()
    infos = []
    for name, in_build in _C.backends():
        device = "cpu" if name in on_cpu else "cuda"
        infos.append(BackendInfo(name, in_build, name in on_cpu or name in on_gpu, device))
    return tuple(infos)


def backends(detail: bool = False) -> Any:
    """The backends that can run calls on this machine with this build, in
    preference order (e.g. ["reference"] on a machine without a GPU).
    detail=True: every backend attn knows, as BackendInfo(name, in_build,
    available, device)."""
    infos = _backend_infos()
    return list(infos) if detail else [b.name for b in infos if b.available]


def cuda_device_count() -> int:
    """CUDA devices this process can use (0 without a GPU or driver)."""
    return _C.cuda_device_count()


def build_info() -> dict:
    """What this build holds, as `attn --version` prints it: version, commit,
    cuda_toolkit (and cuda_runtime, cuda_driver: None where there is none),
    cudnn (None: built without the cudnn backend, e.g. when `pip install .`
    found no cudnn-frontend headers) and the backends compiled in."""
    return _C.build_info()


def device_info(device: str = "cpu") -> dict:
    """What backend selection knows about a device: "cpu", "cuda:N", or a
    simulated architecture such as "sm80" (name, sm, sm_count, shared memory)."""
    return _C.device_info(device)


def __getattr__(name: str) -> Any:
    # attn.torch imports PyTorch: only when asked for.
    if name == "torch":
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'attn' has no attribute {name!r}")
