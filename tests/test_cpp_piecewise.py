"""Piecewise ops (cat, constant_pad_nd, slice_scatter) on the C++ backend: the innermost loop
split where the piece changes (``backends/cpp/piecewise.py``), bit for bit as eager."""
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import loopnest as ln
from loopnest.backends.cpp import piecewise
from loopnest.ir.expr import Apply, Const, IndexValue
from loopnest.ir import dtypes as dt
from loopnest.ir.index import Index, Sym, Var
from loopnest.ir.ops import Op


def compiled(fn, *args):
    return ln.compile_fx(make_fx(fn)(*args), list(args), backend="cpp", tune="off")


CASES = {
    "cat inner 3": (lambda a, b, c: torch.cat([a, b * 2, c], 1), [(7, 13), (7, 1), (7, 29)]),
    "cat inner 2 odd": (lambda a, b: torch.cat([a, b], -1) + 1, [(5, 3, 17), (5, 3, 2)]),
    "cat outer": (lambda a, b: torch.cat([a, b], 0) * 3, [(3, 37), (4, 37)]),
    "cat many": (lambda *xs: torch.cat([x * (k + 1) for k, x in enumerate(xs)], 1), [(4, k + 1) for k in range(12)]),
    "pad": (lambda x: F.pad(x, (3, 2, 1, 4)) + 1, [(9, 21)]),
    "pad crop": (lambda x: F.pad(x, (-2, 5, 3, -1), value=7.5), [(6, 19)]),
    "pad 3d": (lambda x: F.pad(x, (1, 2, 0, 0, 2, 1)), [(3, 5, 31)]),
    "slice_scatter": (lambda x, y: torch.slice_scatter(x, y * 2, 1, 4, 20), [(6, 33), (6, 16)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_piecewise_matches_eager(name):
    fn, shapes = CASES[name]
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(*s, generator=g) for s in shapes]
    assert torch.equal(compiled(fn, *args)(*args), fn(*args))


def test_the_inner_loop_is_split_where_the_piece_changes(tmp_path, monkeypatch):
    """cat of widths 13 and 30: loops over [0, 13) and [13, 43)."""
    monkeypatch.setenv("LOOPNEST_CACHE_DIR", str(tmp_path))
    a, b = torch.randn(7, 13), torch.randn(7, 30)
    compiled(lambda a, b: torch.cat([a, b * 2], 1), a, b)(a, b)
    (src,) = [p.read_text() for p in tmp_path.rglob("*.cpp")]
    assert "= 0; p1 < 13;" in src and "= 13; p1 < 43;" in src


def test_cuts_of_each_comparison():
    v = Var("p1", Index.of(20))
    x = IndexValue(Index.of(v) + 2, dt.int64)

    def cmp(op, a, b):
        return Apply(op, (a, b), dt.bool_)
    c = Const(10, dt.int64)
    assert piecewise.pieces([cmp(Op.LT, x, c)], v, Index.of(20)) == [(0, 8), (8, 20)]
    assert piecewise.pieces([cmp(Op.LE, x, c)], v, Index.of(20)) == [(0, 9), (9, 20)]
    assert piecewise.pieces([cmp(Op.GT, c, x)], v, Index.of(20)) == [(0, 8), (8, 20)]
    assert piecewise.pieces([cmp(Op.EQ, x, c)], v, Index.of(20)) == [(0, 8), (8, 9), (9, 20)]
    assert piecewise.pieces([cmp(Op.LT, x, c)], v, Index.of(5)) is None  # the cut lies outside
    assert piecewise.pieces([cmp(Op.LT, x, c)], v, Index.of(Sym("s0"))) is None  # symbolic size
    other = IndexValue(Index.of(Var("p0", Index.of(4))), dt.int64)
    assert piecewise.pieces([cmp(Op.LT, other, c)], v, Index.of(20)) is None


@pytest.mark.parametrize("reduce", [lambda t: t.sum(-1), lambda t: t.amax(-1), lambda t: t.argmax(-1)])
def test_a_reduction_over_a_rolled_pad_reads_each_position(reduce):
    """The pad's mask reads a position that a roll computes from the reduced variable; it was
    taken for a per-row value and computed before the loop over that variable (g++ failed on
    an undeclared ``r0``; found by a randomized program fuzz)."""
    def fn(x):
        return reduce(torch.roll(F.pad(x, (1, 2)), 1, -1))
    x = torch.randn(8, 3, 5)
    torch.testing.assert_close(compiled(fn, x)(x), fn(x))
