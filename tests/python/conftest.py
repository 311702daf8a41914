"""Shared helpers of attn's Python tests: random inputs and tolerances."""

import numpy as np
import pytest


@pytest.fixture
def rng():
    # Fresh inputs per run (STYLE.md); the seed is printed, so pytest shows it
    # with a failure's captured output and the case can be replayed.
    seed = np.random.SeedSequence().entropy % (1 << 32)
    print(f"numpy seed {seed}")
    return np.random.default_rng(seed)


def assert_close(got, want, atol, rtol=0.0, what="value"):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    both_inf = np.isinf(got) & np.isinf(want) & (np.sign(got) == np.sign(want))
    with np.errstate(invalid="ignore"):
        err = np.where(both_inf, 0.0, np.abs(got - want))
    bound = atol + rtol * np.abs(np.where(both_inf, 0.0, want))
    worst = np.nanmax(err - bound) if err.size else -1.0
    assert not np.isnan(err).any(), f"{what}: NaN in the result"
    assert worst <= 0, f"{what}: max |got - want| = {np.max(err):.3g} exceeds atol {atol} + rtol {rtol}"
