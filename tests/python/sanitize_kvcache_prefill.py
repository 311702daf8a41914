"""A small chunked prefill over a KV cache on the GPU (flash_sm90 on Hopper):
contiguous with cache_batch_idx, and paged at block sizes 16 and 48 (boxes of
a whole block, and gcd boxes), capacities not tile multiples, a length of 0:
what compute-sanitizer (memcheck, racecheck, initcheck) runs on the device.
python3 tests/python/sanitize_kvcache_prefill.py"""
import torch

import attn

torch.manual_seed(0)
b, s_q, h_q, h_kv, d = 3, 40, 8, 2, 128
for block in (0, 16, 48):
    capacity = 240 if block != 48 else 288
    if block:
        blocks = b * capacity // block + 1
        k_cache = torch.randn(blocks, block, h_kv, d, device="cuda", dtype=torch.bfloat16)
        table = torch.randperm(blocks, device="cuda")[: b * capacity // block].view(b, -1).int()
        rows = None
    else:
        k_cache = torch.randn(b, capacity, h_kv, d, device="cuda", dtype=torch.bfloat16)
        table = None
        rows = torch.tensor([2, 0, 1], dtype=torch.int32, device="cuda")
    v_cache = torch.randn_like(k_cache)
    q = torch.randn(b, s_q, h_q, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, s_q, h_kv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    lens = torch.tensor([0, 77, capacity - s_q], dtype=torch.int32, device="cuda")
    attn.forward_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens, cache_batch_idx=rows, block_table=table,
                              return_lse=True)
torch.cuda.synchronize()
print("sanitizer case ran")
