"""attn for PyTorch: autograd, torch.compile and TransformerEngine-style modules.

    from attn.torch import attention, DotProductAttention
    out = attention(q, k, v, mask="causal")          # differentiable, any attn.forward keyword
    dpa = DotProductAttention(16, 128, num_gqa_groups=4, attn_mask_type="causal")
    out = dpa(q, k, v)                               # sbhd in, [s, b, h*d] out, as in TransformerEngine

The passes are the torch.library custom ops `attn::forward` and `attn::backward`
(opaque to torch.compile: no graph breaks), with fake (meta) implementations
for tracing and autograd registered through torch.library.register_autograd,
which wraps them in a torch.autograd.Function. Dropout draws a fresh 64-bit
seed per call from PyTorch's default CPU generator (so torch.manual_seed
reproduces it), offset 0, and the backward reuses it.

This module only gathers the public names: attention and DotProductAttention
live in attn._torch_attention, TransformerLayer (built on DotProductAttention)
in attn.layer, the rotary embedding in attn.rotary; none of them imports this
module (tests/python/test_imports.py walks the imports), so they run one way.
"""

from ._torch_attention import DotProductAttention, _Call, alibi_slopes, attention  # noqa: F401 (_Call: bench/overhead.py)
from .layer import TransformerLayer  # noqa: F401
from .rotary import RotaryPositionEmbedding, apply_rotary_pos_emb  # noqa: F401

__all__ = ["attention", "DotProductAttention", "alibi_slopes"]
