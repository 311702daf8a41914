"""attn.explain (verdicts as data) and attn.backends()."""

import re

import numpy as np
import pytest

import attn

KNOWN = {"flash_decode", "flash_sm90", "flash_sm80", "cudnn", "unfused", "reference"}


def test_explain_from_shapes_on_a_simulated_a100():
    ex = attn.explain((2, 128, 16, 192), (2, 128, 16, 192), (2, 128, 16, 128), dtype="bfloat16",
                      mask="causal", device="sm80")
    assert {v.backend for v in ex} == KNOWN and len(ex) == 6
    assert ex.simulated and ex.sm == 80 and "sm80" in ex.device
    assert ex.problem.startswith("fwd bshd bfloat16") and "d=192/128" in ex.problem
    # sm80's forward order: flash_decode (refusing 128 query tokens, with a reason), then flash_sm80
    assert ex[0].backend == "flash_decode" and not ex[0].ok and any("16 query tokens" in r for r in ex[0].reasons)
    assert ex[1].backend == "flash_sm80"
    assert not ex["reference"].ok and ex["reference"].reasons
    text = str(ex)
    assert "simulated sm80" in text and "reference" in text and "chosen:" in text
    built_gpu = {b.name for b in attn.backends(detail=True) if b.in_build and b.device == "cuda"}
    if built_gpu:  # explain needs no GPU: the simulated A100 picks a compiled GPU backend
        assert ex.chosen in built_gpu and ex[ex.chosen].ok and f"chosen: {ex.chosen}" in text
    else:
        assert ex.chosen is None and "not part of this build" in text


def test_explain_from_arrays_chooses_the_reference():
    q = np.zeros((1, 4, 2, 8), np.float32)
    ex = attn.explain(q, q, q, mask="causal")
    assert ex.chosen == "reference" and ex.supported == ("reference",)
    assert ex["reference"].ok and str(ex["reference"]) == "reference: yes"
    assert re.search(r"reference +yes", str(ex)) and "chosen: reference" in str(ex)
    assert "Explanation" in repr(ex)
    with pytest.raises(KeyError):
        ex["nope"]


def test_explain_backward_and_thd_from_shapes():
    cu = np.array([0, 3, 10], dtype=np.int32)
    ex = attn.explain((10, 8, 64), (10, 2, 64), (10, 2, 64), qkv_format="thd", cu_seqlens_q=cu,
                      cu_seqlens_kv=cu, mask="padding_causal", backward=True, device="cpu", dtype="float32")
    assert ex.problem.startswith("bwd thd float32") and "s_q=7" in ex.problem
    assert ex.chosen == "reference"


def test_explain_raises_validation_errors_like_forward():
    with pytest.raises(ValueError, match="split the hidden dimension into heads first"):
        attn.explain((2, 8, 64), (2, 8, 64), (2, 8, 64))
    with pytest.raises(ValueError, match="unknown simulated device"):
        attn.explain((1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8), device="sm99")
    with pytest.raises(TypeError, match="unknown dtype name"):
        attn.explain((1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8), dtype="float8")


def test_explain_with_forced_and_disabled_backends():
    shape = (1, 4, 2, 8)
    ex = attn.explain(shape, shape, shape, dtype="float32", device="cpu", disable=["reference"])
    assert "disabled by ATTN_DISABLE" in ex["reference"].reasons and ex.chosen is None
    ex = attn.explain(shape, shape, shape, dtype="float32", device="cpu", backend="reference")
    assert ex.chosen == "reference" and "forced" in ex.why


def test_backends():
    names = attn.backends()
    assert "reference" in names
    detail = attn.backends(detail=True)
    assert {b.name for b in detail} == KNOWN
    ref = next(b for b in detail if b.name == "reference")
    assert ref.in_build and ref.available and ref.device == "cpu"
    if attn.cuda_device_count() == 0:
        assert names == ["reference"]


def test_device_info():
    d = attn.device_info("sm90")
    assert d["sm"] == 90 and d["simulated"] and d["device"] == "cuda:0"
    assert attn.device_info("cpu")["sm"] == 0
