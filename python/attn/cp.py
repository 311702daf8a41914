"""Context parallelism: one long sequence split over the GPUs of a group
(DESIGN.md, "Context parallelism"; C++: attn/cp.h).

Each sequence is cut into 2*cp equal chunks; rank r holds chunks r and
2cp-1-r (balanced causal work). ``shard`` cuts a full batch into this rank's
part, ``unshard`` puts per-rank outputs back together, and ``cp=comm`` on
``attn.forward`` / ``attn.backward`` / ``attn.torch.attention`` runs the ring.
thd calls pass the *global* cu_seqlens (of the whole sequences).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from . import _C

__all__ = ["Communicator", "shard", "unshard", "attention", "plan", "available"]


def available() -> bool:
    """True when this build has context parallelism over NCCL."""
    return bool(_C.cp_nccl_available())


class Communicator:
    """attn's own NCCL communicator over a ring of ranks, one GPU each.

    ``Communicator.from_group(group)``: over a torch.distributed process group
    (the unique id travels through the group; cached per group).
    ``Communicator(unique_id, rank, size, device)``: from an NCCL unique id
    (``Communicator.unique_id()`` on one rank, the same bytes on every rank;
    for JAX or MPI users).
    """

    _by_group: Dict[Any, "Communicator"] = {}

    def __init__(self, unique_id: bytes, rank: int, size: int, device: int, group: Any = None):
        self.rank, self.size, self.device, self.group = int(rank), int(size), int(device), group
        self.handle = _C.cp_comm_init(bytes(unique_id), self.rank, self.size, self.device)

    @staticmethod
    def unique_id() -> bytes:
        return _C.cp_unique_id()

    @classmethod
    def from_group(cls, group: Any = None) -> "Communicator":
        import torch
        import torch.distributed as dist

        key = group if group is not None else "default"
        if key in cls._by_group:
            return cls._by_group[key]
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        box = [cls.unique_id() if rank == 0 else None]
        src = dist.get_global_rank(group, 0) if group is not None else 0
        dist.broadcast_object_list(box, src=src, group=group)
        comm = cls(box[0], rank, size, torch.cuda.current_device(), group)
        cls._by_group[key] = comm
        return comm

    def close(self) -> None:
        if self.handle:
            _C.cp_comm_destroy(self.handle, self.rank, self.size)
            self.handle = 0


def _lengths(x: Any, qkv_format: str, cu_seqlens: Any) -> list:
    if qkv_format == "thd":
        if cu_seqlens is None:
            raise ValueError("attn: thd needs cu_seqlens (the global cumulative sequence lengths)")
        cu = [int(c) for c in cu_seqlens.tolist()]
        return [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
    seq = x.shape[1] if qkv_format == "bshd" else x.shape[0]
    batch = x.shape[0] if qkv_format == "bshd" else x.shape[1]
    return [int(seq)] * int(batch)


def _check_rule(lengths: list, cp: int) -> None:
    for i, n in enumerate(lengths):
        if n % (2 * cp):
            raise ValueError(
                f"attn: sequence {i} cannot be split for context parallelism over {cp} ranks\n"
                f"  got:      length {n}\n"
                f"  expected: every sequence length divisible by 2*cp = {2 * cp}\n"
                f"  fix:      pad the sequence to a multiple of {2 * cp}, or run this batch without cp")


def _positions(lengths: list, qkv_format: str, rank: int, cp: int) -> list:
    """Global positions (thd: tokens) of this rank's rows, in local order."""
    pos, start = [], 0
    for n in (lengths if qkv_format == "thd" else lengths[:1]):
        c = n // (2 * cp)
        first, second = rank, 2 * cp - 1 - rank
        pos += [start + first * c + i for i in range(c)] + [start + second * c + i for i in range(c)]
        start += n
    return pos


def shard(x: Any, comm: Any, *, qkv_format: str = "bshd", cu_seqlens: Any = None, rank: Optional[int] = None,
          size: Optional[int] = None) -> Any:
    """This rank's load-balanced part of a full q/k/v-like tensor (torch):
    chunks r and 2cp-1-r of every sequence along the sequence dimension (thd:
    per sequence, by the global cu_seqlens). Raises ValueError naming the first
    sequence whose length is not a multiple of 2*cp (length 1 included)."""
    import torch

    rank = comm.rank if rank is None else rank
    size = comm.size if size is None else size
    lengths = _lengths(x, qkv_format, cu_seqlens)
    _check_rule(lengths, size)
    index = torch.tensor(_positions(lengths, qkv_format, rank, size), device=x.device)
    return x.index_select(1 if qkv_format == "bshd" else 0, index).contiguous()


def unshard(parts: Any, comm: Any = None, *, qkv_format: str = "bshd", cu_seqlens: Any = None,
            lse: bool = False) -> Any:
    """The full tensor from every rank's part: ``parts`` is this rank's part
    (gathered over comm.group with torch.distributed) or the list of all
    ranks' parts. lse=True for lse tensors ([b, h, s] / [h, t])."""
    import torch

    if not isinstance(parts, (list, tuple)):
        import torch.distributed as dist

        gathered = [torch.empty_like(parts) for _ in range(comm.size)]
        dist.all_gather(gathered, parts.contiguous(), group=comm.group)
        parts = gathered
    size = len(parts)
    dim = (2 if qkv_format != "thd" else 1) if lse else (1 if qkv_format == "bshd" else 0)
    joined = torch.cat(list(parts), dim=dim)
    if qkv_format == "thd":
        lengths = _lengths(None, "thd", cu_seqlens)
    else:
        lengths = [joined.shape[dim]]
    order = [p for r in range(size) for p in _positions(lengths, qkv_format, r, size)]
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(len(order))
    return joined.index_select(dim, inverse.to(joined.device))


def plan(comm: Any, lengths: list, *, mask: str = "causal", window: Any = (-1, -1), qkv_format: str = "bshd") -> str:
    """The CP plan in words: chunks per rank, block calls and steps skipped."""
    from . import _options, _mask_name  # noqa: F401  (the same option parsing as attn.forward)

    size = comm.size if hasattr(comm, "size") else int(comm)
    opts = _options(qkv_format, mask, window, None, 0.0, None, None, 0.0, 0, 0, False, True)
    chunk = lengths[0] // (2 * size) if qkv_format != "thd" and lengths else 0
    return _C.cp_plan(opts, size, chunk)


def refuse_unsupported(cu_seqlens_q: Any, cu_seqlens_kv: Any, **tensors: Any) -> None:
    """The ring passes q, k, v and cu_seqlens_q only: any other tensor given
    with cp= would be ignored, so it is an error instead."""
    given = [name for name, t in tensors.items() if t is not None]
    if cu_seqlens_kv is not None and cu_seqlens_kv is not cu_seqlens_q:
        given.append("cu_seqlens_kv (keys use cu_seqlens_q's lengths)")
    if given:
        raise ValueError(
            "attn: context parallelism (cp=) cannot take " + ", ".join(given) + "\n"
            "  expected: q, k, v (and cu_seqlens_q for thd) of self-attention\n"
            "  fix:      run this call without cp=, or drop what is listed")


def _forward(comm: Any, opts: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, cu_seqlens: Any, backend: Any,
             disable: list, stream: int) -> None:
    _C.cp_forward(opts, q, k, v, out, lse, cu_seqlens, comm.handle, comm.rank, comm.size, backend, disable, stream)


def _backward(comm: Any, opts: Any, q: Any, k: Any, v: Any, out: Any, dout: Any, lse: Any, dq: Any, dk: Any,
              dv: Any, cu_seqlens: Any, backend: Any, disable: list, stream: int) -> None:
    _C.cp_backward(opts, q, k, v, out, dout, lse, dq, dk, dv, cu_seqlens, comm.handle, comm.rank, comm.size,
                   backend, disable, stream)


def attention(q: Any, k: Any, v: Any, *, cp: Any, **kw: Any) -> Any:
    """Differentiable ring attention on torch tensors (this rank's shards):
    attn.forward's keywords; gradients through the ring backward."""
    import torch

    import attn as _attn

    return_lse = kw.pop("return_lse", False)

    class _Ring(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):  # noqa: ANN001
            q, k, v = q.detach(), k.detach(), v.detach()  # DLPack refuses tensors that require grad
            out, lse = _attn.forward(q, k, v, cp=cp, return_lse=True, **kw)
            ctx.save_for_backward(q, k, v, out, lse)
            return out, lse

        @staticmethod
        def backward(ctx, dout, _dlse):  # noqa: ANN001
            q, k, v, out, lse = ctx.saved_tensors
            return _attn.backward(q, k, v, out, dout.contiguous(), lse, cp=cp, **kw)

    out, lse = _Ring.apply(q, k, v)
    return (out, lse) if return_lse else out
