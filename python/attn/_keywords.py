"""The options of one call: the keywords that attn.forward, attn.backward,
attn.explain, attn.torch (attention, DotProductAttention, TransformerLayer)
and attn.cp share, normalized and checked here, once, and turned into the
compiled core's Options. Every other module imports them from here.

Only what Python must decide is checked here (types, TransformerEngine's mask
spellings, 64-bit seeds); the core validates values with its own messages.
"""

from __future__ import annotations

import atexit
import operator
from typing import Any, Optional, Tuple

from . import _C

U64 = 1 << 64
FORMATS = ("bshd", "sbhd", "thd")
# The masks whose window is clipped on the right at the diagonal (DESIGN.md, "Masks").
CAUSAL_MASKS = ("causal", "causal_bottom_right", "padding_causal", "padding_causal_bottom_right")


def mask_name(mask: Optional[str]) -> str:
    """TransformerEngine spellings too: "padding,causal", "causal,padding", "causal_padding"."""
    if mask is None:
        return "no_mask"
    if not isinstance(mask, str):
        raise TypeError(f"attn: mask must be a string such as \"causal\", got {type(mask).__name__}")
    name = mask.replace(",", "_")
    if name == "causal_padding":
        name = "padding_causal"
    if name == "causal_bottom_right_padding":
        name = "padding_causal_bottom_right"
    return name


def softmax_type_name(softmax_type: Optional[str]) -> str:
    """TransformerEngine's softmax types; None is "vanilla", "off_by_one" is accepted too."""
    if softmax_type is None:
        return "vanilla"
    if not isinstance(softmax_type, str):
        raise TypeError("attn: softmax_type must be \"vanilla\", \"off-by-one\" or \"learnable\", "
                        f"got {type(softmax_type).__name__}")
    return softmax_type


def integer(value: Any, name: str) -> int:
    """value as an int: Python and NumPy integers, or anything with __index__
    (a 0-d integer tensor). A float is refused, not truncated (2.7 is not 2)."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"attn: {name} must be an integer, got {value!r} ({type(value).__qualname__}); "
            f"pass int({value!r}) if that is what you mean"
        ) from None


def window_pair(window: Any) -> Tuple[int, int]:
    """(left, right) as ints; None is unbounded on both sides."""
    if window is None:
        return (-1, -1)
    try:
        left, right = window
    except (TypeError, ValueError):
        raise TypeError(
            f"attn: window must be a pair (left, right), -1 for an unbounded side; got {window!r}"
        ) from None
    return (integer(left, "window's left side"), integer(right, "window's right side"))


def uint(value: Any, name: str, limit: int = U64, limit_text: Optional[str] = None) -> int:
    """value as an int in [0, limit); limit_text spells the limit in the message (default: its digits)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise ValueError(f"attn: {name} must be an integer in [0, {limit_text or limit}), got {value!r}") from None
    if not 0 <= v < limit:
        raise ValueError(f"attn: {name} must be an integer in [0, {limit_text or limit}), got {value!r}")
    return v


def max_seqlen(value: Optional[int]) -> int:
    """The core's spelling: 0 derives the maximum from cu_seqlens."""
    return 0 if value is None else integer(value, "max_seqlen")


def format_name(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"attn: qkv_format must be \"bshd\", \"sbhd\" or \"thd\", got {value!r}")
    return value


def check_cp_inputs(cu_seqlens_q: Any, cu_seqlens_kv: Any, **tensors: Any) -> None:
    """Context parallelism (cp=) passes q, k, v and cu_seqlens_q only: any
    other tensor given with it would be ignored, so it is an error instead,
    raised before the communicator is touched."""
    given = [name for name, t in tensors.items() if t is not None]
    if cu_seqlens_kv is not None and cu_seqlens_kv is not cu_seqlens_q:
        given.append("cu_seqlens_kv (keys use cu_seqlens_q's lengths)")
    if given:
        raise ValueError(
            "attn: context parallelism (cp=) cannot take " + ", ".join(given) + "\n"
            "  expected: q, k, v (and cu_seqlens_q for thd) of self-attention\n"
            "  fix:      run this call without cp=, or drop what is listed")


_PLAIN = (str, int, float, bool, type(None))
_OPTIONS_CACHE: dict = {}
atexit.register(_OPTIONS_CACHE.clear)  # before interpreter teardown, which nanobind checks for live objects


def options(*args: Any) -> _C.Options:
    """build_options(*args), cached: building the Options object costs a few
    microseconds of attribute calls per call, and a model repeats the same few
    keyword sets. Only plain values are keys (a tensor-valued scale could change
    in place); the C++ side never modifies an Options it is given, and nor may
    a caller of this function: the object is shared. The lookup comes first
    (only keys of plain values are ever stored, so a hit is one); the type
    test, which costs more than the lookup, runs on a miss."""
    try:
        o = _OPTIONS_CACHE.get(args)
    except TypeError:  # an unhashable value (a list window, say): not cached
        return build_options(*args)
    if o is not None:
        return o
    o = build_options(*args)
    if all(type(a) in _PLAIN or (type(a) is tuple and all(type(x) in _PLAIN for x in a)) for a in args):
        if len(_OPTIONS_CACHE) >= 256:  # e.g. a fresh dropout seed per call
            _OPTIONS_CACHE.clear()
        _OPTIONS_CACHE[args] = o
    return o


def build_options(
    qkv_format: str,
    mask: Optional[str],
    window: Any,
    softmax_scale: Optional[float],
    softcap: float,
    max_seqlen_q: Optional[int],
    max_seqlen_kv: Optional[int],
    dropout_p: float,
    seed: int,
    offset: int,
    deterministic: bool,
    check_seqlens: bool,
    softmax_type: str = "vanilla",
) -> _C.Options:
    o = _C.Options()
    o.qkv_format = format_name(qkv_format)
    o.mask = mask_name(mask)
    o.window = window_pair(window)
    o.softmax_scale = None if softmax_scale is None else float(softmax_scale)
    o.softcap = float(softcap)
    o.max_seqlen_q = max_seqlen(max_seqlen_q)
    o.max_seqlen_kv = max_seqlen(max_seqlen_kv)
    o.dropout_p = float(dropout_p)
    o.seed = uint(seed, "seed")
    o.offset = uint(offset, "offset")  # the core checks offset < 2^32 with its own message
    o.deterministic = bool(deterministic)
    o.check_seqlens = bool(check_seqlens)
    o.softmax_type = softmax_type_name(softmax_type)
    return o
