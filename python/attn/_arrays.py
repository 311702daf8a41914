"""Arrays of the caller's framework: which one a tensor belongs to, how to make
an empty one beside it (outputs live where the inputs live, in the same
framework), how to hand it to attn._C without a copy, and which CUDA stream
its framework is working on. NumPy, PyTorch, CuPy and JAX are known; any other
DLPack producer works on the CPU with NumPy outputs, or with preallocated ones.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Optional, Sequence


def framework(x: Any) -> str:
    """'torch', 'numpy', 'cupy', 'jax' or 'dlpack' (anything else with __dlpack__)."""
    module = type(x).__module__.split(".", 1)[0]
    if module in ("torch", "numpy", "cupy"):
        return module
    if module in ("jax", "jaxlib"):
        return "jax"
    return "dlpack"


def _is_cuda(x: Any) -> bool:
    fw = framework(x)
    if fw == "torch":
        return x.is_cuda
    if fw == "cupy":
        return True
    if fw == "numpy":
        return False
    if fw == "jax":
        return _jax_device(x).platform == "gpu"
    device_type, _ = x.__dlpack_device__()
    return device_type in (2, 13)  # kDLCUDA, kDLCUDAManaged


def _jax_device(x: Any) -> Any:
    devices = x.devices() if callable(getattr(x, "devices", None)) else {x.device}
    return next(iter(devices))


def as_dlpack(x: Any) -> Any:
    """What attn._C receives for one use: a DLPack capsule (PyTorch), or an
    array nanobind imports through __dlpack__. A capsule is consumed by its
    first import; where the C++ side may look at an argument twice (explain),
    pass exportable(x) instead."""
    if x is None:
        return None
    if framework(x) == "torch":
        # The capsule straight from PyTorch's C++ exporter: Tensor.__dlpack__
        # is Python code with stream checks, several microseconds per tensor,
        # which adds up over the nine tensors of a backward call. attn runs on
        # the stream it is given, so the protocol's stream handshake is not needed.
        return torch_capsule(x)
    return exportable(x)


def exportable(x: Any) -> Any:
    """x itself, or a view that can export DLPack any number of times."""
    if x is None:
        return None
    fw = framework(x)
    if fw == "torch" and x.requires_grad:
        return x.detach()  # a view: DLPack refuses tensors that require grad
    if fw == "jax":
        # JAX computes asynchronously on its own streams; attn runs on the
        # legacy default stream, so the inputs must be ready first.
        x.block_until_ready()
    return x


def torch_capsule(t: Any) -> Any:
    """A DLPack capsule from PyTorch's C++ exporter (single use; it takes
    tensors that require grad), or None."""
    if t is None:
        return None
    from torch.utils.dlpack import to_dlpack

    return to_dlpack(t)


@functools.lru_cache(maxsize=None)
def _torch_stream_query() -> Any:
    """PyTorch's current-stream query for a device index, resolved once:
    torch.cuda.current_stream(device) builds a Stream object through several
    Python layers (~15 us); the raw query that torch.compile's generated code
    uses is one C call, so it is preferred where this PyTorch has it."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw if raw is not None else (lambda index: torch.cuda.current_stream(index).cuda_stream)


def torch_stream(device_index: int) -> int:
    """PyTorch's current stream on a CUDA device, as an integer handle."""
    return _torch_stream_query()(device_index)


def torch_tensor_stream(t: Any) -> int:
    """The current CUDA stream of a PyTorch tensor's device as an integer
    handle, 0 on the CPU (get_device() is the cheapest device query)."""
    index = t.get_device()  # -1 on the CPU
    return torch_stream(index) if index >= 0 else 0


class _TorchWorkspace:
    """attn's workspace from PyTorch's caching allocator: called by the core
    with the bytes a call needs, returns the device address and keeps the
    tensor alive until this object goes (after the call has queued its work,
    which runs in the current stream's order, as the allocator expects)."""

    __slots__ = ("device", "blocks")

    def __init__(self, device: Any) -> None:
        self.device = device
        self.blocks: list = []

    def __call__(self, nbytes: int) -> int:
        import torch

        block = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        self.blocks.append(block)
        return block.data_ptr()


def torch_capture_workspace(t: Any) -> Optional[_TorchWorkspace]:
    """Under CUDA graph capture on PyTorch's current stream: a workspace
    allocator over PyTorch's caching allocator, whose memory belongs to the
    graph's pool (attn's own pool neither allocates nor waits while capturing,
    and torch.cuda.graph captures on a stream attn has not seen). None
    otherwise: attn's own pool serves, without a tensor per call."""
    import torch

    if t.get_device() < 0 or not torch._C._cuda_isCurrentStreamCapturing():
        return None
    return _TorchWorkspace(t.device)


def stream_of(x: Any) -> int:
    """The CUDA stream (as an integer handle) x's framework is working on; 0 on the CPU."""
    fw = framework(x)
    if fw == "torch" and x.is_cuda:
        return torch_stream(x.device.index)
    if fw == "cupy":
        import cupy

        with x.device:
            return cupy.cuda.get_current_stream().ptr
    # JAX and other producers: the legacy default stream (0).
    return 0


_FLOAT32 = "float32"


def empty(like: Any, shape: Sequence[int], dtype: Any = None) -> Any:
    """An uninitialised array of `shape` in like's framework and on like's device.

    dtype None means like's dtype; "float32" means float32 in that framework.
    JAX arrays are immutable: for them this returns a NumPy (CPU) or CuPy /
    PyTorch (GPU) buffer, which `finish` turns into a JAX array without a copy.
    """
    shape = tuple(int(s) for s in shape)
    fw = framework(like)
    if fw == "torch":
        import torch

        dt = like.dtype if dtype is None else torch.float32
        return torch.empty(shape, dtype=dt, device=like.device)
    if fw == "numpy":
        import numpy

        return numpy.empty(shape, dtype=like.dtype if dtype is None else numpy.float32)
    if fw == "cupy":
        import cupy

        with like.device:
            return cupy.empty(shape, dtype=like.dtype if dtype is None else cupy.float32)
    if fw == "jax":
        return _jax_buffer(like, shape, dtype)
    # Another DLPack producer: NumPy on the CPU; on a GPU the caller must preallocate.
    if not _is_cuda(like):
        import numpy

        dt = numpy.float32 if dtype is not None else numpy.from_dlpack(like).dtype
        return numpy.empty(shape, dtype=dt)
    raise TypeError(
        f"attn: cannot allocate outputs for a {type(like).__module__}.{type(like).__name__} on a GPU; "
        "pass preallocated out= (and lse=, dq=, dk=, dv=) arrays, e.g. from CuPy or PyTorch"
    )


def _jax_buffer(like: Any, shape: tuple, dtype: Any) -> Any:
    name = _FLOAT32 if dtype is not None else str(like.dtype)
    if not _is_cuda(like):
        import numpy

        if name == "bfloat16":
            import ml_dtypes  # JAX's own dependency: NumPy's bfloat16

            return numpy.empty(shape, dtype=ml_dtypes.bfloat16)
        return numpy.empty(shape, dtype=numpy.dtype(name))
    device_id = getattr(_jax_device(like), "id", 0)
    try:
        import torch

        return torch.empty(shape, dtype=getattr(torch, name), device=f"cuda:{device_id}")
    except ImportError:
        pass
    try:
        import cupy

        if name == "bfloat16":
            raise ImportError("CuPy has no bfloat16")
        with cupy.cuda.Device(device_id):
            return cupy.empty(shape, dtype=name)
    except ImportError:
        pass
    raise TypeError(
        "attn: JAX arrays on the GPU need PyTorch or CuPy to allocate outputs; "
        "install one, or pass preallocated out= (and lse=) arrays"
    )


def full_int32(like: Any, n: int, value: int) -> Any:
    """An int32 [n] array of `value` in like's framework, on like's device."""
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"attn: {value} does not fit in int32")
    fw = framework(like)
    if fw == "torch":
        import torch

        return torch.full((n,), value, dtype=torch.int32, device=like.device)
    if fw == "cupy":
        import cupy

        with like.device:
            return cupy.full((n,), value, dtype=cupy.int32)
    if fw == "jax":
        import jax
        import jax.numpy as jnp

        return jax.device_put(jnp.full((n,), value, dtype=jnp.int32), _jax_device(like))
    if not _is_cuda(like):
        import numpy

        return numpy.full((n,), value, dtype=numpy.int32)
    raise TypeError("attn: an int where an int32 array belongs needs q from PyTorch, CuPy, JAX or NumPy; "
                    "pass the array")


def finish(like: Any, buf: Any) -> Any:
    """buf as an array of like's framework (a no-op except for JAX)."""
    if buf is None or framework(like) != "jax":
        return buf
    import jax.numpy as jnp

    try:
        return jnp.from_dlpack(buf)  # zero-copy where JAX can alias the buffer
    except Exception:  # noqa: BLE001 - older JAX or an unaligned buffer: copy
        return jnp.asarray(buf)


def shape_of(x: Any) -> tuple:
    return tuple(int(s) for s in x.shape)


def lse_shape(q_shape: tuple, qkv_format: str) -> Optional[tuple]:
    """[b, h_q, s_q] (bshd, sbhd) or [h_q, t_q] (thd); None when q's rank does
    not fit the format (the core then reports q's shape, the real problem)."""
    if qkv_format == "thd" and len(q_shape) == 3:
        return (q_shape[1], q_shape[0])
    if qkv_format == "bshd" and len(q_shape) == 4:
        return (q_shape[0], q_shape[2], q_shape[1])
    if qkv_format == "sbhd" and len(q_shape) == 4:
        return (q_shape[1], q_shape[2], q_shape[0])
    return None


def heads_of(q_shape: tuple, qkv_format: str) -> Optional[int]:
    """h_q from q's shape, or None when q's rank does not fit the format."""
    if qkv_format == "thd" and len(q_shape) == 3:
        return q_shape[1]
    if qkv_format in ("bshd", "sbhd") and len(q_shape) == 4:
        return q_shape[2]
    return None


def require_array(x: Any, name: str) -> None:
    """A clear TypeError for lists, scalars and None where a tensor belongs."""
    if not (hasattr(x, "__dlpack__") or hasattr(x, "__array_interface__")) or not hasattr(x, "shape"):
        raise TypeError(
            f"attn: {name} must be an array (NumPy, PyTorch, JAX, CuPy or another DLPack producer), "
            f"got {type(x).__module__}.{type(x).__qualname__}"
        )


def require_arrays(**named: Any) -> None:
    """require_array for each argument given (None: left out)."""
    for name, x in named.items():
        if x is not None:
            require_array(x, name)


def require_writable(**named: Any) -> None:
    """A clear error where attn would write into a read-only NumPy array."""
    for name, x in named.items():
        flags = getattr(x, "flags", None)
        if x is not None and flags is not None and getattr(flags, "writeable", True) is False:
            raise ValueError(
                f"attn: {name} is read-only (a NumPy array with flags.writeable == False), and attn writes its "
                f"result there; pass a writable array (numpy.array({name}) copies it) or leave {name} out and "
                f"attn allocates it"
            )


# The core's fixes for a dtype read "convert NAME to DTYPE" (or "to A or B");
# in the caller's framework they become the call that does it.
_CONVERT = re.compile(r"^convert (\w+) to (\w+)(?: or (\w+))?$")
_CAST = {
    "numpy": "{name}.astype(numpy.{dtype})",
    "torch": "{name}.to(torch.{dtype})",
    "jax": "{name}.astype(jax.numpy.{dtype})",
    "cupy": "{name}.astype(cupy.{dtype})",
}


def framework_fix(framework: str, fix: str) -> Optional[str]:
    """The core's dtype fix in `framework`'s words, or None to keep it."""
    m = _CONVERT.match(fix or "")
    if not m or framework not in _CAST:
        return None
    name, first, second = m.groups()
    cast = _CAST[framework]
    if framework == "numpy" and "bfloat16" in (first, second):
        # NumPy arrays are host arrays: the CPU reference takes float32 and
        # float64, and NumPy itself has no bfloat16.
        return (f"convert it: {cast.format(name=name, dtype='float32')} (NumPy has no bfloat16; "
                f"ml_dtypes.bfloat16 arrays work)")
    return "convert it: " + " or ".join(cast.format(name=name, dtype=d) for d in (first, second) if d)


def adapt_error(e: BaseException, framework_name: str) -> None:
    """Rewrites an attn dtype error's fix (its `fix` attribute and the
    message's fix line) in the words of the caller's framework; callers
    re-raise it. (A try/except at the call, not a context manager: free
    until something is raised.)"""
    old = getattr(e, "fix", None)
    new = framework_fix(framework_name, old) if old else None
    if new:
        e.fix = new
        e.args = (str(e).replace(f"fix:      {old}", f"fix:      {new}"),) + e.args[1:]
