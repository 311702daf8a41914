"""Small KV-cache calls on the GPU, what compute-sanitizer (memcheck,
racecheck, initcheck) runs on the device:
- decode steps (flash_decode): one and four query tokens, without rotary (the
  decode kernel appends the new tokens itself) and with it (the append kernel
  first, the decode kernel started during it), split-KV with the combine
  kernel (one token: a partial result per warp; four: per CTA);
- a decode step over 1104 keys in one split (many tiles per CTA);
- 32 rows of one KV head (GQA 8, four tokens): a CTA of two row blocks;
- a chunked prefill (flash_sm90 on Hopper): 40 query tokens;
each over a contiguous cache with cache_batch_idx and paged ones at block
sizes 16 and 48 (boxes of a whole block, and gcd boxes), capacities not tile
multiples, a length of 0 and one at the cache's end; and the prefill at
block sizes 128 (one box per KV tile, one producer warp) and 64 (two boxes,
two warps).
python3 tests/python/sanitize_kvcache.py"""
import torch

import attn

torch.manual_seed(0)
b, h_q, h_kv, d = 3, 8, 2, 128
bf16 = torch.bfloat16


def cache(block, capacity):
    """(k_cache, v_cache, block_table, cache_batch_idx) of b sequences."""
    if block:
        blocks = b * capacity // block + 1
        k_cache = torch.randn(blocks, block, h_kv, d, device="cuda", dtype=bf16)
        table = torch.randperm(blocks, device="cuda")[: b * capacity // block].view(b, -1).int()
        return k_cache, torch.randn_like(k_cache), table, None
    k_cache = torch.randn(b, capacity, h_kv, d, device="cuda", dtype=bf16)
    return k_cache, torch.randn_like(k_cache), None, torch.tensor([2, 0, 1], dtype=torch.int32, device="cuda")


def call(s_q, block, capacity, heads=h_q, **kw):
    k_cache, v_cache, table, rows = cache(block, capacity)
    q = torch.randn(b, s_q, heads, d, device="cuda", dtype=bf16)
    k, v = (torch.randn(b, s_q, h_kv, d, device="cuda", dtype=bf16) for _ in range(2))
    lens = torch.tensor([0, 77, capacity - s_q], dtype=torch.int32, device="cuda")
    attn.forward_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens, cache_batch_idx=rows,
                              block_table=table, return_lse=True, **kw)


cos, sin = (torch.randn(288 + 4, 32, device="cuda") for _ in range(2))
for block in (0, 16, 48):
    for s_q in (1, 4):
        call(s_q, block, 288, num_splits=3)
        call(s_q, block, 288, num_splits=3, rotary_cos=cos, rotary_sin=sin)
    call(40, block, 240 if block != 48 else 288)
for block in (0, 16, 48):  # one split over 18 tiles: the block ids copied ahead of their tiles
    call(1, block, 1104, num_splits=1)
    call(4, block, 288, heads=16, num_splits=3)  # 32 rows: two row blocks in a CTA
call(40, 128, 256)
call(40, 64, 256)  # two producer warps (one box each); 16 and 48 take four
torch.cuda.synchronize()
print("sanitizer case ran")
