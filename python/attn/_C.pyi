"""attn's compiled core (nanobind): validation, backend selection and the
backends themselves. Tensors arrive through DLPack without copies; outputs are
preallocated by the pure-Python layer (attn/__init__.py). Use `attn.forward`
etc.; this module is the thin layer underneath."""

from typing import Any, Callable, Optional, Sequence, Tuple, Union

# Any DLPack producer: a NumPy, PyTorch, JAX or CuPy array, CPU or CUDA. Inputs
# may be read-only; outputs must be writable.
Array = Any
# explain() also takes a (shape, dtype name) pair where an array would go.
ArrayOrSpec = Union[Array, Tuple[Sequence[int], str]]

class BackendUnavailableError(RuntimeError):
    """No attention backend (or not the forced one) can run this call on this
    device. The message lists every backend with its reasons; attn.explain(...)
    gives them as data. Attributes: what, got, expected, fix, kind."""

    what: str
    got: str
    expected: str
    fix: str
    kind: str

class ExecutionError(RuntimeError):
    """A CUDA or library failure while running an attention call."""

    what: str
    got: str
    expected: str
    fix: str
    kind: str

class Options:
    """attn::Options: what a call chooses besides its tensors (docs/SEMANTICS.md).
    Setting an unknown qkv_format or mask raises ValueError."""

    qkv_format: str  # "bshd", "sbhd", "thd"
    mask: str  # "no_mask", "causal", "causal_bottom_right", "padding", ... "arbitrary"
    window: Tuple[int, int]  # (left, right), -1 = unbounded
    softmax_scale: Optional[float]  # None = 1/sqrt(d_qk)
    softcap: float
    max_seqlen_q: int  # thd: 0 = derive from cu_seqlens_q
    max_seqlen_kv: int
    dropout_p: float
    seed: int  # uint64
    offset: int  # < 2**32
    deterministic: bool
    check_seqlens: bool
    def __init__(self) -> None: ...

def forward(
    options: Options,
    q: Array,
    k: Array,
    v: Array,
    out: Array,
    lse: Optional[Array] = None,
    *,
    cu_seqlens_q: Optional[Array] = None,
    cu_seqlens_kv: Optional[Array] = None,
    bias: Optional[Array] = None,
    alibi_slopes: Optional[Array] = None,
    attn_mask: Optional[Array] = None,
    backend: Optional[str] = None,
    disable: Sequence[str] = ...,
    stream: int = 0,
    workspace_allocator: Optional[Callable[[int], int]] = None,
    rng_state: Optional[Array] = None,
) -> Tuple[str, str]:
    """Validates, selects a backend and runs the forward pass into the
    preallocated out (and lse). Returns (backend name, why it was chosen)."""

def forward_with_kvcache(
    options: Options,
    q: Array,
    k_cache: Array,
    v_cache: Array,
    out: Array,
    k: Optional[Array] = None,
    v: Optional[Array] = None,
    cache_seqlens: Optional[Array] = None,
    cache_batch_idx: Optional[Array] = None,
    block_table: Optional[Array] = None,
    rotary_cos: Optional[Array] = None,
    rotary_sin: Optional[Array] = None,
    rotary_interleaved: bool = True,
    alibi_slopes: Optional[Array] = None,
    sink: Optional[Array] = None,
    lse: Optional[Array] = None,
    num_splits: int = 0,
    backend: Optional[str] = None,
    disable: Sequence[str] = ...,
    stream: int = 0,
    workspace_allocator: Optional[Callable[[int], int]] = None,
) -> Tuple[str, str]:
    """Appends k / v into the cache and runs q against it into the
    preallocated out (and lse). Returns (backend name, why it was chosen)."""

def backward(
    options: Options,
    q: Array,
    k: Array,
    v: Array,
    out: Array,
    dout: Array,
    lse: Array,
    dq: Array,
    dk: Array,
    dv: Array,
    dbias: Optional[Array] = None,
    *,
    cu_seqlens_q: Optional[Array] = None,
    cu_seqlens_kv: Optional[Array] = None,
    bias: Optional[Array] = None,
    alibi_slopes: Optional[Array] = None,
    attn_mask: Optional[Array] = None,
    backend: Optional[str] = None,
    disable: Sequence[str] = ...,
    stream: int = 0,
    workspace_allocator: Optional[Callable[[int], int]] = None,
    rng_state: Optional[Array] = None,
) -> Tuple[str, str]:
    """Validates, selects a backend and runs the backward pass into the
    preallocated dq, dk, dv (and dbias). Returns (backend name, why)."""

def explain(
    options: Options,
    pass_: str,
    q: ArrayOrSpec,
    k: ArrayOrSpec,
    v: ArrayOrSpec,
    *,
    cu_seqlens_q: Optional[Array] = None,
    cu_seqlens_kv: Optional[Array] = None,
    bias: Optional[ArrayOrSpec] = None,
    alibi_slopes: Optional[ArrayOrSpec] = None,
    attn_mask: Optional[ArrayOrSpec] = None,
    return_lse: bool = False,
    bias_grad: bool = False,
    device: Optional[str] = None,
    backend: Optional[str] = None,
    disable: Sequence[str] = ...,
) -> dict[str, Any]:
    """Every backend's verdict on a call ("forward" or "backward" pass), as a
    dict: problem, device, sm, simulated, verdicts [(backend, in_build,
    reasons)], table, chosen (or None), why."""

def backends() -> list[tuple[str, bool]]:
    """Every backend attn knows, as (name, compiled into this build)."""

def cuda_device_count() -> int:
    """CUDA devices this process can use (0 without a GPU)."""

def build_info() -> dict[str, Any]:
    """What this build holds: version, commit, CUDA, cuDNN, backends."""

def device_info(device: str = "cpu") -> dict[str, Any]:
    """What selection knows about a device: "cpu", "cuda:N" or a simulated "sm80"."""
