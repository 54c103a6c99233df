"""Tests of kiln.fx_ops.scatter: scatter, scatter_add, scatter_reduce, index_put (and what
index_copy, index_fill, put, max_unpool decompose to), index_reduce and masked_scatter,
each compared with torch on fixed-seed inputs (the harness compares with ``assert_close``,
which does not tell -0.0 from 0.0, so signed zeros are checked bit by bit)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fx_harness import LOOSE, Unsupported, capture, check, run_kiln, translate

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

NAN, INF = float("nan"), float("inf")


def _kiln_out(fn, *args):
    """(kiln's compiled result, torch's result) of a one-graph, one-output `fn`."""
    (gm, inputs), = capture(fn, *args)
    return run_kiln(translate(gm), gm, inputs, "cpu")[0], fn(*args)


def _refusal(fn, *args) -> str:
    (gm, _), = capture(fn, *args)
    with pytest.raises(Unsupported) as e:
        translate(gm)
    return str(e.value)


# -- accumulating scatters ----------------------------------------------------------------


@pytest.mark.parametrize("dim", [0, -1])
def test_scatter_add_index_smaller_than_self(dim):
    x, src = torch.randn(5, 7), torch.randn(6, 9)
    size = x.shape[dim]
    idx = torch.randint(0, size, (3, 4) if dim == 0 else (4, 5))
    check(lambda x, i, s: torch.scatter_add(x, dim, i, s), x, idx, src)


def test_scatter_add_non_contiguous_integers_bool_and_0d():
    x, src = torch.randn(7, 5), torch.randn(8, 7)
    idx = torch.randint(0, 5, (7, 3))
    check(lambda x, i, s: torch.scatter_add(x.t(), 0, i.t(), s[::2]), x, idx, src)
    xi = torch.randint(-50, 50, (4, 3))
    check(lambda x, i, s: torch.scatter_add(x, 0, i, s), xi, torch.randint(0, 4, (5, 3)),
          torch.randint(-50, 50, (5, 3)))
    xb = torch.rand(6) > 0.5
    check(lambda x, i, s: torch.scatter_add(x, 0, i, s), xb, torch.tensor([0, 0, 5, 1]),
          torch.tensor([True, False, True, False]))
    check(lambda x, i, s: torch.scatter_add(x, 0, i, s), torch.tensor(1.5), torch.tensor(0),
          torch.tensor(2.5))
    check(lambda x, i, s: (x.scatter(0, i, s, reduce="add"), x.scatter(0, i, s, reduce="multiply"),
                           x.scatter(1, i, 1.5, reduce="multiply")),
          torch.randn(3, 4), torch.randint(0, 3, (2, 4)), torch.randn(2, 4))


def test_scatter_add_half_accumulates_in_f32_as_torch():
    x, src = torch.randn(5, 3).half(), torch.randn(11, 3).half()
    idx = torch.randint(0, 5, (11, 3))
    for fn in (lambda x, i, s: torch.scatter_add(x, 0, i, s),
               lambda x, i, s: torch.scatter_reduce(x, 0, i, s, "mean")):
        got, want = _kiln_out(fn, x, idx, src)
        assert torch.equal(got, want)


def _all_reductions(dim, reduces):
    """fn(x, i, s): scatter_reduce along `dim` with each of `reduces`, include_self both."""
    return lambda x, i, s: tuple(
        torch.scatter_reduce(x, dim, i, s, r, include_self=inc)
        for r in reduces for inc in (True, False))


def test_scatter_reduce_sum_mean():
    x, src = torch.randn(5, 6), torch.randn(4, 7)
    x[0, 0], src[1, 2] = INF, NAN
    idx = torch.randint(0, 5, (4, 6))
    check(_all_reductions(0, ["sum", "mean"]), x, idx, src)
    xi, si = torch.randint(-20, 20, (5, 6)), torch.randint(-20, 20, (4, 6))
    check(_all_reductions(1, ["sum", "mean"]), xi, torch.randint(0, 6, (4, 6)), si)


def test_scatter_reduce_integer_mean_floors():
    x = torch.tensor([10, -7, 5, 3])
    idx, src = torch.tensor([0, 0, 1, 1, 2]), torch.tensor([1, 2, 1, 1, 4])
    for inc in (True, False):
        got, want = _kiln_out(
            lambda x, i, s: torch.scatter_reduce(x, 0, i, s, "mean", include_self=inc),
            x, idx, src)
        assert torch.equal(got, want)  # -5/3 floors to -2


def test_index_put_accumulate_broadcast_negative_and_none():
    x = torch.randn(5, 4, 3)
    i, j = torch.tensor([[1], [-1], [1]]), torch.tensor([0, 3, -4, 0])

    def fn(x, i, j, v):
        return (torch.index_put(x, (i, j), v, accumulate=True),
                x.index_add(1, j % 4, v[0][None].expand(5, 4, 3)))

    check(fn, x, i, j, torch.randn(3, 4, 3))
    check(lambda x, i: torch.index_put(x, (i,), torch.tensor(2.0), accumulate=True), x,
          torch.tensor([4, 4, 0]))


def test_put_accumulate_and_bool_index_put_accumulate():
    x = torch.randn(3, 5)
    check(lambda x, i, s: x.put(i, s, accumulate=True), x, torch.tensor([[14, -1], [0, 14]]),
          torch.randn(2, 2))
    xb = torch.tensor([False, True, False])
    check(lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True), xb,
          torch.tensor([0, 0, 2]), torch.tensor([True, True, False]))


# -- overwriting scatters: the last write wins ---------------------------------------------


def test_index_put_duplicates_last_write_wins():
    x = torch.randn(6, 3)
    idx = torch.tensor([1, 4, 1, -5, 4, 0, 4])
    got, want = _kiln_out(lambda x, i, v: torch.index_put(x, (i,), v), x, idx, torch.randn(7, 3))
    assert torch.equal(got, want)
    i, j = torch.tensor([[1, 1], [0, 1]]), torch.tensor([[2, 2], [2, 2]])
    got, want = _kiln_out(lambda x, i, j, v: torch.index_put(x, (i, j), v), x, i, j,
                          torch.arange(4.0).view(2, 2))
    assert torch.equal(got, want)


def test_index_put_none_entries_non_adjacent_and_non_contiguous():
    def setitem(x, i, j, v):
        y = x.clone()
        y[i, :, j] = v  # indexed dims 0 and 2: moved first
        return y

    check(setitem, torch.randn(3, 4, 5), torch.tensor([0, 2, 0]), torch.tensor([1, 1, 1]),
          torch.randn(3, 4))

    def columns(x, i, v):
        y = x.t().clone()
        y[:, i] = v[::2]
        return y

    check(columns, torch.randn(6, 3), torch.tensor([5, -1, 0]), torch.randn(6, 3))
    check(lambda x, i: x.index_fill(1, i, -0.5), torch.randn(4, 5), torch.tensor([0, 3, 3]))
    check(lambda x, i, s: x.index_copy(1, i, s), torch.randn(4, 5), torch.tensor([4, 0]),
          torch.randn(4, 2))
    check(lambda x, i, s: torch.index_put(x, (i,), s), torch.randn(1, 1), torch.tensor(0),
          torch.randn(1))


def test_put_last_write_wins_and_0d():
    got, want = _kiln_out(lambda x, i, s: x.put(i, s), torch.zeros(3, 3),
                          torch.tensor([[4, 4], [-5, 0]]), torch.arange(4.0).view(2, 2))
    assert torch.equal(got, want)
    check(lambda x, i, s: x.put(i, s), torch.tensor(1.5), torch.tensor([0, 0]),
          torch.tensor([2.5, 3.5]))


@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_src_and_value_any_index_shape(dim):
    x, src = torch.randn(5, 7), torch.randn(6, 8)
    idx = torch.randint(0, x.shape[dim], (4, 3))  # repeated targets, smaller than self
    got, want = _kiln_out(lambda x, i, s: torch.scatter(x, dim, i, s), x, idx, src)
    assert torch.equal(got, want)
    check(lambda x, i: torch.scatter(x, dim, i, -INF), x, idx)
    check(lambda x, i: torch.scatter(x, dim, i, 2.7), torch.randint(0, 9, (5, 7)), idx)


def test_scatter_non_contiguous_0d_empty_bool_and_backward():
    check(lambda x, i, s: torch.scatter(x.t(), 1, i, s.t()), torch.randn(6, 3),
          torch.randint(0, 6, (3, 2)), torch.randn(4, 3))
    check(lambda x, i, s: torch.scatter(x, 0, i, s), torch.tensor(1.5), torch.tensor(0),
          torch.tensor(2.5))
    check(lambda x, i, s: torch.scatter(x, 0, i, s), torch.randn(3, 4),
          torch.zeros(0, 4, dtype=torch.long), torch.randn(2, 4))
    check(lambda x, i, s: torch.scatter(x, 0, i, s), torch.rand(5) > 0.5,
          torch.tensor([0, 0, 3]), torch.tensor([True, False, True]))
    check(lambda x, s: torch.scatter(x, 0, torch.tensor([[0, 2], [0, 1]]), s),
          torch.randn(3, 2, requires_grad=True), torch.randn(2, 2, requires_grad=True),
          backward=True)


# -- amax / amin / prod reductions --------------------------------------------------------


def test_scatter_reduce_one_hot():
    x, src = torch.randn(5, 6), torch.randn(7, 8)
    idx = torch.randint(0, 6, (4, 7))
    check(_all_reductions(1, ["amax", "amin", "prod"]), x, idx, src)
    xi, si = torch.randint(-9, 9, (4, 3)), torch.randint(-9, 9, (5, 3))
    check(_all_reductions(0, ["amax", "amin", "prod"]), xi, torch.randint(0, 4, (5, 3)), si)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_nan_and_signed_zeros(reduce, include_self):
    fn = lambda x, i, s: torch.scatter_reduce(  # noqa: E731
        x, 0, i, s, reduce, include_self=include_self)
    check(fn, torch.tensor([1.0, 1.0, NAN, 3.0]), torch.tensor([0, 0, 1, 1, 2, 3]),
          torch.tensor([0.0, NAN, 5.0, 1.0, 7.0, -INF]))
    # ties between ±0: the first value (self, when included) wins, as torch
    got, want = _kiln_out(fn, torch.tensor([1.0, 2.0, -0.0, 0.0]),
                          torch.tensor([0, 0, 1, 1, 2, 3]),
                          torch.tensor([-0.0, 0.0, 0.0, -0.0, 0.0, -0.0]))
    assert torch.equal(torch.signbit(got), torch.signbit(want))


def test_index_reduce():
    def fn(dim):
        return lambda x, i, s: tuple(
            x.index_reduce(dim, i, s, r, include_self=inc)
            for r in ("amax", "amin", "mean", "prod") for inc in (True, False))

    x, src = torch.randn(5, 7), torch.randn(5, 4)
    src[0, 1] = NAN
    check(fn(1), x, torch.tensor([6, 0, 6, 2]), src)
    xi = torch.randint(-9, 9, (3, 2))
    check(fn(0), xi, torch.tensor([2, 2, 0]), torch.randint(-9, 9, (3, 2)))


# -- what decomposes to these --------------------------------------------------------------


def test_max_unpool_and_masked_scatter():
    out, ind = F.max_pool2d(torch.randn(2, 3, 5, 4), 2, return_indices=True)
    check(lambda o, i: F.max_unpool2d(o, i, 2, output_size=(5, 4)), out, ind)
    out, ind = F.max_pool1d(torch.randn(1, 2, 7), 3, 2, return_indices=True)
    check(lambda o, i: F.max_unpool1d(o, i, 3, 2), out, ind)
    x = torch.randn(4, 5)
    check(lambda x, m, s: x.masked_scatter(m, s), x, x > 0, torch.randn(23))
    check(lambda x, m, s: x.masked_scatter(m, s), x, torch.tensor([True, False, False, True,
                                                                    True]), torch.randn(4, 4))


def test_gather_and_index_stay_exact():
    x = torch.randn(5, 6)
    check(lambda x, i: (x.gather(1, i), x[i[:, 0], 1:], torch.take_along_dim(x, i, 1)),
          x, torch.randint(0, 5, (5, 3)), **LOOSE)


# -- refusals -------------------------------------------------------------------------------


def test_refusals_name_the_op_and_sizes():
    big = torch.zeros(3000)
    msg = _refusal(lambda x, i, v: torch.index_put(x, (i,), v), big,
                   torch.randint(0, 3000, (2000,)), torch.randn(2000))
    assert "aten.index_put" in msg and "2000 sources × 3000 targets" in msg
    msg = _refusal(lambda x, i, s: torch.scatter(x, 1, i, s), torch.zeros(4, 3000),
                   torch.randint(0, 3000, (4, 2000)), torch.randn(4, 2000))
    assert "aten.scatter" in msg and "8000 sources × 3000 targets" in msg
    msg = _refusal(lambda x, i, s: x.scatter_reduce(1, i, s, "amax"), torch.zeros(4, 3000),
                   torch.randint(0, 3000, (4, 2000)), torch.randn(4, 2000))
    assert "aten.scatter_reduce" in msg and "8000 sources × 3000 targets" in msg
