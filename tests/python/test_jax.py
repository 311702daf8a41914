"""JAX arrays through DLPack (CPU; GPU where JAX has one and attn a GPU backend):
results are JAX arrays equal to the NumPy reference."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import attn  # noqa: E402
import _reference as ref  # noqa: E402
from conftest import assert_close  # noqa: E402


@pytest.fixture(autouse=True)
def float64():
    old = bool(jax.config.jax_enable_x64)
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", old)


def test_jax_cpu_forward_backward(rng):
    cpu = jax.devices("cpu")[0]
    host = [rng.standard_normal(s) for s in ((2, 5, 4, 8), (2, 7, 2, 8), (2, 7, 2, 8))]
    q, k, v = (jax.device_put(jnp.asarray(x, dtype=jnp.float64), cpu) for x in host)
    out, lse = attn.forward(q, k, v, mask="causal", return_lse=True)
    assert isinstance(out, jax.Array) and out.dtype == jnp.float64 and lse.dtype == jnp.float32
    dout = rng.standard_normal(out.shape)
    dq, dk, dv = attn.backward(q, k, v, out, jax.device_put(jnp.asarray(dout), cpu), lse, mask="causal")
    assert isinstance(dq, jax.Array)
    want = ref.attention(*host, mask="causal", dout=dout)
    assert_close(np.asarray(out), want[0], atol=1e-10, rtol=1e-10, what="out")
    for got, w, what in zip((dq, dk, dv), want[2:], ("dq", "dk", "dv")):
        assert_close(np.asarray(got), w, atol=1e-5, rtol=1e-5, what=what)


def test_jax_float32_explain():
    q = jax.device_put(jnp.zeros((1, 4, 2, 8), dtype=jnp.float32), jax.devices("cpu")[0])
    assert attn.explain(q, q, q).chosen == "reference"


def _jax_gpu():
    try:
        return jax.devices("gpu")[0]
    except RuntimeError:
        return None


GPU_BACKENDS = [b.name for b in attn.backends(detail=True) if b.available and b.device == "cuda"]


@pytest.mark.skipif(_jax_gpu() is None or not GPU_BACKENDS, reason="needs a JAX GPU device and a GPU backend")
def test_jax_gpu_forward_backward(rng):
    gpu = _jax_gpu()
    host = [rng.standard_normal(s).astype(np.float32) for s in ((2, 40, 4, 64), (2, 50, 2, 64), (2, 50, 2, 64))]
    q, k, v = (jax.device_put(jnp.asarray(x), gpu) for x in host)
    out, lse = attn.forward(q, k, v, mask="causal_bottom_right", return_lse=True)
    assert isinstance(out, jax.Array) and out.devices() == {gpu}
    dout = rng.standard_normal(out.shape).astype(np.float32)
    dq, dk, dv = attn.backward(q, k, v, out, jax.device_put(jnp.asarray(dout), gpu), lse, mask="causal_bottom_right")
    want = ref.attention(*host, mask="causal_bottom_right", dout=dout)
    assert_close(np.asarray(out), want[0], atol=1e-4, rtol=1e-4, what="out")
    for got, w, what in zip((dq, dk, dv), want[2:], ("dq", "dk", "dv")):
        assert_close(np.asarray(got), w, atol=1e-4, rtol=1e-4, what=what)
