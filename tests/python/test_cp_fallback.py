"""attn.cp's cp_fallback on the CPU: 2 and 3 processes over gloo
(cp_fallback_worker.py), float64 on the reference backend. Sequence lengths
that break the 2*cp rule (1, 7, ...) run unsplit; out, lse, dq, dk, dv (and
the attn.torch.attention autograd path) must equal the one-process call on the
same data. Also: the ATTN_LOG=1 line, the errors every rank raises alike, the
fallback layout of shard/unshard, and what is refused."""
import datetime  # noqa: F401  (the worker's timeout)
import os
import socket
import sys
import time

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import attn  # noqa: E402
import attn.cp  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import cp_fallback_worker as worker  # noqa: E402


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_RUNS = {}


def _run(size, tmp_path_factory):
    """Every case of one ring size in one spawn (process start-up dominates)."""
    if size not in _RUNS:
        import torch.multiprocessing as mp

        out_dir = str(tmp_path_factory.mktemp(f"cp{size}"))
        seed = int(torch.randint(0, 2**31 - 1, ()).item())  # fresh data every run, the seed printed on failure
        ctx = mp.start_processes(worker.main, args=(size, _free_port(), out_dir, seed), nprocs=size, join=False,
                                 start_method="spawn")
        deadline = time.time() + 120
        while not ctx.join(timeout=1):
            if time.time() > deadline:
                for p in ctx.processes:
                    p.kill()
                pytest.fail(f"cp_fallback workers (size {size}, seed {seed}) did not finish in 120 s")
        _RUNS[size] = ([torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=False) for r in range(size)],
                       seed)
    return _RUNS[size]


def _reference(case, inputs):
    """The one-process call on the whole batch (what the ranks together must reproduce)."""
    _, fmt, mask, _, window = case[:5]
    q, k, v, dout, cu = (inputs[n] for n in ("q", "k", "v", "dout", "cu"))
    kw = dict(qkv_format=fmt, mask=mask, window=window, cu_seqlens_q=cu, cu_seqlens_kv=cu, backend="reference")
    out, lse = attn.forward(q, k, v, return_lse=True, **kw)
    dq, dk, dv = attn.backward(q, k, v, out, dout, lse, **kw)
    return {"out": out, "lse": lse, "dq": dq, "dk": dk, "dv": dv}


CASES = [(size, case) for size, cases in worker.CASES.items() for case in cases]


@pytest.mark.parametrize("size,case", CASES, ids=[f"cp{s}-{c[0]}" for s, c in CASES])
def test_fallback_matches_one_process(size, case, tmp_path_factory):
    ranks, seed = _run(size, tmp_path_factory)
    _, fmt, _, lengths = case[:4]
    padded_to = case[7] if len(case) > 7 else None
    res = ranks[0]["cases"][case[0]]
    want = _reference(case, res["inputs"])
    for name in ("out", "lse", "dq", "dk", "dv"):
        for got_name in (name, "autograd_" + name):
            if got_name not in res["got"]:
                continue
            got = res["got"][got_name]
            assert got.shape == want[name].shape, (got_name, got.shape, want[name].shape)
            torch.testing.assert_close(got, want[name], rtol=1e-10, atol=1e-10,
                                       msg=lambda m: f"{got_name} (seed {seed}): {m}")
    # Something real was compared: finite values, gradients not all zero (dk
    # is 0 for length 1: one visible key, the softmax cannot move).
    if padded_to is None:
        assert torch.isfinite(want["lse"]).all() and want["dv"].abs().min() > 0
    assert torch.isfinite(want["out"]).all() and want["dv"].abs().sum() > 0
    assert max(lengths) == 1 or want["dk"].abs().sum() > 0
    # Rank r held rows [r*n//size, (r+1)*n//size) of every sequence, and said so at ATTN_LOG=1.
    for r, rank in enumerate(ranks):
        rows = sum((r + 1) * n // size - r * n // size for n in (lengths if fmt == "thd" else [padded_to or lengths[0]]))
        assert rank["cases"][case[0]]["local_rows"] == rows
        log = rank["cases"][case[0]]["log"]
        assert f"attn: cp rank {r}/{size}: cp_fallback (forward)" in log, log
        why = "a padded bshd/sbhd batch (cu_seqlens)" if padded_to else "not divisible by 2*cp"
        assert "cp_fallback (backward)" in log and why in log and "K/V all-gathered" in log, log


@pytest.mark.parametrize("size", [2, 3])
def test_fallback_errors_are_the_same_on_every_rank(size, tmp_path_factory):
    ranks, _ = _run(size, tmp_path_factory)
    errors = [r["errors"] for r in ranks]
    for e in errors:
        assert e["mismatch"] and "ranks run different problems" in e["mismatch"] and "h_q" in e["mismatch"], e
        assert e["ring"] and "needs attn's NCCL communicator" in e["ring"], e  # the rule held: the ring, not the fallback
        assert e["padded"] and "padded batch in bshd/sbhd" in e["padded"] and "cp_fallback=True" in e["padded"], e
        if size == 2:
            assert e["layout"] and "not in the fallback layout" in e["layout"] and "cp_fallback=True" in e["layout"], e
    assert len({e["mismatch"] for e in errors}) == 1


@pytest.mark.parametrize("size", [2, 3, 4])
@pytest.mark.parametrize("fmt", ["bshd", "sbhd", "thd"])
def test_fallback_layout_round_trip(size, fmt):
    lengths = [1, 7, 2 * size, 5] if fmt == "thd" else [7]
    if fmt == "thd":
        cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
        x = torch.randn(sum(lengths), 3, 4)
    else:
        cu = None
        x = torch.randn(2, 7, 3, 4) if fmt == "bshd" else torch.randn(7, 2, 3, 4)
    parts = [attn.cp.shard(x, None, qkv_format=fmt, cu_seqlens=cu, rank=r, size=size, cp_fallback=True)
             for r in range(size)]
    assert torch.equal(attn.cp.unshard(parts, qkv_format=fmt, cu_seqlens=cu, cp_fallback=True), x)
    if fmt == "bshd":  # contiguous pieces, in rank order
        assert torch.equal(torch.cat(parts, 1), x)
        assert [p.shape[1] for p in parts] == [(r + 1) * 7 // size - r * 7 // size for r in range(size)]
    if fmt == "thd":  # rank 0's piece of the length-1 sequence is empty; the last rank holds it
        assert parts[0].shape[0] == sum(n // size for n in lengths)


def test_padded_bshd_takes_the_fallback_layout():
    x = torch.randn(3, 8, 2, 4)
    cu = torch.tensor([0, 8, 9, 14], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"(?s)padded batch in bshd/sbhd.*cp_fallback=True.*thd"):
        attn.cp.shard(x, None, cu_seqlens=cu, rank=0, size=2)
    parts = [attn.cp.shard(x, None, cu_seqlens=cu, rank=r, size=2, cp_fallback=True) for r in range(2)]
    assert torch.equal(parts[0], x[:, :4]) and torch.equal(parts[1], x[:, 4:])  # pieces, though 8 keeps the rule
    assert torch.equal(attn.cp.unshard(parts, cu_seqlens=cu, cp_fallback=True), x)


def test_fallback_keeps_chunks_when_every_sequence_keeps_the_rule():
    x = torch.randn(2, 8, 3, 4)
    for r in range(2):
        assert torch.equal(attn.cp.shard(x, None, rank=r, size=2, cp_fallback=True),
                           attn.cp.shard(x, None, rank=r, size=2))


def test_rule_error_names_the_fallback():
    with pytest.raises(ValueError, match=r"(?s)sequence 0 cannot be split.*length 7.*divisible by 2\*cp = 4.*"
                                         r"multiple of 4, or pass cp_fallback=True"):
        attn.cp.shard(torch.zeros(1, 7, 2, 4), None, rank=0, size=2)


def _comm(has_group):
    """A Communicator as Communicator(unique_id, ...) (no group) or from_group
    without NCCL (group only) leaves it, without NCCL or processes."""
    c = attn.cp.Communicator.__new__(attn.cp.Communicator)
    c.rank, c.size, c.device, c.group, c.handle, c.has_group = 0, 2, -1, None, 0, has_group
    return c


def test_fallback_needs_a_process_group():
    q = torch.zeros(1, 4, 2, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"(?s)cp_fallback: needs a torch.distributed process group.*"
                                         r"NCCL unique id.*Communicator.from_group\(group\)"):
        attn.forward(q, q, q, cp=_comm(False), cp_fallback=True)


def test_ring_refuses_a_group_only_communicator():
    q = torch.zeros(1, 4, 2, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"(?s)ring over 2 ranks needs attn's NCCL communicator"):
        attn.forward(q, q, q, cp=_comm(True))


def test_ranks_sharing_a_gpu_get_no_nccl_communicator():
    """from_group's rule on a GPU machine: NCCL needs one GPU per rank, so two
    ranks on one (host, device) keep the group only, and the ring says why
    (this test runs the rule itself: CI has no GPU to run from_group's branch)."""
    assert attn.cp._shared_gpu([("a", 0), ("a", 1), ("b", 0)]) is None
    why = attn.cp._shared_gpu([("a", 0), ("b", 0), ("a", 0)])
    assert why is not None and "ranks 0 and 2 both use GPU 0 on host a" in why and "set_device" in why
    c = _comm(True)
    c.why_no_ring = why
    q = torch.zeros(1, 4, 2, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"(?s)needs attn's NCCL communicator.*ranks 0 and 2 both use GPU 0"):
        attn.forward(q, q, q, cp=c)
