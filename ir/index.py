"""Integer index expressions over loop variables and symbolic sizes.

An ``Index`` is a polynomial with integer coefficients over atoms: loop variables (``Var``, each
knowing its extent), symbolic sizes (``Sym``, assumed >= 1), floor divisions and modulos that could
not be simplified, and values loaded from tensors (``Indirect``, for gather/embedding). Arithmetic
on ``Index`` keeps the polynomial canonical, so equal expressions compare and hash equal, and
``(i0*D + i1) // D`` simplifies to ``i0`` when ``0 <= i1 < D`` is known from the extents.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Mapping, Union

IntLike = Union[int, "Index"]


class Atom:
    """Base of the indivisible factors of a monomial."""

    rank = 0

    def sort_key(self) -> tuple:
        key = self.__dict__.get("_sort_key")
        if key is None:
            key = self._compute_sort_key()
            object.__setattr__(self, "_sort_key", key)
        return key

    def _compute_sort_key(self) -> tuple:
        return (self.rank, str(self))


@dataclass(frozen=True)
class Sym(Atom):
    """A symbolic size (>= 1), e.g. a dynamic batch dimension."""

    name: str
    rank = 2

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Var(Atom):
    """A loop variable ranging over ``[0, size)``."""

    name: str
    size: "Index"
    rank = 1

    def __str__(self) -> str:
        return self.name

    def _compute_sort_key(self) -> tuple:
        return (self.rank, self.name[0], int(self.name[1:]) if self.name[1:].isdigit() else self.name)


@dataclass(frozen=True)
class FloorDiv(Atom):
    """``num // den`` (floor division) that could not be simplified."""

    num: "Index"
    den: "Index"
    rank = 3

    def __str__(self) -> str:
        return f"({_paren(self.num)} // {_paren(self.den)})"


@dataclass(frozen=True)
class Mod(Atom):
    """``num % den`` (non-negative for a positive divisor) that could not be simplified."""

    num: "Index"
    den: "Index"
    rank = 4

    def __str__(self) -> str:
        return f"({_paren(self.num)} % {_paren(self.den)})"


@dataclass(frozen=True)
class IndexCheck:
    """How an indirect index is checked, as the op that reads through it does in eager mode.

    ``op`` and ``dim`` name the op and the dimension it indexes (for the error message);
    ``wrap``: an index in ``[-size, 0)`` counts from the end (``x[t]``), else only ``[0, size)``
    is valid (``gather``, ``index_select``, ``embedding``). Any other index is an error.
    """

    op: str
    dim: int
    wrap: bool

    def message(self, value: int, bound: int) -> str:
        """The error for index ``value`` into a dimension of size ``bound``, worded like eager's."""
        valid = f"[{-bound}, {bound})" if self.wrap else f"[0, {bound})"
        return (f"{self.op}: index {value} is out of bounds for dimension {self.dim} with size {bound} "
                f"(valid: {valid})")


@dataclass(frozen=True)
class Indirect(Atom):
    """An integer read from a tensor: the index of a gather/embedding load.

    ``value`` is a scalar IR expression (see ``ir.expr``); ``bound`` is the size of the indexed
    dimension, used for range reasoning and for bounds checks. ``check`` says which indices are
    valid and whether negative ones wrap; None: the value is in ``[0, bound)`` by construction
    (a position clamped into bounds), so it is neither wrapped nor checked.
    """

    value: Any
    bound: "Index"
    check: IndexCheck | None = None
    rank = 5

    def __str__(self) -> str:
        return f"[{self.value}]"


def _paren(e: "Index") -> str:
    s = str(e)
    return s if e.is_atomic_str() else f"({s})"


Monomial = tuple  # sorted tuple of Atom


@functools.lru_cache(maxsize=1 << 16)
def _mono_key(m: Monomial) -> tuple:
    return tuple(a.sort_key() for a in m)


class Index:
    """A canonical integer polynomial over atoms. Immutable and hashable."""

    __slots__ = ("terms", "const", "_hash", "_atoms")

    def __init__(self, terms: dict[Monomial, int] | tuple = (), const: int = 0):
        items = terms.items() if type(terms) is dict else terms
        kept = [(m, c) for m, c in items if c != 0]
        kept.sort(key=lambda mc: _mono_key(mc[0]))
        self.terms: tuple[tuple[Monomial, int], ...] = tuple(kept)
        self.const = int(const)
        self._hash = hash((self.terms, self.const))
        self._atoms: frozenset | None = None

    # -- construction -------------------------------------------------------------------------
    @staticmethod
    def of(value: IntLike | Atom) -> "Index":
        """Lift an int, an atom or an Index to an Index."""
        if isinstance(value, Index):
            return value
        if isinstance(value, Atom):
            return Index((((value,), 1),))
        if isinstance(value, bool) or not isinstance(value, int):
            if hasattr(value, "__index__"):
                return Index((), int(value))
            raise TypeError(f"index expressions take ints, got {value!r}")
        return Index((), value)

    # -- queries ------------------------------------------------------------------------------
    @property
    def is_const(self) -> bool:
        return not self.terms

    def as_int(self) -> int | None:
        """The value if constant, else None."""
        return self.const if not self.terms else None

    def atoms(self) -> frozenset[Atom]:
        """All atoms, including those nested inside divisions and modulos (computed once)."""
        if self._atoms is None:
            out: set[Atom] = set()
            for m, _ in self.terms:
                for a in m:
                    out.add(a)
                    if isinstance(a, (FloorDiv, Mod)):
                        out |= a.num.atoms() | a.den.atoms()
            self._atoms = frozenset(out)
        return self._atoms

    def free_vars(self) -> set[Var]:
        return {a for a in self.atoms() if isinstance(a, Var)}

    def is_atomic_str(self) -> bool:
        return not self.terms or lone_atom(self) is not None

    # -- arithmetic ---------------------------------------------------------------------------
    def __add__(self, other: IntLike) -> "Index":
        o = Index.of(other)
        acc = dict(self.terms)
        for m, c in o.terms:
            acc[m] = acc.get(m, 0) + c
        return Index(acc, self.const + o.const)

    __radd__ = __add__

    def __neg__(self) -> "Index":
        return Index(tuple((m, -c) for m, c in self.terms), -self.const)

    def __sub__(self, other: IntLike) -> "Index":
        return self + (-Index.of(other))

    def __rsub__(self, other: IntLike) -> "Index":
        return Index.of(other) - self

    def __mul__(self, other: IntLike) -> "Index":
        o = Index.of(other)
        if o.is_const:
            k = o.const
            return Index(tuple((m, c * k) for m, c in self.terms), self.const * k)
        if self.is_const:
            return o * self.const
        acc: dict = {}
        lhs = list(self.terms) + ([((), self.const)] if self.const else [])
        rhs = list(o.terms) + ([((), o.const)] if o.const else [])
        const = 0
        for m1, c1 in lhs:
            for m2, c2 in rhs:
                m = tuple(sorted(m1 + m2, key=lambda a: a.sort_key()))
                if m:
                    acc[m] = acc.get(m, 0) + c1 * c2
                else:
                    const += c1 * c2
        return Index(acc, const)

    __rmul__ = __mul__

    def __floordiv__(self, other: IntLike) -> "Index":
        return floordiv(self, Index.of(other))

    def __rfloordiv__(self, other: IntLike) -> "Index":
        return floordiv(Index.of(other), self)

    def __mod__(self, other: IntLike) -> "Index":
        return mod(self, Index.of(other))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int) and not isinstance(other, bool):
            return not self.terms and self.const == other
        return isinstance(other, Index) and self.terms == other.terms and self.const == other.const

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Index({self})"

    def __str__(self) -> str:
        parts = []
        for m, c in self.terms:
            body = "*".join(str(a) for a in m)
            if c == 1:
                parts.append(body)
            elif c == -1:
                parts.append(f"-{body}")
            else:
                parts.append(f"{body}*{c}" if c > 0 else f"-{body}*{-c}")
        if self.const or not parts:
            parts.append(str(self.const))
        out = parts[0]
        for p in parts[1:]:
            out += f" - {p[1:]}" if p.startswith("-") else f" + {p}"
        return out

    # -- substitution -------------------------------------------------------------------------
    def subs(self, mapping: Mapping[Atom, "Index"]) -> "Index":
        """Replace atoms (usually loop variables) by index expressions, re-simplifying."""
        if not mapping or not any(isinstance(a, (FloorDiv, Mod, Var)) or a in mapping for a in self.atoms()):
            return self
        result = Index((), self.const)
        for m, c in self.terms:
            term = Index.of(c)
            for a in m:
                term = term * _subs_atom(a, mapping)
            result = result + term
        return result


def _subs_atom(a: Atom, mapping: Mapping[Atom, Index]) -> Index:
    if a in mapping:
        return Index.of(mapping[a])
    if isinstance(a, FloorDiv):
        return floordiv(a.num.subs(mapping), a.den.subs(mapping))
    if isinstance(a, Mod):
        return mod(a.num.subs(mapping), a.den.subs(mapping))
    if isinstance(a, Var):
        new_size = a.size.subs(mapping)
        return Index.of(a if new_size == a.size else Var(a.name, new_size))
    return Index.of(a)


# -- range reasoning --------------------------------------------------------------------------
def upper_bound(e: Index) -> Index | None:
    """An upper bound (inclusive) of ``e`` as a polynomial, or None if unknown (negative terms)."""
    result = Index((), e.const)
    for m, c in e.terms:
        if c < 0:
            if all(_nonneg(a) for a in m):
                continue  # a non-negative term subtracted: bound by dropping it
            return None
        term = Index.of(c)
        for a in m:
            hi = _atom_upper(a)
            if hi is None:
                return None
            term = term * hi
        result = result + term
    return result


def _atom_upper(a: Atom) -> Index | None:
    if isinstance(a, Var):
        return a.size - 1
    if isinstance(a, Indirect):
        return a.bound - 1
    if isinstance(a, Mod):
        return a.den - 1
    if isinstance(a, FloorDiv):
        hi = upper_bound(a.num)
        if hi is None:
            return None
        return floordiv(hi, a.den)
    if isinstance(a, Sym):
        return Index.of(a)  # a symbol bounds itself: bounds stay symbolic polynomials
    return None


def _nonneg(a: Atom) -> bool:
    if isinstance(a, FloorDiv):
        return is_nonneg(a.num)
    return True


def is_nonneg(e: Index) -> bool:
    """True if ``e >= 0`` is provable: every term is non-negative, and the terms made of symbols
    alone (each >= 1) are at least as large as a negative constant (``a*b - 1 >= 0``)."""
    if not all(c > 0 and all(_nonneg(a) for a in m) for m, c in e.terms):
        return False
    least = e.const + sum(c for m, c in e.terms if all(isinstance(a, Sym) for a in m))
    return least >= 0


def provably_less(e: Index, bound: Index) -> bool:
    """True if ``e < bound`` is provable from the atoms' ranges."""
    hi = upper_bound(e)
    return hi is not None and is_nonneg(bound - hi - 1)


def _divides(den: Index, m: Monomial, c: int) -> Monomial | None:
    """If ``den`` divides ``c*m`` exactly, the quotient's monomial (coefficient handled by caller)."""
    if len(den.terms) > 1 or (den.terms and den.const):
        return None
    if den.is_const:
        return m if c % den.const == 0 else None
    dm, dc = den.terms[0]
    if c % dc:
        return None
    rest = list(m)
    for a in dm:
        if a not in rest:
            return None
        rest.remove(a)
    return tuple(rest)


def _split(num: Index, den: Index) -> tuple[Index, Index]:
    """``num = q*den + r`` with q collecting every term ``den`` divides exactly."""
    dc = den.const if den.is_const else den.terms[0][1]
    q: dict = {}
    r: dict = {}
    qc, rc = 0, num.const
    if den.is_const and num.const % den.const == 0:
        qc, rc = num.const // den.const, 0
    for m, c in num.terms:
        qm = _divides(den, m, c)
        if qm is None:
            r[m] = c
        elif qm:
            q[qm] = q.get(qm, 0) + c // dc
        else:
            qc += c // dc
    return Index(q, qc), Index(r, rc)


def floordiv(num: Index, den: Index) -> Index:
    """Floor division, simplified when ranges allow; ``den`` must be positive."""
    if den == 1:
        return num
    if num.is_const and den.is_const:
        return Index.of(num.const // den.const)
    if isinstance(den.as_int(), int) and den.const <= 0:
        raise ZeroDivisionError(f"index division by {den}")
    if len(den.terms) > 1 or (den.terms and den.const):
        return Index.of(FloorDiv(num, den))
    q, r = _split(num, den)
    if r == 0:
        return q
    if r.is_const and r.const < 0 and is_nonneg(den + r.const):
        return q - 1  # -den <= r < 0: floor((q*den + r) / den) = q - 1 (bounds: (s*t - 1) // t)
    if not is_nonneg(r):
        # Splitting off multiples of den could leave a negative remainder (2*s - 1 - i -> -1 - i),
        # which C's truncating division would get wrong; printers assume non-negative numerators.
        return Index.of(FloorDiv(num, den))
    if provably_less(r, den):
        return q
    if len(r.terms) == 1 and r.const == 0:
        inner = r.terms[0][0]
        if len(inner) == 1 and isinstance(inner[0], FloorDiv) and r.terms[0][1] == 1:
            fd = inner[0]
            return q + floordiv(fd.num, fd.den * den)
    return q + Index.of(FloorDiv(r, den))


def mod(num: Index, den: Index) -> Index:
    """Python-style modulo (non-negative for positive ``den``), simplified when ranges allow."""
    if den == 1:
        return Index.of(0)
    if num.is_const and den.is_const:
        return Index.of(num.const % den.const)
    if len(den.terms) > 1 or (den.terms and den.const):
        return Index.of(Mod(num, den))
    _, r = _split(num, den)
    if r == 0:
        return Index.of(0)
    if not is_nonneg(r):
        return Index.of(Mod(num, den))  # keep the non-negative numerator (see floordiv)
    if provably_less(r, den):
        return r
    return Index.of(Mod(r, den))


def recombine_divmod(e: Index) -> Index:
    """Rewrite ``k*d*(n // d) + k*(n % d)`` as ``k*n``, which views of views produce.

    Reshaping a merged dimension back apart and flattening it again (a transposed attention
    output seen as a matrix) leaves such pairs; recombined, the access is strided again. A
    division by ``a*b`` pairs with ``(n // a) % b`` as ``(n // a) // b`` would (a dim split in
    three: ``1024*(r // 1024) + 32*((r // 32) % 32) + r % 32`` is ``r``).
    """
    while True:
        divs: dict[tuple, list] = {}
        mods: dict[tuple, list] = {}
        for m, c in e.terms:
            for a in m:
                if isinstance(a, (FloorDiv, Mod)):
                    rest = list(m)
                    rest.remove(a)
                    factor = Index(((tuple(rest), c),)) if rest else Index.of(c)
                    (divs if isinstance(a, FloorDiv) else mods).setdefault((a.num, a.den), []).append(
                        (Index(((m, c),)), factor))
        for mod_num, mod_den in list(mods):  # n // (a*b) read as (n // a) // b
            inner = lone_atom(mod_num)
            if isinstance(inner, FloorDiv) and (inner.num, inner.den * mod_den) in divs:
                divs.setdefault((mod_num, mod_den), []).extend(divs[(inner.num, inner.den * mod_den)])
        pair = _matching_divmod(divs, mods)
        if pair is None:
            return e
        (num, _), div_term, mod_term, factor = pair
        e = e - div_term - mod_term + num * factor


def _matching_divmod(divs, mods):
    for key, div_terms in divs.items():
        for mod_term, mod_factor in mods.get(key, ()):
            for div_term, div_factor in div_terms:
                if div_factor == mod_factor * key[1]:
                    return key, div_term, mod_term, mod_factor
    return None


def stride_along(index: Index, v: Var) -> int | None:
    """The coefficient of ``v`` in an affine flat index (0 if absent), None if the index has an
    indirect position, or ``v`` appears other than as a term of its own (in a product, under a
    division or a modulo)."""
    coefficient = 0
    for monomial, c in index.terms:
        if monomial == (v,):
            coefficient += c
        elif any(isinstance(a, Indirect) or v in Index.of(a).atoms() for a in monomial):
            return None
    return coefficient


def sym(name: str) -> Index:
    """A symbolic size as an index expression."""
    return Index.of(Sym(name))


def var(name: str, size: IntLike) -> Index:
    """A loop variable ``name`` over ``[0, size)`` as an index expression."""
    return Index.of(Var(name, Index.of(size)))


def lone_atom(e: Index) -> Atom | None:
    """The atom ``e`` consists of (coefficient 1, no constant), else None."""
    if e.const == 0 and len(e.terms) == 1 and e.terms[0][1] == 1 and len(e.terms[0][0]) == 1:
        return e.terms[0][0][0]
    return None


def as_var(e: Index) -> Var:
    """The Var an index expression consists of (raises if it is not a bare variable)."""
    a = lone_atom(e)
    if isinstance(a, Var):
        return a
    raise ValueError(f"{e} is not a loop variable")


def bare_symbol(e: Index) -> str | None:
    """The symbol name if ``e`` is exactly one symbol, else None."""
    a = lone_atom(e)
    return a.name if isinstance(a, Sym) else None


def symbols_in(e: Index) -> set[str]:
    """Names of every symbol ``e`` uses."""
    return {a.name for a in e.atoms() if isinstance(a, Sym)}


def product(values) -> Index:
    """The product of index expressions (1 for none)."""
    return math.prod(values, start=Index.of(1))


def contiguous_strides(sizes) -> tuple[Index, ...]:
    """Row-major strides for ``sizes``."""
    strides = []
    acc = Index.of(1)
    for s in reversed(sizes):
        strides.append(acc)
        acc = acc * s
    return tuple(reversed(strides))


def evaluate(e: Index, env: Mapping[str, int]) -> int:
    """Evaluate with concrete values for every Sym and Var name (for tests and size binding)."""
    total = e.const
    for m, c in e.terms:
        v = c
        for a in m:
            v *= _eval_atom(a, env)
        total += v
    return total


def _eval_atom(a: Atom, env: Mapping[str, int]) -> int:
    if isinstance(a, (Sym, Var)):
        return env[a.name]
    if isinstance(a, FloorDiv):
        return evaluate(a.num, env) // evaluate(a.den, env)
    if isinstance(a, Mod):
        return evaluate(a.num, env) % evaluate(a.den, env)
    raise ValueError(f"cannot evaluate {a} without tensor values")
