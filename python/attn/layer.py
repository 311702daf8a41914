"""attn.torch.TransformerLayer: TransformerEngine's TransformerLayer (argument
names, defaults, shapes) with attention through attn's backend selection.

The GEMMs, norms and activations are PyTorch's own. attn computes attention
(the layer speeds up whenever a faster attn backend registers) and the rotary
embedding of q and k, fused into one kernel per pass (bench/layer.py times it
against PyTorch's elementwise ops).
Every input is checked against the layer's format before any kernel runs, with
messages that say what / got / expected / fix (as the core's do).
"""

from typing import Any, Callable, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from attn import _keywords
from attn._torch_attention import DotProductAttention
from attn.rotary import RotaryPositionEmbedding, apply_rotary_pos_emb

__all__ = ["TransformerLayer", "RotaryPositionEmbedding", "apply_rotary_pos_emb"]

Tensor = torch.Tensor
_WHO = "attn.torch.TransformerLayer"


def _error(what: str, got: str, expected: str, fix: str) -> ValueError:
    """A ValueError shaped like the core's errors (message and attributes)."""
    e = ValueError(f"{what}\n  got:      {got}\n  expected: {expected}\n  fix:      {fix}")
    e.what, e.got, e.expected, e.fix, e.kind = what, got, expected, fix, "value"
    return e


# ---- parts -------------------------------------------------------------------------


class _Norm(torch.nn.Module):
    """LayerNorm (weight, bias) or RMSNorm (weight): TE's two normalizations."""

    def __init__(self, kind: str, size: int, eps: float, dtype: torch.dtype, device: Any) -> None:
        super().__init__()
        self.kind, self.eps = kind, eps
        self.weight = torch.nn.Parameter(torch.ones(size, dtype=dtype, device=device))
        self.bias = (torch.nn.Parameter(torch.zeros(size, dtype=dtype, device=device))
                     if kind == "LayerNorm" else None)

    def forward(self, x: Tensor) -> Tensor:
        if self.kind == "LayerNorm":
            return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
        return F.rms_norm(x, x.shape[-1:], self.weight, self.eps)


def _glu(act: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    def f(x: Tensor) -> Tensor:
        a, b = x.chunk(2, dim=-1)  # TE: the first half goes through the activation
        return act(a) * b
    return f


def _gelu_tanh(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")  # TE's "gelu" is the tanh approximation


# name -> (fc1 width as a multiple of ffn_hidden_size, function)
_ACTIVATIONS = {
    "gelu": (1, _gelu_tanh),
    "relu": (1, F.relu),
    "swiglu": (2, _glu(F.silu)),
    "geglu": (2, _glu(_gelu_tanh)),
    "reglu": (2, _glu(F.relu)),
}


def _init_normal(std: float) -> Callable[[Tensor], None]:
    return lambda w: torch.nn.init.normal_(w, mean=0.0, std=std)


# ---- input checks ----------------------------------------------------------------


def _shape(x: Any) -> str:
    return str(list(x.shape)) if isinstance(x, Tensor) else type(x).__name__


class _Checked:
    """What the checks learned about a call: batch, sequence (bshd/sbhd) and
    the cu_seqlens the attention call will use."""

    def __init__(self) -> None:
        self.batch: Optional[int] = None
        self.seq: Optional[int] = None
        self.cu_q: Optional[Tensor] = None
        self.cu_kv: Optional[Tensor] = None
        self.arbitrary: Optional[Tensor] = None


def _dims(fmt: str, shape: Sequence[int]) -> Tuple[int, int]:
    """(batch, seq) of a rank-3 hidden_states under a format."""
    return (shape[1], shape[0]) if fmt == "sbhd" else (shape[0], shape[1])


def _both_readings(shape: Sequence[int], fmt: str) -> str:
    other = "bshd" if fmt == "sbhd" else "sbhd"
    b, s = _dims(fmt, shape)
    ob, os_ = _dims(other, shape)
    return (f"hidden_states {list(shape)} read as {fmt} (the layer's attn_input_format) has batch {b}, seq {s}; "
            f"read as {other} it would have batch {ob}, seq {os_}")


def _fix_format(fmt: str) -> str:
    other = "bshd" if fmt == "sbhd" else "sbhd"
    want = "[seq, batch, hidden]" if fmt == "sbhd" else "[batch, seq, hidden]"
    return (f"if hidden_states is laid out as {other}, build the layer with attn_input_format=\"{other}\" "
            f"(or pass hidden_states.transpose(0, 1), which is {want}); otherwise build the mask for batch "
            f"and seq of the {fmt} reading")


class _Checks:
    """The layer's input checks, in the order a wrong call is most likely wrong."""

    def __init__(self, layer: "TransformerLayer") -> None:
        self.layer = layer

    def hidden_states(self, x: Any, fmt: str) -> None:
        L = self.layer
        if not isinstance(x, Tensor):
            raise TypeError(f"{_WHO}: hidden_states must be a torch.Tensor, got {type(x).__name__}")
        want = "[total_tokens, hidden_size]" if fmt == "thd" else (
            "[seq, batch, hidden_size]" if fmt == "sbhd" else "[batch, seq, hidden_size]")
        rank = 2 if fmt == "thd" else 3
        if x.dim() != rank:
            if x.dim() == rank + 1 and x.shape[-2] * x.shape[-1] == L.hidden_size:
                fix = "merge heads and head_dim first: hidden_states.flatten(-2)"
            elif fmt == "thd" and x.dim() == 3:
                fix = ("pack the batch into [total_tokens, hidden_size] with cu_seqlens_q, or build the layer with "
                       "attn_input_format=\"bshd\" / \"sbhd\" for padded batches")
            elif fmt != "thd" and x.dim() == 2:
                fix = ("add the batch dimension (hidden_states.unsqueeze(1) for sbhd, .unsqueeze(0) for bshd), or "
                       "build the layer with attn_input_format=\"thd\" and pass cu_seqlens_q for packed tokens")
            else:
                fix = f"reshape hidden_states to {want}"
            raise _error(f"{_WHO}: hidden_states has rank {x.dim()} but attn_input_format=\"{fmt}\" needs rank {rank}",
                         _shape(x), want.replace("hidden_size", str(L.hidden_size)), fix)
        if x.shape[-1] != L.hidden_size:
            fix = (f"pass hidden states of width {L.hidden_size}, or build the layer with "
                   f"hidden_size={x.shape[-1]}")
            if L.hidden_size in x.shape[:-1]:
                fix += f" (a dimension of size {L.hidden_size} is not last: move it last with .movedim)"
            raise _error(f"{_WHO}: hidden_states' last dimension is {x.shape[-1]}, not hidden_size={L.hidden_size}",
                         _shape(x), want.replace("hidden_size", str(L.hidden_size)), fix)
        p = L.proj.weight
        if not x.is_floating_point() or x.dtype != p.dtype:
            raise _error(f"{_WHO}: hidden_states' dtype differs from the layer's parameters", str(x.dtype),
                         str(p.dtype), f"hidden_states.to({p.dtype}), or build the layer with "
                         f"params_dtype={x.dtype}")
        if x.device != p.device:
            raise _error(f"{_WHO}: hidden_states is on another device than the layer's parameters", str(x.device),
                         str(p.device), f"hidden_states.to(\"{p.device}\") or layer.to(\"{x.device}\")")

    def cu_seqlens(self, cu: Any, name: str, x: Tensor, fmt: str, batch: Optional[int]) -> None:
        if not isinstance(cu, Tensor) or cu.dim() != 1 or cu.dtype != torch.int32:
            raise _error(f"{_WHO}: {name} must be a 1-D int32 tensor of cumulative sequence lengths",
                         f"{_shape(cu)} {getattr(cu, 'dtype', '')}".strip(), "int32 [batch + 1], first 0",
                         f"{name}=torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)")
        if cu.device != x.device:
            raise _error(f"{_WHO}: {name} is on another device than hidden_states", str(cu.device),
                         str(x.device), f"{name}.to(hidden_states.device)")
        if cu.numel() < 1:
            raise _error(f"{_WHO}: {name} is empty", "[0]", "[batch + 1], first 0", "start it with a 0")
        if batch is not None and cu.numel() != batch + 1:
            ob = _dims("bshd" if fmt == "sbhd" else "sbhd", x.shape)[0]
            msg = f"{_WHO}: {name} has {cu.numel()} entries, so {cu.numel() - 1} sequences, but the batch is {batch}"
            if cu.numel() == ob + 1:
                raise _error(msg, f"{name} {_shape(cu)}; {_both_readings(x.shape, fmt)}",
                             f"{name} of {batch + 1} entries", _fix_format(fmt))
            raise _error(msg, f"{name} {_shape(cu)}, hidden_states {_shape(x)} ({fmt})",
                         f"[{batch + 1}]", f"one length per sequence of the batch of {batch}")

    def padding_mask(self, m: Any, x: Tensor, fmt: str, b: int, s: int, name: str) -> Tensor:
        """TE's padding mask (True = padded) [b, 1, 1, s] or [b, s] -> cu_seqlens (right padding only)."""
        if not isinstance(m, Tensor) or m.dtype != torch.bool:
            raise _error(f"{_WHO}: {name} for a padding mask type must be a bool tensor, True = padded token",
                         f"{_shape(m)} {getattr(m, 'dtype', '')}".strip(), f"bool [{b}, 1, 1, {s}]",
                         f"{name} = ~valid (valid: True for real tokens), as a bool tensor")
        if not (m.dim() == 2 or (m.dim() == 4 and m.shape[1] == 1 and m.shape[2] == 1)):
            raise _error(f"{_WHO}: {name} has shape {_shape(m)}, not a padding mask", _shape(m),
                         f"[{b}, 1, 1, {s}] (TE) or [{b}, {s}]",
                         "a [b, 1, s, s] mask is an arbitrary mask: use self_attn_mask_type=\"arbitrary\"")
        mb, ms = m.shape[0], m.shape[-1]
        if (mb, ms) != (b, s):
            ob, os_ = _dims("bshd" if fmt == "sbhd" else "sbhd", x.shape)
            what = f"{_WHO}: {name} {_shape(m)} is for batch {mb}, seq {ms}, but hidden_states has batch {b}, seq {s}"
            if (mb, ms) == (ob, os_):
                raise _error(what, _both_readings(x.shape, fmt), f"{name} [{b}, 1, 1, {s}]", _fix_format(fmt))
            raise _error(what, f"{name} {_shape(m)}, hidden_states {_shape(x)} ({fmt})", f"[{b}, 1, 1, {s}]",
                         "build the mask from the same batch as hidden_states")
        if m.device != x.device:
            raise _error(f"{_WHO}: {name} is on another device than hidden_states", str(m.device),
                         str(x.device), f"{name}.to(hidden_states.device)")
        valid = ~m.reshape(b, s)
        lengths = valid.sum(dim=1, dtype=torch.int32)
        # attn's padded bshd/sbhd batches hold each sequence's tokens first
        # (TE's convention); anything else would silently attend to padding.
        right_padded = torch.arange(s, device=m.device)[None, :] < lengths[:, None]
        if not bool((right_padded == valid).all()):
            row = int((right_padded != valid).any(dim=1).nonzero()[0, 0])
            raise _error(f"{_WHO}: {name} marks padding before real tokens (row {row}); padded batches must be "
                         "right-padded", f"row {row}: {(~valid[row]).int().tolist()} (1 = padded)",
                         "each row: real tokens first, then padding (0...0 1...1)",
                         "pad on the right, or pack the tokens with attn_input_format=\"thd\" and cu_seqlens")
        return F.pad(torch.cumsum(lengths, 0, dtype=torch.int32), (1, 0))

    def arbitrary_mask(self, m: Any, x: Tensor, fmt: str, b: int, s: int) -> Tensor:
        L = self.layer
        if not isinstance(m, Tensor) or m.dim() != 4:
            raise _error(f"{_WHO}: attention_mask for self_attn_mask_type=\"arbitrary\" must be a 4-D tensor",
                         _shape(m), f"[{b} or 1, {L.num_attention_heads} or 1, {s}, {s}] (bool: True = masked out)",
                         f"attention_mask.view({b}, 1, {s}, {s})")
        mb, mh, mq, mk = m.shape
        if mb not in (1, b) or mh not in (1, L.num_attention_heads) or (mq, mk) != (s, s):
            ob, os_ = _dims("bshd" if fmt == "sbhd" else "sbhd", x.shape)
            what = f"{_WHO}: attention_mask {_shape(m)} does not fit batch {b}, seq {s}"
            if mb in (1, ob) and (mq, mk) == (os_, os_):
                raise _error(what, _both_readings(x.shape, fmt), f"[{b} or 1, 1 or heads, {s}, {s}]",
                             _fix_format(fmt))
            raise _error(what, f"attention_mask {_shape(m)}, hidden_states {_shape(x)} ({fmt})",
                         f"[{b} or 1, {L.num_attention_heads} or 1, {s}, {s}]",
                         "build the mask from the same batch and sequence as hidden_states")
        # As TE (True = masked out): DotProductAttention turns it into attn's true-means-visible mask.
        return m if m.dtype == torch.bool else m.to(x.dtype)

    def rotary(self, f: Any, fmt: str, seq: Optional[int], name: str = "rotary_pos_emb") -> None:
        d = self.layer.kv_channels
        if not isinstance(f, Tensor) or f.dim() != 4 or f.shape[1] != 1 or f.shape[2] != 1:
            raise _error(f"{_WHO}: {name} must be TE's angle tensor [max_seq_len, 1, 1, rotary_dim]", _shape(f),
                         f"[>= seq, 1, 1, <= {d}]", "RotaryPositionEmbedding(kv_channels)(max_seq_len)")
        if f.shape[-1] > d or f.shape[-1] % 2:
            raise _error(f"{_WHO}: {name} rotates {f.shape[-1]} channels; it must be even and at most "
                         f"kv_channels={d}", _shape(f), f"[max_seq_len, 1, 1, r], r even, r <= {d}",
                         f"RotaryPositionEmbedding({d})(max_seq_len)")
        if seq is not None and f.shape[0] < seq:
            raise _error(f"{_WHO}: {name} covers {f.shape[0]} positions, the sequence has {seq}", _shape(f),
                         f"[>= {seq}, 1, 1, r]", f"RotaryPositionEmbedding(...)({seq}) or longer")
        if f.device != self.layer.proj.weight.device:
            raise _error(f"{_WHO}: {name} is on another device than the layer", str(f.device),
                         str(self.layer.proj.weight.device), f"{name}.to(hidden_states.device)")

    @staticmethod
    def longest(c: _Checked, max_q: Optional[int], max_kv: Optional[int]) -> int:
        """thd: the longest sequence the angles must cover: from max_seqlen_q
        (and max_seqlen_kv where the keys have their own cu_seqlens) when the
        caller gives them, else read from cu_seqlens (one host sync)."""
        if max_q is not None and c.cu_kv is c.cu_q:
            return max_q
        if max_q is not None and max_kv is not None:
            return max(max_q, max_kv)
        return max(int(cu.diff().max()) if cu.numel() > 1 else 0 for cu in (c.cu_q, c.cu_kv))

    def all(self, x, attention_mask, mask_type, cu_q, cu_kv, max_q, max_kv, rotary, fmt) -> _Checked:
        self.hidden_states(x, fmt)
        c = _Checked()
        if fmt == "thd":
            if cu_q is None:
                raise _error(f"{_WHO}: attn_input_format=\"thd\" needs cu_seqlens_q", "cu_seqlens_q=None",
                             "int32 [batch + 1] cumulative sequence lengths, last = total tokens",
                             "pass cu_seqlens_q (and cu_seqlens_kv, which defaults to it)")
            if attention_mask is not None:
                raise _error(f"{_WHO}: attn_input_format=\"thd\" takes cu_seqlens, not an attention_mask",
                             f"attention_mask {_shape(attention_mask)}", "attention_mask=None",
                             "drop the mask: cu_seqlens_q already separate the packed sequences")
            self.cu_seqlens(cu_q, "cu_seqlens_q", x, fmt, None)
            c.cu_q = cu_q
            c.cu_kv = cu_q if cu_kv is None else cu_kv
            self.cu_seqlens(c.cu_kv, "cu_seqlens_kv", x, fmt, cu_q.numel() - 1)
        else:
            c.batch, c.seq = _dims(fmt, x.shape)
            for cu, name in ((cu_q, "cu_seqlens_q"), (cu_kv, "cu_seqlens_kv")):
                if cu is not None:
                    self.cu_seqlens(cu, name, x, fmt, c.batch)
            if (cu_q is not None or cu_kv is not None) and "padding" not in mask_type:
                raise _error(f"{_WHO}: cu_seqlens with attn_input_format=\"{fmt}\" describe padded sequences, but "
                             f"self_attn_mask_type=\"{mask_type}\" has no padding", f"\"{mask_type}\"",
                             "a padding mask type", "self_attn_mask_type=\"padding_causal\" (or \"padding\")")
            if attention_mask is not None and (cu_q is not None or cu_kv is not None):
                raise _error(f"{_WHO}: both attention_mask and cu_seqlens are given", "both",
                             "one of them", "pass the padding mask or the cu_seqlens, not both")
            if attention_mask is not None:
                if mask_type == "arbitrary":
                    c.arbitrary = self.arbitrary_mask(attention_mask, x, fmt, c.batch, c.seq)
                elif "padding" in mask_type:
                    m_q, m_kv = (attention_mask if isinstance(attention_mask, (tuple, list))
                                 else (attention_mask, attention_mask))
                    c.cu_q = self.padding_mask(m_q, x, fmt, c.batch, c.seq, "attention_mask")
                    c.cu_kv = c.cu_q if m_kv is m_q else self.padding_mask(m_kv, x, fmt, c.batch, c.seq,
                                                                           "attention_mask (kv)")
                else:
                    raise _error(f"{_WHO}: an attention_mask was given but self_attn_mask_type=\"{mask_type}\" "
                                 "does not use one", f"attention_mask {_shape(attention_mask)}",
                                 "a padding or arbitrary mask type",
                                 "self_attn_mask_type=\"padding_causal\" for a [b, 1, 1, s] padding mask, "
                                 "\"arbitrary\" for a [b, 1, s, s] mask, or drop the mask")
            elif mask_type == "arbitrary":
                raise _error(f"{_WHO}: self_attn_mask_type=\"arbitrary\" needs an attention_mask", "None",
                             "[b or 1, heads or 1, s, s]", "pass attention_mask, or choose another mask type")
            else:
                c.cu_q, c.cu_kv = cu_q, (cu_q if cu_kv is None else cu_kv)
        if rotary is not None:
            pair = rotary if isinstance(rotary, (tuple, list)) else (rotary,)
            seq = c.seq if fmt != "thd" else self.longest(c, max_q, max_kv)
            for i, f in enumerate(pair):
                self.rotary(f, fmt, seq, "rotary_pos_emb" if len(pair) == 1 else f"rotary_pos_emb[{i}]")
        return c


# ---- the layer -------------------------------------------------------------------


class TransformerLayer(torch.nn.Module):
    """One pre-norm transformer block with TransformerEngine's TransformerLayer
    interface, attention through attn:

        x = hidden_states + dropout(proj(attention(rope(qkv(norm1(hidden_states))))))
        out = x + dropout(fc2(act(fc1(norm2(x)))))

    Constructor (TE's names and order): hidden_size, ffn_hidden_size,
    num_attention_heads, num_gqa_groups (KV heads; default = query heads),
    layernorm_epsilon, hidden_dropout, attention_dropout (both in training mode
    only), init_method, output_layer_init_method (callables on a weight;
    default normal(0, 0.023)), layer_number, kv_channels (head size; default
    hidden_size / num_attention_heads), self_attn_mask_type ("causal",
    "padding_causal", "no_mask", "padding", "arbitrary", "causal_bottom_right",
    ...), window_size ((left, right), inclusive, -1 unbounded; None =
    unbounded), normalization ("LayerNorm" | "RMSNorm"), activation ("gelu"
    (tanh approximation, as TE), "relu", "swiglu", "geglu", "reglu"),
    attn_input_format ("sbhd" default, "bshd", "thd"), bias, fuse_qkv_params
    (one QKV weight, or three), params_dtype, device (default "cuda" when
    there is one, else "cpu"), and attn's softmax_scale and backend.

    forward(hidden_states, attention_mask=None, self_attn_mask_type=None,
    window_size=None, rotary_pos_emb=None, cu_seqlens_q=None,
    cu_seqlens_kv=None, max_seqlen_q=None, max_seqlen_kv=None):
    - hidden_states: [s, b, hidden] (sbhd), [b, s, hidden] (bshd) or
      [t, hidden] (thd, with cu_seqlens_q). The output has the same shape.
    - **bshd or sbhd cannot be told from the shape**: a [4, 128, 512] tensor
      is batch 128 x seq 4 for sbhd and batch 4 x seq 128 for bshd, and both
      readings are legal, so the layer always reads it as attn_input_format
      says. A mismatch shows only when a mask, cu_seqlens or rotary_pos_emb
      disagrees with that reading; the error then gives both readings and the
      fix. Without any of those, a transposed input runs and is wrong (with a
      causal mask, over the wrong axis): check attn_input_format.
    - attention_mask (TE's convention, True = masked out): for padding mask
      types a bool [b, 1, 1, s] (or [b, s]) of right-padded sequences, or a
      (q, kv) pair; for "arbitrary" [b or 1, heads or 1, s, s].
      cu_seqlens_q / cu_seqlens_kv (int32 [b + 1]) may replace a padding mask.
    - rotary_pos_emb: TE's angles [max_seq_len, 1, 1, rotary_dim]
      (RotaryPositionEmbedding), or a (q, k) pair; applied to q and k
      ("rotate half", positions restarting per sequence in thd).
    Rows of padding tokens come out as the residual path computes them (their
    attention output is 0); their loss should be masked, as with TE.

    Parameters are attn's own (input_layernorm, qkv or query/key/value, proj,
    post_attention_layernorm, fc1, fc2), not TE's checkpoint names. The fused
    QKV weight is laid out [all q heads, all k heads, all v heads] x hidden.
    """

    def __init__(
        self,
        hidden_size: int,
        ffn_hidden_size: int,
        num_attention_heads: int,
        num_gqa_groups: Optional[int] = None,
        layernorm_epsilon: float = 1e-5,
        hidden_dropout: float = 0.1,
        attention_dropout: float = 0.1,
        init_method: Optional[Callable[[Tensor], Any]] = None,
        output_layer_init_method: Optional[Callable[[Tensor], Any]] = None,
        layer_number: Optional[int] = None,
        kv_channels: Optional[int] = None,
        self_attn_mask_type: str = "causal",
        window_size: Optional[Tuple[int, int]] = None,
        *,
        normalization: str = "LayerNorm",
        activation: str = "gelu",
        attn_input_format: str = "sbhd",
        bias: bool = True,
        fuse_qkv_params: bool = True,
        params_dtype: Optional[torch.dtype] = None,
        device: Union[str, torch.device, None] = None,
        softmax_scale: Optional[float] = None,
        backend: Optional[str] = None,
        softmax_type: str = "vanilla",
    ) -> None:
        super().__init__()
        self.hidden_size = int(hidden_size)
        self.ffn_hidden_size = int(ffn_hidden_size)
        self.num_attention_heads = int(num_attention_heads)
        self.num_gqa_groups = self.num_attention_heads if num_gqa_groups is None else int(num_gqa_groups)
        if kv_channels is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(f"{_WHO}: hidden_size={self.hidden_size} is not a multiple of num_attention_heads="
                             f"{self.num_attention_heads}; pass kv_channels (the head size) explicitly")
        self.kv_channels = self.hidden_size // self.num_attention_heads if kv_channels is None else int(kv_channels)
        if normalization not in ("LayerNorm", "RMSNorm"):
            raise ValueError(f"{_WHO}: normalization must be \"LayerNorm\" or \"RMSNorm\", got {normalization!r}")
        if activation not in _ACTIVATIONS:
            raise ValueError(f"{_WHO}: activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        if attn_input_format not in _keywords.FORMATS:
            raise ValueError(f"{_WHO}: attn_input_format must be \"sbhd\", \"bshd\" or \"thd\", "
                             f"got {attn_input_format!r}")
        self.normalization, self.activation, self.attn_input_format = normalization, activation, attn_input_format
        self.self_attn_mask_type = _keywords.mask_name(self_attn_mask_type)
        self.window_size = window_size
        self.hidden_dropout = float(hidden_dropout)
        self.layer_number = 1 if layer_number is None else int(layer_number)
        self.fuse_qkv_params = bool(fuse_qkv_params)
        dtype = torch.get_default_dtype() if params_dtype is None else params_dtype
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        init_method = init_method or _init_normal(0.023)
        output_layer_init_method = output_layer_init_method or _init_normal(0.023)
        h, g, d = self.num_attention_heads, self.num_gqa_groups, self.kv_channels
        kw = dict(bias=bias, dtype=dtype, device=device)

        self.input_layernorm = _Norm(normalization, hidden_size, layernorm_epsilon, dtype, device)
        if self.fuse_qkv_params:
            self.qkv = torch.nn.Linear(hidden_size, (h + 2 * g) * d, **kw)
            qkv_weights = [self.qkv]
        else:
            self.query = torch.nn.Linear(hidden_size, h * d, **kw)
            self.key = torch.nn.Linear(hidden_size, g * d, **kw)
            self.value = torch.nn.Linear(hidden_size, g * d, **kw)
            qkv_weights = [self.query, self.key, self.value]
        self.core_attention = DotProductAttention(
            h, d, num_gqa_groups=g, attention_dropout=attention_dropout, qkv_format=attn_input_format,
            attn_mask_type=self.self_attn_mask_type, window_size=window_size, softmax_scale=softmax_scale,
            backend=backend, layer_number=self.layer_number, softmax_type=softmax_type, device=device)
        self.proj = torch.nn.Linear(h * d, hidden_size, **kw)
        self.post_attention_layernorm = _Norm(normalization, hidden_size, layernorm_epsilon, dtype, device)
        widen, self._act = _ACTIVATIONS[activation]
        self.fc1 = torch.nn.Linear(hidden_size, widen * ffn_hidden_size, **kw)
        self.fc2 = torch.nn.Linear(ffn_hidden_size, hidden_size, **kw)

        with torch.no_grad():
            for lin in qkv_weights + [self.fc1]:
                init_method(lin.weight)
            for lin in (self.proj, self.fc2):
                output_layer_init_method(lin.weight)
            for lin in qkv_weights + [self.proj, self.fc1, self.fc2]:
                if lin.bias is not None:
                    lin.bias.zero_()
        self._checks = _Checks(self)

    def extra_repr(self) -> str:
        return (f"hidden_size={self.hidden_size}, ffn_hidden_size={self.ffn_hidden_size}, "
                f"heads={self.num_attention_heads}, kv_heads={self.num_gqa_groups}, kv_channels={self.kv_channels}, "
                f"format={self.attn_input_format}, mask={self.self_attn_mask_type}, window={self.window_size}, "
                f"{self.normalization}, {self.activation}")

    def _qkv_rope(self, x: Tensor, rotary: Any, fmt: str, c: "_Checked") -> Tuple[Tensor, Tensor, Tensor]:
        """q, k, v split into heads, q and k rotated (attn's fused rotary kernel).
        With fused QKV they are views of one GEMM's output (attn takes strided
        views) made by torch.split, whose backward joins the gradients in one
        copy (three slices would each add a zero-filled copy of the whole
        buffer); where q and k share the angles and positions, one rotary
        kernel rotates both."""
        h, g, d = self.num_attention_heads, self.num_gqa_groups, self.kv_channels
        lead = x.shape[:-1]
        f_q = f_k = None
        if rotary is not None:
            f_q, f_k = rotary if isinstance(rotary, (tuple, list)) else (rotary, rotary)
        cu_q, cu_kv = (c.cu_q, c.cu_kv) if fmt == "thd" else (None, None)
        if self.fuse_qkv_params:
            qkv = self.qkv(x).view(*lead, h + 2 * g, d)
            if f_q is not None and f_q is f_k and cu_q is cu_kv:
                qk, v = qkv.split([h + g, g], dim=-2)
                q, k = apply_rotary_pos_emb(qk, f_q, fmt, cu_q, fused=True).split([h, g], dim=-2)
                return q, k, v
            q, k, v = qkv.split([h, g, g], dim=-2)
        else:
            q, k, v = self.query(x).view(*lead, h, d), self.key(x).view(*lead, g, d), self.value(x).view(*lead, g, d)
        if f_q is not None:
            q = apply_rotary_pos_emb(q, f_q, fmt, cu_q, fused=True)
            k = apply_rotary_pos_emb(k, f_k, fmt, cu_kv, fused=True)
        return q, k, v

    def forward(
        self,
        hidden_states: Tensor,
        attention_mask: Optional[Union[Tensor, Tuple[Tensor, Tensor]]] = None,
        self_attn_mask_type: Optional[str] = None,
        window_size: Optional[Tuple[int, int]] = None,
        rotary_pos_emb: Optional[Union[Tensor, Tuple[Tensor, Tensor]]] = None,
        cu_seqlens_q: Optional[Tensor] = None,
        cu_seqlens_kv: Optional[Tensor] = None,
        max_seqlen_q: Optional[int] = None,
        max_seqlen_kv: Optional[int] = None,
    ) -> Tensor:
        fmt = self.attn_input_format
        mask_type = (self.self_attn_mask_type if self_attn_mask_type is None
                     else _keywords.mask_name(self_attn_mask_type))
        window = self.window_size if window_size is None else window_size
        c = self._checks.all(hidden_states, attention_mask, mask_type, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q,
                             max_seqlen_kv, rotary_pos_emb, fmt)

        residual = hidden_states
        q, k, v = self._qkv_rope(self.input_layernorm(hidden_states), rotary_pos_emb, fmt, c)
        out = self.core_attention(
            q, k, v, c.arbitrary, attn_mask_type=mask_type, window_size=window, cu_seqlens_q=c.cu_q,
            cu_seqlens_kv=c.cu_kv, max_seqlen_q=max_seqlen_q, max_seqlen_kv=max_seqlen_kv)
        x = residual + F.dropout(self.proj(out), self.hidden_dropout, self.training)
        y = self.fc2(self._act(self.fc1(self.post_attention_layernorm(x))))
        return x + F.dropout(y, self.hidden_dropout, self.training)
