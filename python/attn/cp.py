"""Context parallelism: one long sequence split over the GPUs of a group
(DESIGN.md, "Context parallelism"; C++: attn/cp.h).

Each sequence is cut into 2*cp equal chunks; rank r holds chunks r and
2cp-1-r (balanced causal work). ``shard`` cuts a full batch into this rank's
part, ``unshard`` puts per-rank outputs back together, and ``cp=comm`` on
``attn.forward`` / ``attn.backward`` / ``attn.torch.attention`` runs the ring.
thd calls pass the *global* cu_seqlens (of the whole sequences).

``cp_fallback=True`` (on shard, unshard and the calls, the same on every rank)
lets a batch that breaks the 2*cp rule run without splitting: each rank holds
a contiguous piece of every sequence, K/V are all-gathered over the
Communicator's process group, and each rank computes its own query rows with
one ordinary attn call (docs/CP.md, "The fallback").

The rule and both layouts (which sequences break the rule, whether a batch
takes the fallback, each rank's chunks or piece) come from the C++ core
(attn/cp.h) through attn._C; this module moves the tensors. It is built on
attn's functional API and imports it; attn.forward, attn.backward and
attn.torch.attention reach this module only through the Communicator they are
given (cp=), so no module of attn imports this one.
"""
from __future__ import annotations

import socket
from typing import Any, Dict, Optional

from . import _C
from . import _arrays
from . import _keywords

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
    for JAX or MPI users); it has no process group, so cp_fallback (which
    runs over torch.distributed collectives) refuses it.
    Without NCCL in the build, without a GPU, or where two ranks share a GPU
    (CPU processes over gloo on a GPU machine), ``from_group`` keeps the group
    only (handle 0, the reason in ``why_no_ring``): cp_fallback runs over it
    (e.g. gloo on CPU tensors), the ring refuses it and says why.
    """

    _by_group: Dict[Any, "Communicator"] = {}

    def __init__(self, unique_id: bytes, rank: int, size: int, device: int, group: Any = None):
        self.rank, self.size, self.device, self.group = int(rank), int(size), int(device), group
        self.has_group = False  # group=None is also torch.distributed's spelling of the default group
        self.why_no_ring = None  # set on a group-only Communicator (handle 0): what the ring lacks
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
        why_no_ring = None
        if not (available() and torch.cuda.is_available()):
            why_no_ring = "this build has no NCCL, or no GPU"
        else:
            # NCCL needs one GPU per rank: ranks that share one (a gloo group of
            # CPU processes on a GPU machine, or a missing torch.cuda.set_device)
            # would fail inside ncclCommInitRank with "invalid usage". Every rank
            # gathers the same list, so every rank takes the same branch.
            everyone = [None] * size
            dist.all_gather_object(everyone, (socket.gethostname(), torch.cuda.current_device()), group=group)
            why_no_ring = _shared_gpu(everyone)
        if why_no_ring is not None:
            # The group alone, enough for cp_fallback; the ring call says what it lacks.
            comm = cls.__new__(cls)
            comm.rank, comm.size, comm.device, comm.group, comm.handle = rank, size, -1, group, 0
        else:
            box = [cls.unique_id() if rank == 0 else None]
            src = dist.get_global_rank(group, 0) if group is not None else 0
            dist.broadcast_object_list(box, src=src, group=group)
            comm = cls(box[0], rank, size, torch.cuda.current_device(), group)
        comm.why_no_ring = why_no_ring
        comm.has_group = True
        cls._by_group[key] = comm
        return comm

    def close(self) -> None:
        if self.handle:
            _C.cp_comm_destroy(self.handle, self.rank, self.size)
            self.handle = 0

    # ---- calls made with cp=self: attn.forward, attn.backward, attn.torch.attention ----

    def _forward(self, opts: Any, cp_fallback: bool, q: Any, k: Any, v: Any, out: Any, lse: Any, cu_seqlens_q: Any,
                 backend: Any, disable: list, stream: int, sink: Any = None, max_logit: Any = None) -> None:
        """out (and lse, max_logit) of this rank's shards: the ring, or the fallback where the batch takes it.
        attn.forward has refused the inputs neither takes (_keywords.check_cp_inputs)."""
        plan = _route(self, cp_fallback, opts, q, k, v, cu_seqlens_q)
        if plan is not None:  # the batch breaks the 2*cp rule: unsplit, K/V gathered
            _no_sinks_in_fallback(opts, max_logit)
            with _on_stream(q, stream):
                fallback_forward(self, plan, opts, q, k, v, out, lse, backend, disable, stream)
            return
        _need_ring(self)
        d = _arrays.as_dlpack
        _C.cp_forward(opts, d(q), d(k), d(v), out, lse, d(cu_seqlens_q), self.handle, self.rank, self.size, backend,
                      disable, stream, d(sink), max_logit)

    def _backward(self, opts: Any, cp_fallback: bool, q: Any, k: Any, v: Any, out: Any, dout: Any, lse: Any,
                  dq: Any, dk: Any, dv: Any, cu_seqlens_q: Any, backend: Any, disable: list, stream: int,
                  sink: Any = None, dsink: Any = None) -> None:
        """dq, dk, dv (and dsink, summed over the ranks) of this rank's shards, by the same route as the forward."""
        plan = _route(self, cp_fallback, opts, q, k, v, cu_seqlens_q)
        if plan is not None:
            _no_sinks_in_fallback(opts, None)
            with _on_stream(q, stream):
                fallback_backward(self, plan, opts, q, k, v, out, dout, lse, dq, dk, dv, backend, disable, stream)
            return
        _need_ring(self)
        d = _arrays.as_dlpack
        _C.cp_backward(opts, d(q), d(k), d(v), d(out), d(dout), d(lse), dq, dk, dv, d(cu_seqlens_q), self.handle,
                       self.rank, self.size, backend, disable, stream, d(sink), dsink)

    def _attention(self, q: Any, k: Any, v: Any, **kw: Any) -> Any:
        """attn.torch.attention(..., cp=self): this module's attention()."""
        return attention(q, k, v, cp=self, **kw)


def _no_sinks_in_fallback(opts: Any, max_logit: Any) -> None:
    if opts.softmax_type != "vanilla" or max_logit is not None:
        raise ValueError("attn: context parallelism's fallback (a batch that breaks the 2*cp rule) runs "
                         "softmax_type=\"vanilla\" without return_max_logit\n"
                         "  fix:      give every sequence a length divisible by 2*cp, or run this call without cp=")


def _on_stream(x: Any, stream: int) -> Any:
    """A context that makes the call's stream PyTorch's current one. The
    fallback's gathers, copies and collectives are PyTorch work, queued on the
    current stream, between attn calls queued on `stream`: with a stream= other
    than the current one they would run unordered (K/V read before gathered,
    gradients summed before written, temporaries freed while in use)."""
    import contextlib

    if not getattr(x, "is_cuda", False) or int(stream) == _arrays.torch_stream(x.device.index):
        return contextlib.nullcontext()
    import torch

    return torch.cuda.stream(torch.cuda.ExternalStream(int(stream), device=x.device))


def _shared_gpu(everyone: list) -> Optional[str]:
    """Given each rank's (host, device), why NCCL cannot span them (two ranks on one GPU), or None."""
    first: Dict[tuple, int] = {}
    for r, where in enumerate(everyone):
        host, device = where
        if (host, device) in first:
            return (f"ranks {first[host, device]} and {r} both use GPU {device} on host {host}; "
                    "call torch.cuda.set_device(local_rank) before Communicator.from_group")
        first[host, device] = r
    return None


def _lengths(x: Any, qkv_format: str, cu_seqlens: Any) -> list:
    if qkv_format == "thd":
        if cu_seqlens is None:
            raise ValueError("attn: thd needs cu_seqlens (the global cumulative sequence lengths)")
        cu = [int(c) for c in cu_seqlens.tolist()]
        return [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
    seq = x.shape[1] if qkv_format == "bshd" else x.shape[0]
    batch = x.shape[0] if qkv_format == "bshd" else x.shape[1]
    return [int(seq)] * int(batch)


# The fix line of the rule's error, as this module's callers allow the fallback.
_ALLOW_FALLBACK = ("pass cp_fallback=True (to shard, unshard and the call, on every rank) to run the batch "
                   "unsplit with K/V gathered to every rank")


def _padded_refusal(qkv_format: str) -> ValueError:
    return ValueError(
        "attn: context parallelism: a padded batch in bshd/sbhd (cu_seqlens) cannot use the ring\n"
        f"  got:      qkv_format {qkv_format} with cu_seqlens (true lengths of padded sequences)\n"
        "  expected: full sequences for the ring in bshd/sbhd, or thd for packed ones\n"
        "  fix:      pass cp_fallback=True (to shard, unshard and the call, on every rank) to run it unsplit "
        "with K/V gathered, or pack the batch to thd (real tokens only) for the ring")


def _fallback_layout(x_lengths: list, qkv_format: str, cu_seqlens: Any, size: int, cp_fallback: bool) -> bool:
    """True when shard/unshard/the call use the fallback's contiguous pieces:
    cp_fallback and a sequence breaking the rule, or a padded bshd/sbhd batch
    (the ring runs no padding there; it needs cp_fallback)."""
    if qkv_format != "thd" and cu_seqlens is not None:
        if not cp_fallback:
            raise _padded_refusal(qkv_format)
        return True
    # All or nothing: with cp_fallback, one sequence that breaks the rule sends
    # the whole batch unsplit; without it, that sequence is the rule's error.
    return _C.cp_uses_fallback(x_lengths, size, cp_fallback, _ALLOW_FALLBACK)


def _sequences(lengths: list, qkv_format: str) -> list:
    """The sequences a layout cuts: thd's packed ones, or one bshd/sbhd sequence (every one is cut alike along s)."""
    return lengths if qkv_format == "thd" else lengths[:1]


def _positions(lengths: list, qkv_format: str, rank: int, cp: int, fallback: bool = False) -> list:
    """Global positions (thd: tokens) of this rank's rows, in local order:
    chunks r and 2cp-1-r of each sequence, or (fallback) its contiguous piece."""
    return _C.cp_rank_positions(_sequences(lengths, qkv_format), rank, cp, fallback)


def _inverse_order(lengths: list, qkv_format: str, size: int, fallback: bool) -> Any:
    """Index that puts every rank's rows, concatenated in rank order, back in global order."""
    import torch

    order = [p for r in range(size) for p in _positions(lengths, qkv_format, r, size, fallback)]
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
    return inverse


def _all_gather_rows(x: Any, dim: int, comm: Any, counts: Optional[list] = None) -> list:
    """Every rank's x (rows along `dim` may differ between ranks: the fallback's
    pieces), in rank order. Collectives want equal sizes, so each part is padded
    to the longest and trimmed after; counts None gathers them first."""
    import torch
    import torch.distributed as dist

    x = x.contiguous()
    if counts is None:
        mine = torch.tensor([x.shape[dim]], dtype=torch.int64, device=x.device)
        every = [torch.empty_like(mine) for _ in range(comm.size)]
        dist.all_gather(every, mine, group=comm.group)
        counts = [int(c.item()) for c in every]
    longest = max(counts)
    if x.shape[dim] < longest:
        pad = list(x.shape)
        pad[dim] = longest - x.shape[dim]
        x = torch.cat([x, x.new_zeros(pad)], dim)
    parts = [torch.empty_like(x) for _ in range(comm.size)]
    dist.all_gather(parts, x, group=comm.group)
    return [p.narrow(dim, 0, c) for p, c in zip(parts, counts)]


def shard(x: Any, comm: Any, *, qkv_format: str = "bshd", cu_seqlens: Any = None, rank: Optional[int] = None,
          size: Optional[int] = None, cp_fallback: bool = False) -> Any:
    """This rank's load-balanced part of a full q/k/v-like tensor (torch):
    chunks r and 2cp-1-r of every sequence along the sequence dimension (thd:
    per sequence, by the global cu_seqlens). Raises ValueError naming the first
    sequence whose length is not a multiple of 2*cp (length 1 included).

    cp_fallback=True: if any sequence breaks that rule, the whole batch takes
    the fallback layout instead: rank r holds rows [r*n//size, (r+1)*n//size)
    of every sequence (length n), contiguous; pieces may be empty (n < size).
    Pass the same cp_fallback to unshard and to the attention call.
    bshd/sbhd with cu_seqlens (a padded batch, true lengths as
    TransformerEngine passes them) needs cp_fallback=True and always takes the
    fallback layout: pieces of the padded length s."""
    rank = comm.rank if rank is None else rank
    size = comm.size if size is None else size
    lengths = _lengths(x, qkv_format, cu_seqlens)
    fallback = _fallback_layout(lengths, qkv_format, cu_seqlens, size, cp_fallback)
    import torch

    index = torch.tensor(_positions(lengths, qkv_format, rank, size, fallback), dtype=torch.long, device=x.device)
    return x.index_select(1 if qkv_format == "bshd" else 0, index).contiguous()


def unshard(parts: Any, comm: Any = None, *, qkv_format: str = "bshd", cu_seqlens: Any = None,
            lse: bool = False, cp_fallback: bool = False) -> Any:
    """The full tensor from every rank's part: ``parts`` is this rank's part
    (gathered over comm.group with torch.distributed) or the list of all
    ranks' parts. lse=True for lse tensors ([b, h, s] / [h, t]). cp_fallback:
    as given to shard (the layout follows the same rule)."""
    import torch

    dim = (2 if qkv_format != "thd" else 1) if lse else (1 if qkv_format == "bshd" else 0)
    if not isinstance(parts, (list, tuple)):
        parts = _all_gather_rows(parts, dim, comm)  # the fallback's pieces may differ in length
    size = len(parts)
    joined = torch.cat(list(parts), dim=dim)
    lengths = _lengths(None, "thd", cu_seqlens) if qkv_format == "thd" else [joined.shape[dim]]
    fallback = _fallback_layout(lengths, qkv_format, cu_seqlens, size, cp_fallback)
    return joined.index_select(dim, _inverse_order(lengths, qkv_format, size, fallback).to(joined.device))


def plan(comm: Any, lengths: list, *, mask: str = "causal", window: Any = (-1, -1), qkv_format: str = "bshd") -> str:
    """The CP plan in words: chunks per rank, block calls and steps skipped."""
    size = comm.size if hasattr(comm, "size") else int(comm)
    opts = _keywords.options(qkv_format, mask, window, None, 0.0, None, None, 0.0, 0, 0, False, True)
    chunk = lengths[0] // (2 * size) if qkv_format != "thd" and lengths else 0
    return _C.cp_plan(opts, size, chunk)


def _need_ring(comm: Any) -> None:
    # A handle of 0 runs the plain one-GPU call in C++: right for size 1, silently wrong on shards.
    if not comm.handle and comm.size > 1:
        raise ValueError(
            f"attn: the context-parallel ring over {comm.size} ranks needs attn's NCCL communicator\n"
            "  got:      a Communicator over the process group only ("
            f"{getattr(comm, 'why_no_ring', None) or 'no NCCL communicator'})\n"
            "  expected: a build with NCCL, CUDA tensors, one GPU per rank, Communicator.from_group()\n"
            "  fix:      run on GPUs with NCCL; cp_fallback=True only helps batches that break the 2*cp rule")


# ---- cp_fallback: a batch that breaks the rule runs unsplit -------------------

_CAUSAL = _keywords.CAUSAL_MASKS
_THD_MASKS = ("no_mask", "padding") + _CAUSAL
_DENSE_MASKS = ("no_mask", "causal", "causal_bottom_right")
_PADDED_MASKS = ("padding", "padding_causal", "padding_causal_bottom_right")


def _refuse(what: str, got: str, expected: str, fix: str) -> None:
    raise ValueError(f"attn: cp_fallback: {what}\n  got:      {got}\n  expected: {expected}\n  fix:      {fix}")


class _Fallback:
    """How this call runs unsplit: every sequence's whole length (padded
    bshd/sbhd: s), each rank's local rows (bshd/sbhd: along s; thd: tokens),
    the true lengths of a padded bshd/sbhd batch (else None) and why."""

    def __init__(self, lengths: list, counts: list, true_lengths: Optional[list], why: str):
        self.lengths, self.counts, self.true_lengths, self.why = lengths, counts, true_lengths, why


def _route(comm: Any, cp_fallback: bool, opts: Any, q: Any, k: Any, v: Any, cu_seqlens: Any) -> Optional[_Fallback]:
    """A cp= call's choice: None runs the ring, else the fallback's plan."""
    if opts.qkv_format != "thd" and cu_seqlens is not None and not cp_fallback:
        raise _padded_refusal(opts.qkv_format)  # the ring would refuse it too, with a fix that omits the fallback
    return _fallback_plan(comm, opts, q, k, v, cu_seqlens) if cp_fallback else None


def _fallback_plan(comm: Any, opts: Any, q: Any, k: Any, v: Any, cu_seqlens: Any) -> Optional[_Fallback]:
    """None when every sequence keeps the rule (the ring runs, as shard chose);
    else the fallback's plan. Ranks exchange a fingerprint first (bshd/sbhd
    need it anyway: the whole length is the sum of the pieces), so a mismatch
    or a wrong layout is the same error on every rank, never a hang."""
    import zlib

    import torch
    import torch.distributed as dist

    qkv_format, mask, window, dropout_p = opts.qkv_format, opts.mask, opts.window, opts.dropout_p
    if not getattr(comm, "has_group", False):
        _refuse("needs a torch.distributed process group (it gathers K/V with torch.distributed collectives)",
                "a Communicator made from an NCCL unique id, without a group",
                "attn.cp.Communicator.from_group(group)",
                "make the communicator with Communicator.from_group(group), or pad every sequence to a "
                f"multiple of 2*cp = {2 * comm.size} and drop cp_fallback")
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"attn: cp_fallback works on torch tensors (torch.distributed moves them); "
                            f"{name} is a {type(x).__module__}.{type(x).__name__}")
    thd = qkv_format == "thd"
    padded = not thd and cu_seqlens is not None
    size, rank = comm.size, comm.rank
    true_lengths = _lengths(None, "thd", cu_seqlens) if cu_seqlens is not None else None
    if thd:
        lengths = true_lengths
        if _C.cp_first_rule_breaker(lengths, size) is None:
            return None  # global cu_seqlens: every rank decides alike; the ring checks that ranks agree
    masks = _THD_MASKS if thd else _PADDED_MASKS if padded else _DENSE_MASKS
    if mask not in masks:
        _refuse("mask type" + (" of a padded bshd/sbhd batch (cu_seqlens)" if padded else ""), mask,
                ", ".join(masks), "use one of those, or run this call without cp")
    if dropout_p:
        _refuse("dropout", str(dropout_p), "0 (dropout's pattern follows positions inside the call)",
                "run this call without cp")
    if thd and window != (-1, -1):
        _refuse("a sliding window in thd", str(window), "no window in the fallback's thd",
                "pad each sequence to a multiple of 2*cp and run the ring (it takes windows in thd), "
                "or run this call without cp")
    if padded and window != (-1, -1) and mask not in _CAUSAL:
        # Each sequence's key range would end at its own true length, so the
        # window's shift would differ per sequence within one call.
        _refuse("a sliding window without a causal mask in a padded bshd/sbhd batch", str(window),
                "a causal padding mask with a window, or no window", "pack the batch to thd, or run it without cp")
    if padded and (cu_seqlens.dim() != 1 or len(true_lengths) != q.shape[1 - (1 if qkv_format == "bshd" else 0)]):
        _refuse("cu_seqlens of a padded batch", f"{len(true_lengths)} sequences",
                f"batch + 1 = {q.shape[1 - (1 if qkv_format == 'bshd' else 0)] + 1} entries", "pass cu_seqlens [b + 1]")
    sd = 1 if qkv_format == "bshd" else 0
    fields = [("q rows", q.shape[sd]), ("k rows", k.shape[sd]), ("v rows", v.shape[sd]),
              ("batch", 0 if thd else q.shape[1 - sd]), ("h_q", q.shape[-2]), ("h_kv", k.shape[-2]),
              ("d_qk", q.shape[-1]), ("d_v", v.shape[-1]), ("dtype", zlib.crc32(str(q.dtype).encode())),
              ("causal", int(mask in _CAUSAL)), ("window.left", window[0]), ("window.right", window[1]),
              ("sequence lengths (crc)", zlib.crc32(repr(true_lengths).encode()) if true_lengths else 0)]
    mine = torch.tensor([f for _, f in fields], dtype=torch.int64, device=q.device)
    every = [torch.empty_like(mine) for _ in range(size)]
    dist.all_gather(every, mine, group=comm.group)
    table = [[int(x) for x in t.tolist()] for t in every]
    for j, (name, _) in enumerate(fields):
        if j >= 3 and any(row[j] != table[0][j] for row in table):  # rows differ between ranks by design
            other = next(r for r, row in enumerate(table) if row[j] != table[0][j])
            raise ValueError(
                f"attn: cp_fallback: the ranks run different problems\n"
                f"  got:      {name} {table[0][j]} on rank 0, {table[other][j]} on rank {other}\n"
                f"  expected: the same call on every rank (its own shard of one batch)\n"
                f"  fix:      call with the same shapes, dtype, mask, window and cu_seqlens on every rank")
    for r, row in enumerate(table):
        if not row[0] == row[1] == row[2]:
            _refuse("q, k and v must hold the same tokens (self-attention)",
                    f"rows q {row[0]}, k {row[1]}, v {row[2]} on rank {r}", "equal", "shard q, k and v alike")
    if not thd:
        lengths = [sum(row[0] for row in table)] * q.shape[1 - sd]
    breaker = _C.cp_first_rule_breaker(lengths, size)
    if padded:
        why = "a padded bshd/sbhd batch (cu_seqlens): the ring runs no padding masks there"
    elif breaker is None:
        return None  # every sequence keeps the rule: shard chose chunks, the ring runs
    else:
        why = f"sequence {breaker} has length {lengths[breaker]}, not divisible by 2*cp = {2 * size}"
    expected = _C.cp_fallback_rows(_sequences(lengths, qkv_format), size)
    got = [row[0] for row in table]
    if got != expected:
        r = next(i for i in range(size) if got[i] != expected[i])
        _refuse(f"rank {r}'s shard is not in the fallback layout",
                f"{got[r]} local {'tokens' if thd else 'rows'} on rank {r}",
                f"{expected[r]}: rows [r*n//{size}, (r+1)*n//{size}) of every sequence (length n)",
                "cut the batch with attn.cp.shard(x, comm, cp_fallback=True)")
    return _Fallback(lengths, got, true_lengths if padded else None, why)


def _say(comm: Any, plan: _Fallback, pass_name: str) -> None:
    import os
    import sys

    try:
        level = int(os.environ.get("ATTN_LOG", "0"))
    except ValueError:
        level = 0
    if level >= 1:
        print(f"attn: cp rank {comm.rank}/{comm.size}: cp_fallback ({pass_name}): {plan.why}; the whole batch "
              f"runs unsplit: K/V all-gathered to every rank, this rank computes its {plan.counts[comm.rank]} "
              "contiguous query rows", file=sys.stderr)


def _full_kv(comm: Any, plan: _Fallback, k: Any, v: Any, qkv_format: str) -> tuple:
    """The whole K and V on every rank: one all-gather of [k | v] (last dim)."""
    import torch

    sd = 1 if qkv_format == "bshd" else 0
    parts = _all_gather_rows(torch.cat([k, v], -1), sd, comm, plan.counts)
    whole = torch.cat(parts, sd)
    whole = whole.index_select(sd, _inverse_order(plan.lengths, qkv_format, comm.size, True).to(whole.device))
    return whole[..., :k.shape[-1]], whole[..., k.shape[-1]:]


def _cumsum(xs: list) -> list:
    out, total = [], 0
    for x in xs:
        total += x
        out.append(total)
    return out


def _local_call(comm: Any, plan: _Fallback, K: Any, V: Any, qkv_format: str, mask: str, window: tuple) -> Any:
    """(keys, values, the call's keywords, the key rows used) for this rank's
    query rows, or None when it holds no rows. Queries of rows [a, b) of a
    length-n sequence see keys [0, hi) bottom-right aligned, which shifts them
    by hi - (b - a): hi = b puts query i at global row a + i. Causal: keys
    [0, b) with causal_bottom_right. Otherwise every key, or [0, b + right)
    with a right window, whose left/right then shift by hi - b."""
    import torch

    rank, size = comm.rank, comm.size
    causal = mask in _CAUSAL
    if plan.counts[rank] == 0:
        return None
    if qkv_format != "thd":
        sd = 1 if qkv_format == "bshd" else 0
        n = plan.lengths[0]
        a, b = _C.cp_fallback_piece(n, rank, size)
        left, right = window
        if causal:
            hi, win = b, (left, right)  # causal clips right to 0; shift = a, as needed
        else:
            hi = n if right < 0 else min(n, b + right)
            extra = hi - b
            win = (left + extra if left >= 0 else -1, right - extra if right >= 0 else -1)
        kw = dict(qkv_format=qkv_format, mask="causal_bottom_right" if causal else "no_mask", window=win)
        if plan.true_lengths is not None:
            # Padded: sequence j's queries are rows [a, min(b, L)) of its true
            # length L and its keys [0, min(hi, L)); bottom-right alignment
            # shifts the queries by a, as above (causal; windows only with causal).
            dev = K.device
            lq = [max(0, min(b, n_j) - a) for n_j in plan.true_lengths]
            lk = [min(hi, n_j) for n_j in plan.true_lengths]
            kw.update(mask="padding_causal_bottom_right" if causal else "padding",
                      cu_seqlens_q=torch.tensor([0] + _cumsum(lq), dtype=torch.int32, device=dev),
                      cu_seqlens_kv=torch.tensor([0] + _cumsum(lk), dtype=torch.int32, device=dev))
        return K.narrow(sd, 0, hi), V.narrow(sd, 0, hi), kw, hi
    cu_q, cu_kv, keys, start = [0], [0], [], 0
    for n in plan.lengths:
        a, b = _C.cp_fallback_piece(n, rank, size)
        hi = b if causal else n
        cu_q.append(cu_q[-1] + b - a)
        cu_kv.append(cu_kv[-1] + hi)
        keys += range(start, start + hi)
        start += n
    dev = K.device
    keys = torch.tensor(keys, dtype=torch.long, device=dev)
    kw = dict(qkv_format="thd", mask="causal_bottom_right" if causal else "no_mask",
              cu_seqlens_q=torch.tensor(cu_q, dtype=torch.int32, device=dev),
              cu_seqlens_kv=torch.tensor(cu_kv, dtype=torch.int32, device=dev))
    return K.index_select(0, keys), V.index_select(0, keys), kw, keys


def _passed(opts: Any, backend: Any, disable: list, stream: int) -> dict:
    """The keywords a fallback's local call keeps from the whole call."""
    return dict(softmax_scale=opts.softmax_scale, softcap=opts.softcap, deterministic=opts.deterministic,
                backend=backend, disable=disable, stream=stream)


def fallback_forward(comm: Any, plan: _Fallback, opts: Any, q: Any, k: Any, v: Any, out: Any, lse: Any,
                     backend: Any, disable: list, stream: int) -> None:
    """out (and lse, if given) of this rank's query rows, computed against the gathered K/V."""
    import attn as _attn

    _say(comm, plan, "forward")
    qkv_format = opts.qkv_format
    K, V = _full_kv(comm, plan, k, v, qkv_format)
    call = _local_call(comm, plan, K, V, qkv_format, opts.mask, opts.window)
    if call is None:
        return  # no rows here (a sequence shorter than the ring): out and lse are empty
    k_sub, v_sub, ckw, _ = call
    _attn.forward(q, k_sub, v_sub, out=out, lse=lse, return_lse=lse is not None, **ckw,
                  **_passed(opts, backend, disable, stream))


def fallback_backward(comm: Any, plan: _Fallback, opts: Any, q: Any, k: Any, v: Any, out: Any, dout: Any, lse: Any,
                      dq: Any, dk: Any, dv: Any, backend: Any, disable: list, stream: int) -> None:
    """dq of this rank's rows; dk/dv of the gathered keys, summed over the
    ranks in fp32 or wider by one reduce-scatter of [dK | dV] to their owners."""
    import torch
    import torch.distributed as dist

    import attn as _attn

    _say(comm, plan, "backward")
    qkv_format = opts.qkv_format
    K, V = _full_kv(comm, plan, k, v, qkv_format)
    sd = 1 if qkv_format == "bshd" else 0
    acc = torch.promote_types(K.dtype, torch.float32)  # sums in fp32 (fp64 stays fp64)
    grads = torch.zeros(K.shape[:-1] + (K.shape[-1] + V.shape[-1],), dtype=acc, device=K.device)
    call = _local_call(comm, plan, K, V, qkv_format, opts.mask, opts.window)
    if call is not None:
        k_sub, v_sub, ckw, keys = call
        _, dk_sub, dv_sub = _attn.backward(q, k_sub, v_sub, out, dout, lse, dq=dq, **ckw,
                                           **_passed(opts, backend, disable, stream))
        part = torch.cat([dk_sub, dv_sub], -1).to(acc)
        if qkv_format == "thd":
            grads.index_add_(0, keys, part)
        else:
            grads.narrow(sd, 0, keys).copy_(part)
    # Every rank joins the sum, rows or not: one reduce-scatter, each rank's
    # rows padded to the longest piece (collectives want equal sizes).
    longest = max(plan.counts)
    sends = []
    for r in range(comm.size):
        rows = grads.index_select(sd, torch.tensor(_positions(plan.lengths, qkv_format, r, comm.size, True),
                                                   dtype=torch.long, device=grads.device))
        pad = list(rows.shape)
        pad[sd] = longest - rows.shape[sd]
        sends.append(torch.cat([rows, rows.new_zeros(pad)], sd))
    mine = torch.empty_like(sends[0])
    dist.reduce_scatter(mine, sends, group=comm.group)
    mine = mine.narrow(sd, 0, plan.counts[comm.rank])
    dk.copy_(mine[..., :K.shape[-1]])
    dv.copy_(mine[..., K.shape[-1]:])


def attention(q: Any, k: Any, v: Any, *, cp: Any, **kw: Any) -> Any:
    """Differentiable ring attention on torch tensors (this rank's shards):
    attn.forward's keywords (cp_fallback= included); gradients through the
    ring backward, or the fallback's when the batch takes it."""
    import torch

    import attn as _attn

    return_lse = kw.pop("return_lse", False)
    sink = kw.pop("sink", None)  # softmax_type="learnable": its gradient is dsink, summed over the ranks

    class _Ring(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, sink):  # noqa: ANN001
            q, k, v = q.detach(), k.detach(), v.detach()  # DLPack refuses tensors that require grad
            sink = None if sink is None else sink.detach()
            out, lse = _attn.forward(q, k, v, cp=cp, return_lse=True, sink=sink, **kw)
            ctx.save_for_backward(q, k, v, out, lse, sink)
            return out, lse

        @staticmethod
        def backward(ctx, dout, _dlse):  # noqa: ANN001
            q, k, v, out, lse, sink = ctx.saved_tensors
            grads = _attn.backward(q, k, v, out, dout.contiguous(), lse, cp=cp, sink=sink, **kw)
            return grads[0], grads[1], grads[2], grads[3] if sink is not None else None

    out, lse = _Ring.apply(q, k, v, sink)
    return (out, lse) if return_lse else out
