"""A small CUDA run of the fused rotary kernel, forward and backward, both load
widths, packed and strided inputs: what compute-sanitizer (memcheck,
racecheck) runs on the device. python3 tests/python/sanitize_rotary.py"""
import torch
from attn.rotary import RotaryPositionEmbedding, apply_rotary_pos_emb
for fmt, shape in (("bshd", (2, 33, 6, 128)), ("thd", (41, 5, 20))):
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)[..., 1:, :].requires_grad_()
    cu = torch.tensor([0, 3, 3, 39], dtype=torch.int32, device="cuda") if fmt == "thd" else None
    y = apply_rotary_pos_emb(x, RotaryPositionEmbedding(shape[-1], device="cuda")(40), fmt, cu, fused=True)
    y.backward(torch.randn_like(y))
torch.cuda.synchronize()
print("sanitizer case ran")
