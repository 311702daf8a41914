"""Small decode steps over a KV cache on the GPU (flash_decode): one and four
query tokens, contiguous with cache_batch_idx and paged at block sizes 16 and
48, without rotary (the decode kernel appends the new tokens itself) and
with it (the append kernel first, the decode kernel started during it), a
length of 0 and one at the cache's end, split-KV with the combine kernel:
what compute-sanitizer (memcheck, racecheck, initcheck) runs on the device.
python3 tests/python/sanitize_kvcache_decode.py"""
import torch

import attn

torch.manual_seed(0)
b, h_q, h_kv, d, capacity = 3, 8, 2, 128, 288
cos = torch.randn(capacity + 4, 32, device="cuda")
sin = torch.randn(capacity + 4, 32, device="cuda")
for block in (0, 16, 48):
    for s_q in (1, 4):
        for rotary in (False, True):
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
            attn.forward_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens, cache_batch_idx=rows,
                                      block_table=table, rotary_cos=cos if rotary else None,
                                      rotary_sin=sin if rotary else None, num_splits=3, return_lse=True)
torch.cuda.synchronize()
print("sanitizer case ran")
