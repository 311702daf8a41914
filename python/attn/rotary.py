"""Rotary position embedding with TransformerEngine's conventions: the angle
table (RotaryPositionEmbedding) and its application to q or k
(apply_rotary_pos_emb), unfused in PyTorch's ops or fused into one attn
kernel (attn._C.rotary, the torch.library op `attn::rotary`, with its
backward registered). attn.torch.TransformerLayer uses the fused form."""

# No `from __future__ import annotations`: torch.library reads the op's annotations.

from typing import Optional, Union

import torch
from torch.utils.dlpack import to_dlpack

from attn import _C
from attn._arrays import torch_capsule as _capsule
from attn._arrays import torch_tensor_stream

__all__ = ["RotaryPositionEmbedding", "apply_rotary_pos_emb"]

Tensor = torch.Tensor


class RotaryPositionEmbedding(torch.nn.Module):
    """TE's RotaryPositionEmbedding: forward(max_seq_len) returns the angles
    [max_seq_len, 1, 1, dim] (float32, the two halves repeated, "rotate half"
    convention) that TransformerLayer.forward takes as rotary_pos_emb.
    dim = kv_channels for full rotation; rotary_percent < 1 rotates a prefix.
    device: as TE, the current CUDA device when there is one, else the CPU."""

    def __init__(self, dim: int, rotary_percent: float = 1.0, seq_len_interpolation_factor: Optional[float] = None,
                 rotary_base: float = 10000.0, device: Union[str, torch.device, None] = None) -> None:
        super().__init__()
        dim = int(dim * rotary_percent)
        self.seq_len_interpolation_factor = seq_len_interpolation_factor
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        inv_freq = 1.0 / (rotary_base ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, max_seq_len: int, offset: int = 0) -> Tensor:
        seq = torch.arange(max_seq_len, device=self.inv_freq.device, dtype=torch.float32) + offset
        if self.seq_len_interpolation_factor is not None:
            seq = seq / self.seq_len_interpolation_factor
        freqs = torch.outer(seq, self.inv_freq)
        return torch.cat((freqs, freqs), dim=-1).reshape(max_seq_len, 1, 1, -1)


# ---- unfused: PyTorch's elementwise ops, as TE's fused=False --------------------------


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _thd_positions(cu_seqlens: Tensor, total: int) -> Tensor:
    """Position of each packed token inside its own sequence ([t], int64)."""
    lengths = cu_seqlens.diff().long()
    starts = torch.repeat_interleave(cu_seqlens[:-1].long(), lengths, output_size=total)
    return torch.arange(total, device=cu_seqlens.device) - starts


def _unfused(t: Tensor, freqs: Tensor, tensor_format: str, cu_seqlens: Optional[Tensor]) -> Tensor:
    rot = freqs.shape[-1]
    if tensor_format == "sbhd":
        f = freqs[: t.shape[0]]
    elif tensor_format == "bshd":
        f = freqs[: t.shape[1]].transpose(0, 1)
    else:
        f = freqs[_thd_positions(cu_seqlens, t.shape[0])].squeeze(1)  # [t, 1, rot]
    # As TE: the angles' cos/sin in float32, rounded to t's dtype.
    cos, sin = f.cos().to(t.dtype), f.sin().to(t.dtype)
    t_rot = t[..., :rot]
    out = t_rot * cos + _rotate_half(t_rot) * sin
    return out if rot == t.shape[-1] else torch.cat((out, t[..., rot:]), dim=-1)


# ---- fused: one attn kernel (the CPU runs the same op in float64 math) -------------------


def _rotate(t: Tensor, freqs: Tensor, cu_seqlens: Optional[Tensor], tensor_format: str, backward: bool) -> Tensor:
    if t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
        t = t.contiguous()
    out = t.new_empty(t.shape)
    _C.rotary(to_dlpack(t), to_dlpack(freqs), to_dlpack(out), tensor_format, _capsule(cu_seqlens), backward,
              torch_tensor_stream(t))
    return out


# torch.compile traces the custom op (opaque, with a fake implementation);
# eager calls take _EagerRotary, since the custom op's Python dispatch costs a
# few hundred microseconds of host time per call (as for attn::forward).
@torch.library.custom_op("attn::rotary", mutates_args=())
def _rotary_op(t: Tensor, freqs: Tensor, cu_seqlens: Optional[Tensor], tensor_format: str,
               backward: bool) -> Tensor:
    return _rotate(t, freqs, cu_seqlens, tensor_format, backward)


@_rotary_op.register_fake
def _rotary_fake(t, freqs, cu_seqlens, tensor_format, backward):
    return t.new_empty(t.shape)


def _rotary_setup(ctx, inputs, output):
    _, freqs, cu_seqlens, tensor_format, backward = inputs
    ctx.freqs, ctx.cu_seqlens, ctx.tensor_format, ctx.backward = freqs, cu_seqlens, tensor_format, backward


def _rotary_backward(ctx, grad):
    # The map is linear in t: its gradient is the transposed rotation of grad.
    return _rotary_op(grad, ctx.freqs, ctx.cu_seqlens, ctx.tensor_format, not ctx.backward), None, None, None, None


torch.library.register_autograd("attn::rotary", _rotary_backward, setup_context=_rotary_setup)


class _EagerRotary(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, freqs, cu_seqlens, tensor_format):
        ctx.freqs, ctx.cu_seqlens, ctx.tensor_format = freqs, cu_seqlens, tensor_format
        return _rotate(t, freqs, cu_seqlens, tensor_format, False)

    @staticmethod
    def backward(ctx, grad):
        return _rotate(grad, ctx.freqs, ctx.cu_seqlens, ctx.tensor_format, True), None, None, None


def apply_rotary_pos_emb(t: Tensor, freqs: Tensor, tensor_format: str = "sbhd",
                         cu_seqlens: Optional[Tensor] = None, fused: bool = False) -> Tensor:
    """TE's apply_rotary_pos_emb (non-interleaved): rotates the first
    freqs.shape[-1] channels of t ([s, b, h, d] sbhd, [b, s, h, d] bshd, or
    [t, h, d] thd, where positions restart at each cu_seqlens boundary).

    fused=False (TE's default): PyTorch's elementwise ops, cos and sin
    rounded to t's dtype as TE does. fused=True: one attn kernel per pass,
    math in float32 (float64 on the CPU), about one read and one write of t;
    the angles get no gradient there (TE's fused path gives none either), so a
    freqs that requires grad runs unfused. For thd the fused kernel writes NaN
    for a position past the table; attn.torch.TransformerLayer checks first."""
    if not fused or freqs.requires_grad:
        return _unfused(t, freqs, tensor_format, cu_seqlens)
    if freqs.dtype != torch.float32 or freqs.stride(-1) != 1:
        freqs = freqs.float().contiguous()
    if torch.compiler.is_compiling():
        return _rotary_op(t, freqs, cu_seqlens, tensor_format, False)
    return _EagerRotary.apply(t, freqs, cu_seqlens, tensor_format)
