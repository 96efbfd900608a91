"""Index expressions: canonical form, printing, and simplification checked by brute force."""
import itertools

from hypothesis import given, settings, strategies as st

from loopnest.ir.index import FloorDiv, Index, Mod, evaluate, recombine_divmod, sym, var
from loopnest.ir.nodes import Layout


def test_contiguous_access_prints_row_major():
    D, N = sym("D"), sym("N")
    i0, i1 = var("i0", N), var("i1", D)
    assert str(Layout.contiguous((N, D)).flat_index((i0, i1))) == "i0*D + i1"
    assert str(Layout.contiguous((8, 16)).flat_index((var("i0", 8), var("i1", 16)))) == "i0*16 + i1"


def test_canonical_equality_and_hash():
    a, b = var("i0", 4), var("i1", 5)
    assert a * 3 + b == b + 3 * a
    assert hash(a * 3 + b) == hash(b + a * 3)
    assert (a + b) * 2 - b * 2 == a * 2
    assert (a - a) == 0


def test_divmod_simplifies_with_ranges():
    D = sym("D")
    i0, i1 = var("i0", sym("N")), var("i1", D)
    flat = i0 * D + i1
    assert flat // D == i0
    assert flat % D == i1
    k = var("k", 6)
    assert str(k // 8) == "0"
    assert (var("j", 12) // 4) // 3 == var("j", 12) // 12


def test_reshape_round_trip_is_identity():
    j = var("j", 64 * 128)
    hi, lo = j // 128, j % 128
    i0, i1 = var("i0", 64), var("i1", 128)
    assert (i0 * 128 + i1) // 128 == i0 and (i0 * 128 + i1) % 128 == i1
    assert str(hi) == "(j // 128)" and str(lo) == "(j % 128)"


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 7), st.integers(0, 6), st.integers(1, 9))
def test_floordiv_and_mod_match_python(n0, n1, c0, c1, d):
    """Simplified // and % agree with Python on every point of the loop domain."""
    i0, i1 = var("i0", n0), var("i1", n1)
    e = i0 * c0 + i1 * c1 + 3
    q, r = e // d, e % d
    for a, b in itertools.product(range(n0), range(n1)):
        env = {"i0": a, "i1": b}
        value = evaluate(e, env)
        assert evaluate(q, env) == value // d
        assert evaluate(r, env) == value % d


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4))
def test_symbolic_nested_reshape(a, b, c):
    """(i0, i1, i2) -> flat over symbolic sizes -> back: simplification is exact."""
    A, B, C = sym("A"), sym("B"), sym("C")
    i0, i1, i2 = var("i0", A), var("i1", B), var("i2", C)
    flat = (i0 * B + i1) * C + i2
    back = (flat // (B * C), (flat // C) % B, flat % C)
    assert back == (i0, i1, i2)
    env = {"A": a, "B": b, "C": c}
    for x, y, z in itertools.product(range(a), range(b), range(c)):
        env.update(i0=x, i1=y, i2=z)
        assert evaluate(flat, env) == (x * b + y) * c + z


def test_index_of_rejects_floats():
    try:
        Index.of(1.5)
    except TypeError as e:
        assert "ints" in str(e)
    else:
        raise AssertionError("expected TypeError")


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 5), st.integers(-3, 3))
def test_recombine_divmod_is_exact(d, n_hi, k, c):
    """k*d*(j//d) + k*(j%d) + c recombines to k*j + c, and agrees with Python everywhere."""
    j = var("j", d * n_hi)
    e = (j // d) * (k * d) + (j % d) * k + c
    r = recombine_divmod(e)
    assert not any(isinstance(a, (FloorDiv, Mod)) for a in r.atoms())
    for value in range(d * n_hi):
        assert evaluate(r, {"j": value}) == evaluate(e, {"j": value})


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 4), st.integers(1, 3), st.integers(-3, 3))
def test_recombine_divmod_undoes_a_split_in_three(a, b, n_hi, k, c):
    """A dim split as (n // (a*b), (n // a) % b, n % a) and flattened again is k*n + c."""
    n = var("n", a * b * n_hi)
    e = (n // (a * b)) * (k * a * b) + ((n // a) % b) * (k * a) + (n % a) * k + c
    r = recombine_divmod(e)
    assert not any(isinstance(x, (FloorDiv, Mod)) for x in r.atoms()), r
    for value in range(a * b * n_hi):
        assert evaluate(r, {"n": value}) == evaluate(e, {"n": value})
