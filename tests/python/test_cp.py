"""attn.cp: shard / unshard and the rule on the CPU (no GPU needed); the ring
on 2 GPUs through torchrun (cp_worker.py), skipped with fewer than 2 GPUs."""
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import attn  # noqa: E402
import attn.cp  # noqa: E402


@pytest.mark.parametrize("size", [1, 2, 3])
@pytest.mark.parametrize("fmt", ["bshd", "sbhd", "thd"])
def test_shard_then_unshard_is_the_identity(size, fmt):
    if fmt == "thd":
        lengths = [2 * size * n for n in (3, 1, 5)]
        cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
        x = torch.randn(sum(lengths), 3, 4)
    else:
        cu = None
        x = torch.randn(2, 2 * size * 3, 3, 4) if fmt == "bshd" else torch.randn(2 * size * 3, 2, 3, 4)
    parts = [attn.cp.shard(x, None, qkv_format=fmt, cu_seqlens=cu, rank=r, size=size) for r in range(size)]
    assert torch.equal(attn.cp.unshard(parts, qkv_format=fmt, cu_seqlens=cu), x)
    # Rank r holds chunks r and 2cp-1-r of every sequence.
    if fmt == "bshd":
        c = x.shape[1] // (2 * size)
        assert torch.equal(parts[0][:, :c], x[:, :c])
        assert torch.equal(parts[0][:, c:], x[:, (2 * size - 1) * c:])


def test_length_one_is_the_rules_error():
    cu = torch.tensor([0, 8, 9], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"(?s)sequence 1 cannot be split.*length 1.*multiple of 4"):
        attn.cp.shard(torch.zeros(9, 2, 4), None, qkv_format="thd", cu_seqlens=cu, rank=0, size=2)


@pytest.mark.parametrize("extra", ["bias", "alibi_slopes", "attn_mask", "cu_seqlens_kv"])
def test_inputs_the_ring_would_ignore_are_refused(extra):
    q = torch.zeros(1, 8, 2, 4)
    given = {"bias": torch.zeros(1, 2, 8, 8), "alibi_slopes": torch.zeros(2),
             "attn_mask": torch.ones(1, 2, 8, 8, dtype=torch.bool),
             "cu_seqlens_kv": torch.tensor([0, 8], dtype=torch.int32)}[extra]
    not_a_comm = object()  # refused before the communicator is touched
    with pytest.raises(ValueError, match=rf"cp=\) cannot take {extra}"):
        attn.forward(q, q, q, cp=not_a_comm, **{extra: given})
    if extra != "cu_seqlens_kv":
        with pytest.raises(ValueError, match=rf"cp=\) cannot take {extra}"):
            attn.backward(q, q, q, q, q, torch.zeros(1, 2, 8), cp=not_a_comm, **{extra: given})


def test_plan_reports_chunks_and_skipped_steps():
    text = attn.cp.plan(4, [64], mask="causal", window=(4, -1))
    assert "rank 0: chunks 0 and 7" in text and "2 steps skipped" in text, text


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="context parallelism needs 2 GPUs")
def test_ring_on_two_gpus_matches_one_gpu():
    if not attn.cp.available():
        pytest.skip("this build has no NCCL")
    torchrun = shutil.which("torchrun") or ""
    cmd = ([torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]) + [
        "--nproc-per-node", "2", os.path.join(os.path.dirname(__file__), "cp_worker.py")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=540, env={**os.environ, "NCCL_NVLS_ENABLE": "0"})
    print(r.stdout[-6000:])
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-6000:]
