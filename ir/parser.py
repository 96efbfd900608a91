"""A strict reader of the serial IR text (``ir.serial``): tokens, then index and expression grammar.

Nothing is evaluated: numbers are checked against a fixed grammar before ``int``/``float`` convert
them, names are looked up in what the text declared, ops and dtypes in the IR's own tables. Every
problem is a ``ParseError`` naming the line, the column and what was expected. The text length,
bracket nesting, number lengths and coefficient sizes are bounded, so hostile text cannot exhaust
the stack or memory. ``scheduler.serial`` reads whole kernels with it.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from .dtypes import BY_NAME, DType, bool_
from .expr import AccRef, Apply, Const, Expr, IndexValue, Load, walk
from .index import Atom, FloorDiv, Index, IndexCheck, Indirect, Mod, Sym, Var
from .nodes import Buffer
from .ops import Op
from .serial import implied_dtype

MAX_TEXT_CHARS = 1 << 20   # the serial text of a large fused kernel is a few kilobytes
MAX_DEPTH = 64             # bracket nesting; the writer splits at ir.serial.SPLIT_DEPTH
MAX_NUMBER_CHARS = 40
MAX_NAME_CHARS = 200
MAX_COEFFICIENT = 1 << 80
MAX_TREE_NODES = 1 << 18   # an expression written out as a tree (as ``format_expr`` writes a node's
                           # body; Kernel.text binds shared subexpressions and needs no bound)
MAX_TREE_DEPTH = 400       # ... and its nesting, which the printer recurses through (two frames a level)

OPS = {op.name.lower(): op for op in Op}

_TOKEN = re.compile(r"""
    (?P<newline>\n)
  | (?P<space>[ ]+)
  | (?P<number>\d[\d.eE]*(?:(?<=[eE])[+-]\d+)?)
  | (?P<name>[^\W\d]\w*)
  | (?P<ref>\$\d+)
  | (?P<string>"[^"\\\n]*")
  | (?P<punct>//|[\[\](),:=+\-*%])
""", re.VERBOSE)
_INT = re.compile(r"0|[1-9]\d*")
_FLOAT = re.compile(r"\d+\.\d+(?:e[+-]\d+)?|\d+e[+-]\d+")


class ParseError(ValueError):
    """The text is not valid serial IR; says where (line and column, from 1) and what was expected."""

    def __init__(self, message: str, line: int, column: int):
        super().__init__(f"line {line}, column {column}: {message}")
        self.line, self.column = line, column


@dataclass(frozen=True)
class Token:
    """One token: its kind (``name``, ``number``, ``ref``, ``string``, ``punct``, ``newline``,
    ``end``), its text and where it starts."""

    kind: str
    text: str
    line: int
    column: int

    def describe(self) -> str:
        return {"newline": "end of line", "end": "end of text"}.get(self.kind, repr(self.text))


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, ending with an ``end`` token; ParseError on any stray character."""
    if not isinstance(text, str):
        raise ParseError(f"expected text (str), got {type(text).__name__}", 1, 1)
    if len(text) > MAX_TEXT_CHARS:
        raise ParseError(f"text of {len(text)} characters exceeds the limit of {MAX_TEXT_CHARS}", 1, 1)
    tokens: list[Token] = []
    pos, line, line_start = 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        column = pos - line_start + 1
        if m is None:
            raise ParseError(f"unexpected character {text[pos]!r}", line, column)
        kind, lexeme = m.lastgroup, m.group()
        if kind == "newline":
            tokens.append(Token("newline", lexeme, line, column))
            line, line_start = line + 1, m.end()
        elif kind != "space":
            limit = MAX_NAME_CHARS if kind in ("name", "string") else MAX_NUMBER_CHARS
            if len(lexeme) > limit:
                raise ParseError(f"{kind} of {len(lexeme)} characters exceeds the limit of {limit}", line, column)
            tokens.append(Token(kind, lexeme, line, column))
        pos = m.end()
    tokens.append(Token("end", "", line, pos - line_start + 1))
    return tokens


class Cursor:
    """Walks a token list; every ``expect`` names what it wanted when it fails."""

    def __init__(self, text: str):
        self.tokens = tokenize(text)
        self.last = len(self.tokens) - 1  # the end token
        self.pos = 0
        self.depth = 0

    def peek(self, ahead: int = 0) -> Token:
        i = self.pos + ahead
        return self.tokens[i] if i < self.last else self.tokens[self.last]

    def next(self) -> Token:
        tok = self.peek()
        if self.pos < self.last:
            self.pos += 1
        return tok

    def error(self, message: str, tok: Token | None = None) -> ParseError:
        tok = tok or self.peek()
        return ParseError(message, tok.line, tok.column)

    def at(self, text: str) -> bool:
        tok = self.peek()
        return tok.text == text and tok.kind in ("punct", "name")

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.next()
            return True
        return False

    def expect(self, text: str, what: str | None = None) -> Token:
        if not self.at(text):
            raise self.error(f"expected {what or repr(text)}, found {self.peek().describe()}")
        return self.next()

    def expect_kind(self, kind: str, what: str) -> Token:
        if self.peek().kind != kind:
            raise self.error(f"expected {what}, found {self.peek().describe()}")
        return self.next()

    def name(self, what: str = "a name") -> str:
        return self.expect_kind("name", what).text

    def end_line(self) -> None:
        self.expect_kind("newline", "end of line")

    def open(self, bracket: str) -> None:
        """Enter a bracket, refusing nesting beyond ``MAX_DEPTH``."""
        tok = self.expect(bracket)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"brackets nest deeper than {MAX_DEPTH} levels", tok)

    def close(self, bracket: str) -> None:
        self.expect(bracket)
        self.depth -= 1

    def integer(self, what: str = "an integer") -> int:
        """An optionally negative decimal integer."""
        negative = self.accept("-")
        tok = self.expect_kind("number", what)
        if not _INT.fullmatch(tok.text):
            raise self.error(f"expected {what}, found malformed integer {tok.text!r}", tok)
        value = int(tok.text)
        return -value if negative else value

    def natural(self, what: str) -> int:
        """A non-negative integer."""
        if self.at("-"):
            raise self.error(f"expected {what} (not negative)")
        return self.integer(what)

    def dtype(self) -> DType:
        tok = self.expect_kind("name", "a dtype")
        if tok.text not in BY_NAME:
            raise self.error(f"unknown dtype {tok.text!r}; expected one of {', '.join(BY_NAME)}", tok)
        return BY_NAME[tok.text]

    def string(self, what: str) -> str:
        return self.expect_kind("string", what).text[1:-1]


class TreeSizes:
    """Node counts and depths of expressions expanded into trees, memoized over the DAG: let-bound
    nodes are shared, so a short text can stand for an exponentially large printed tree."""

    def __init__(self):
        self.memo: dict[Expr, tuple[int, int]] = {}
        self.total = 0

    def of(self, root: Expr) -> tuple[int, int]:
        """(nodes, depth) of ``root`` as a tree; counts saturate just above the limits."""
        for node in walk(root):
            if node not in self.memo:
                kids = [self.memo[c] for c in node.children()]
                self.memo[node] = (min(1 + sum(n for n, _ in kids), MAX_TREE_NODES + 1),
                                   min(1 + max((d for _, d in kids), default=0), MAX_TREE_DEPTH + 1))
        return self.memo[root]

    def problem(self, root: Expr, statement: bool = True) -> str | None:
        """Why ``root`` (a whole statement's expression when ``statement``) is too large, or None."""
        nodes, depth = self.of(root)
        if statement:
            self.total = min(self.total + nodes, MAX_TREE_NODES + 1)
        if depth > MAX_TREE_DEPTH:
            return f"the expression nests deeper than {MAX_TREE_DEPTH} levels when written out as a tree"
        if max(nodes, self.total) > MAX_TREE_NODES:
            return f"the expressions have more than {MAX_TREE_NODES} nodes when written out as trees"
        return None


class IRReader(Cursor):
    """Reads indices and expressions of one kernel.

    ``declare_loops`` sets the loop variables (``p0..`` over the parallel domain, ``r0..`` over the
    reduced one), ``symbols`` the symbol names, ``buffers`` what loads may name and ``lets`` the
    let-bound nodes read so far; anything else named is an error.
    """

    def __init__(self, text: str):
        super().__init__(text)
        self.loop_vars: dict[str, Var] = {}
        self.domains: dict[str, int] = {"p": 0, "r": 0}
        self.symbols: set[str] = set()
        self.buffers: dict[str, Buffer] = {}
        self.lets: list[Expr] = []
        self.trees = TreeSizes()

    def statement_expr(self) -> Expr:
        """An expression ending a statement, refused if its printed tree would be too large."""
        tok = self.peek()
        value = self.expr()
        problem = self.trees.problem(value)
        if problem:
            raise self.error(problem, tok)
        return value

    def declare_loops(self, prefix: str, domain: Iterable[Index]) -> None:
        domain = tuple(domain)
        self.domains[prefix] = len(domain)
        for k, size in enumerate(domain):
            self.loop_vars[f"{prefix}{k}"] = Var(f"{prefix}{k}", size)

    # -- indices ---------------------------------------------------------------------------------
    def index(self, loops: bool = True) -> Index:
        """An index expression; ``loops=False`` (sizes, strides) refuses loop variables and loads."""
        terms: dict[tuple, int] = {}
        const = 0
        sign = -1 if self.accept("-") else 1
        while True:
            monomial, coefficient = self._term(loops)
            coefficient *= sign
            if monomial:
                terms[monomial] = terms.get(monomial, 0) + coefficient
            else:
                const += coefficient
            if self.accept("+"):
                sign = 1
            elif self.accept("-"):
                sign = -1
            else:
                return Index(terms, const)

    def _term(self, loops: bool) -> tuple[tuple[Atom, ...], int]:
        atoms: list[Atom] = []
        coefficient = 1
        while True:
            tok = self.peek()
            if tok.kind == "number":
                coefficient *= self.natural("an integer coefficient")
                if abs(coefficient) > MAX_COEFFICIENT:
                    raise self.error(f"coefficient exceeds {MAX_COEFFICIENT}", tok)
            else:
                atoms.append(self._atom(loops))
            if not self.accept("*"):
                return tuple(sorted(atoms, key=lambda a: a.sort_key())), coefficient

    def _atom(self, loops: bool) -> Atom:
        tok = self.peek()
        if self.at("("):
            self.open("(")
            num = self.index(loops)
            op = self.next()
            if op.text not in ("//", "%") or op.kind != "punct":
                raise self.error(f"expected '//' or '%', found {op.describe()}", op)
            den = self.index(loops)
            self.close(")")
            return FloorDiv(num, den) if op.text == "//" else Mod(num, den)
        if tok.kind != "name":
            raise self.error(f"expected an integer, a loop variable, a symbol, '(' or indirect(...), "
                             f"found {tok.describe()}")
        if tok.text == "indirect" and self.peek(1).text == "(":
            if not loops:
                raise self.error("indirect indices are only allowed in loads and stores")
            return self._indirect()
        self.next()
        if tok.text in self.symbols:
            return Sym(tok.text)
        if tok.text in self.loop_vars:
            if not loops:
                raise self.error(f"loop variable {tok.text} is not allowed here (sizes, strides and "
                                 f"offsets are loop-free)", tok)
            return self.loop_vars[tok.text]
        prefix = tok.text[0]
        if prefix in self.domains and tok.text[1:].isdigit():
            raise self.error(f"loop variable {tok.text} does not exist: the kernel has "
                             f"{self.domains[prefix]} {'parallel' if prefix == 'p' else 'reduced'} "
                             f"dimension(s)", tok)
        raise self.error(f"unknown name {tok.text!r} in an index: declare symbols on the 'symbols' line", tok)

    def _indirect(self) -> Indirect:
        self.next()
        self.open("(")
        tok = self.peek()
        value = self.expr()
        problem = self.trees.problem(value, statement=False)
        if problem:
            raise self.error(problem, tok)
        self.expect(",")
        bound = self.index(loops=False)
        check = None
        if self.accept(","):
            self.expect("check")
            op = self.string("the checked op's name, in quotes")
            dim = self.natural("the checked dimension")
            wrap = self.name("'wrap' or 'nowrap'")
            if wrap not in ("wrap", "nowrap"):
                raise self.error(f"expected 'wrap' or 'nowrap', found {wrap!r}")
            check = IndexCheck(op, dim, wrap == "wrap")
        self.close(")")
        if value.dtype.is_float or value.dtype is bool_:
            raise self.error(f"an indirect index reads an integer value, not {value.dtype.name}")
        return Indirect(value, bound, check)

    def indices(self, opening: str, closing: str) -> tuple[Index, ...]:
        """A bracketed, comma-separated (possibly empty) list of indices."""
        self.open(opening)
        out: list[Index] = []
        if not self.at(closing):
            out.append(self.index())
            while self.accept(","):
                out.append(self.index())
        self.close(closing)
        return tuple(out)

    def shape(self) -> tuple[Index, ...]:
        """``[size, ...]`` of loop-free indices."""
        self.open("[")
        out: list[Index] = []
        if not self.at("]"):
            out.append(self.index(loops=False))
            while self.accept(","):
                out.append(self.index(loops=False))
        self.close("]")
        return tuple(out)

    # -- expressions -----------------------------------------------------------------------------
    def expr(self) -> Expr:
        """One scalar expression."""
        tok = self.peek()
        if tok.kind == "ref":
            self.next()
            k = int(tok.text[1:])
            if k >= len(self.lets):
                raise self.error(f"${k} is not defined: {len(self.lets)} let line(s) precede it", tok)
            return self.lets[k]
        if tok.kind == "number" or tok.text in ("-", "inf", "nan", "True", "False"):
            return self._constant()
        if tok.kind != "name":
            raise self.error(f"expected an expression, found {tok.describe()}")
        following = self.peek(1).text
        if following == "[":
            return self._load()
        if following != "(":
            raise self.error(f"expected '[' (a load of {tok.text}) or '(' (an op), found "
                             f"{self.peek(1).describe()}", self.peek(1))
        if tok.text == "acc":
            return self._accref()
        if tok.text == "index":
            self.next()
            self.open("(")
            value = self.index()
            self.close(")")
            self.expect(":")
            return IndexValue(value, self.dtype())
        return self._apply()

    def _constant(self) -> Const:
        negative = self.accept("-")
        lit = self.next()
        self.expect(":", "':' and the constant's dtype")
        dtype = self.dtype()
        text = lit.text
        if dtype.is_bool:
            if negative or text not in ("True", "False"):
                raise self.error(f"expected True or False for a bool constant, found {lit.describe()}", lit)
            return Const(text == "True", dtype)
        if dtype.is_float:
            if not (text in ("inf", "nan") or (lit.kind == "number" and _FLOAT.fullmatch(text))):
                raise self.error(f"expected a float literal (e.g. 1.0, 1e-05, inf, nan) for {dtype.name}, "
                                 f"found {lit.describe()}", lit)
            value = float(text)
            return Const(-value if negative else value, dtype)
        if lit.kind != "number" or not _INT.fullmatch(text):
            raise self.error(f"expected an integer literal for {dtype.name}, found {lit.describe()}", lit)
        value = int(text)
        return Const(-value if negative else value, dtype)

    def _load(self) -> Load:
        tok = self.next()
        buf = self.buffers.get(tok.text)
        if buf is None:
            raise self.error(f"load of undeclared buffer {tok.text!r}; declare it on a 'buffer' line", tok)
        index = self.indices("[", "]")
        if len(index) != len(buf.sizes):
            raise self.error(f"buffer {tok.text} has rank {len(buf.sizes)} but is loaded with "
                             f"{len(index)} indices", tok)
        return Load(tok.text, index, buf.dtype)

    def _accref(self) -> AccRef:
        self.next()
        self.open("(")
        name = self.name("an accumulator name")
        self.expect(",")
        output = self.natural("the accumulator's output number")
        self.close(")")
        self.expect(":", "':' and the accumulator's dtype")
        return AccRef(name, output, self.dtype())

    def _apply(self) -> Apply:
        tok = self.next()
        op = OPS.get(tok.text)
        if op is None:
            raise self.error(f"unknown op {tok.text!r}; the ops are {', '.join(OPS)}", tok)
        self.open("(")
        args = [self.expr()]
        while self.accept(","):
            args.append(self.expr())
        self.close(")")
        if len(args) != op.arity:
            raise self.error(f"{tok.text} takes {op.arity} operand(s), got {len(args)}", tok)
        dtype = implied_dtype(op, args)
        if self.accept(":"):
            dtype = self.dtype()
        elif dtype is None:
            raise self.error(f"expected ':' and the result dtype of {tok.text}")
        return Apply(op, tuple(args), dtype)
