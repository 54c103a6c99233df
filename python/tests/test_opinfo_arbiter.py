"""The float64 arbiter of the OpInfo sweep (``kiln.opinfo._closer_to_f64``): a result that
differs from eager's by more than the tolerance passes only when it is no farther than
eager's from the sample computed in float64, and equal in everything else."""

from __future__ import annotations

import pytest

pytest.importorskip("expecttest")  # torch.testing._internal needs it
pytest.importorskip("hypothesis")

import torch  # noqa: E402

from kiln import opinfo  # noqa: E402

RTOL, ATOL = opinfo.TOLERANCES[torch.float32]


@pytest.fixture(scope="module")
def addbmm():
    """addbmm's second float32 sample (values up to 9, sums that cancel): the call, eager's
    result and the float64 truth."""
    op = opinfo.op_entries()["addbmm"]
    sample = list(op.sample_inputs("cpu", torch.float32))[1]
    call = opinfo._Call(op, sample)
    fn = call.fn()
    expected = opinfo._run(call, fn, False)
    truth = opinfo._run(call, fn, False, f64=True)
    assert truth.dtype == torch.float64
    assert (expected.double() - truth).abs().max() > 0, "eager rounds somewhere"
    return call, fn, expected, truth


def judge(addbmm, actual):
    call, fn, expected, _ = addbmm
    return opinfo._closer_to_f64(call, fn, False, actual, expected, RTOL, ATOL)


def test_the_truth_rounded_to_float32_passes(addbmm):
    _, _, _, truth = addbmm
    reason = judge(addbmm, truth.float())
    assert reason is not None and reason.startswith("closer to float64 than eager"), reason


def test_a_result_farther_from_the_truth_than_eager_fails(addbmm):
    _, _, expected, truth = addbmm
    farther = (expected.double() + 3 * (expected.double() - truth)).float()
    assert judge(addbmm, farther) is None


def test_anything_but_rounding_must_be_equal(addbmm):
    _, _, expected, truth = addbmm
    nan_where_finite = truth.float().clone()
    nan_where_finite[0, 0] = float("nan")
    assert judge(addbmm, nan_where_finite) is None
    assert judge(addbmm, truth) is None, "a float64 result where eager gives float32"
    assert judge(addbmm, truth.float()[:-1]) is None, "another shape"
    assert judge(addbmm, (truth.float(), truth.float())) is None, "another structure"


def test_no_arbiter_where_eager_strays_beyond_rounding(addbmm):
    # eager far from the float64 run (as where random draws differ by dtype): the run is
    # no truth to judge by, even for a result closer to it
    call, fn, expected, truth = addbmm
    stray = expected + 1.0
    assert opinfo._closer_to_f64(call, fn, False, truth.float(), stray, RTOL, ATOL) is None
