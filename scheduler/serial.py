"""The serial text of a scheduled kernel, and its strict reader.

``kernel_text(kernel)`` writes everything a backend's codegen reads (names, concrete or symbolic
sizes, buffer layouts and kinds, every dtype, accumulator levels, store phases, indirect-index
checks), so ``parse_kernel(kernel_text(k))`` rebuilds a kernel with the same text, the same
``structural_hash`` and the same generated code on another machine, from the text alone. This is
what the tuning service's requests carry; ``Kernel.text()`` stays the readable and hash text.

Layout (one statement a line; expressions and indices as in ``ir.serial``)::

    loopnest kernel 1
    name ln_fx_0
    nodes max_1 sum_4 truediv_5
    symbols                                   (names of symbolic sizes, if any)
    p [64]
    r [96]
    buffer x input float32 [64, 96] strides [96, 1] offset 0
    let $0 = exp(sub(x[p0, r0], acc(buf1, 0):float32))
    acc buf1 max float32 level 0 = x[p0, r0]
    acc buf4 sum float32 level 1 = $0
    acc buf7 sum float32 across level 0 = ...  (a reduction across the rows)
    store phase 2 buf5[p0, r0] = truediv($0, acc(buf4, 0):float32)
    row phase 0 buf9[p0] = ...                (stores after the last phase)
    col phase 0 buf8[r0] = acc(buf7, 0):float32  (stores of reductions across rows, after every row)
    end
"""
from __future__ import annotations

from ..ir.expr import AccRef, Apply, Expr, IndexValue, Load, walk
from ..ir.index import Index, Var
from ..ir.nodes import Buffer, BufferKind, KReduction, KStore, Layout
from ..ir.ops import ReduceOp
from ..ir.parser import IRReader, ParseError, Token, TreeSizes
from ..ir.serial import ExprWriter, is_loop_var_name
from ..ir.verify import apply_problem
from .kernel import Kernel

HEADER = "loopnest kernel 1"
_KINDS = {k.value: k for k in BufferKind}
_REDUCE_OPS = {op.value: op for op in ReduceOp}
_CONSTANT_WORDS = frozenset({"inf", "nan", "True", "False"})


def kernel_text(kernel: Kernel) -> str:
    """The complete serial text of ``kernel`` (see the module docstring); ``parse_kernel`` reads
    it back. ValueError if the kernel holds something the text cannot say (a name that is not an
    identifier, a loop variable outside the kernel's domains) or more than the reader accepts
    (expressions whose printed trees exceed ``ir.parser.MAX_TREE_NODES`` or ``MAX_TREE_DEPTH``)."""
    body = ExprWriter(kernel.pvars() + kernel.rvars())
    sizes = ExprWriter(())
    for name in [kernel.name, *kernel.nodes, *(r.name for r in kernel.reductions)]:
        _check_name(name)
    trees = TreeSizes()
    for e in kernel.expressions():
        problem = trees.problem(e)
        if problem:
            raise ValueError(f"kernel {kernel.name} cannot be written as text: {problem}")
    lets = body.bind(kernel.expressions())
    lines = [f"let ${k} = {body.expr(e, define=True)}" for k, e in enumerate(lets)]
    for r in kernel.reductions:
        across = " across" if r.across else ""
        lines.append(f"acc {r.name} {r.op.value} {r.dtype.name}{across} level {r.level} = {body.expr(r.body)}")
    for kind, stores in (("store", kernel.elem_stores), ("row", kernel.row_stores), ("col", kernel.col_stores)):
        for s in stores:
            index = ", ".join(body.index(i) for i in s.index)
            lines.append(f"{kind} phase {s.phase} {s.buffer}[{index}] = {body.expr(s.value)}")
    decls = [_buffer_line(kernel.buffers[n], sizes) for n in _buffer_names(kernel)]
    p = ", ".join(sizes.index(s) for s in kernel.pdomain)
    r = ", ".join(sizes.index(s) for s in kernel.rdomain)
    head = [HEADER, f"name {kernel.name}", " ".join(["nodes", *kernel.nodes]),
            " ".join(["symbols", *sorted(body.symbols | sizes.symbols)]), f"p [{p}]", f"r [{r}]"]
    return "\n".join(head + decls + lines + ["end"]) + "\n"


def _buffer_names(kernel: Kernel) -> list[str]:
    # accumulators' buffers too: the canonical printer numbers their sizes when it names them
    names = kernel.inputs + kernel.outputs + [r.name for r in kernel.reductions if r.name in kernel.buffers]
    return list(dict.fromkeys(names))


def _buffer_line(b: Buffer, w: ExprWriter) -> str:
    _check_name(b.name)
    lay = b.layout
    sizes = ", ".join(w.index(s) for s in lay.sizes)
    strides = ", ".join(w.index(s) for s in lay.strides)
    return (f"buffer {b.name} {b.kind.value} {b.dtype.name} [{sizes}] strides [{strides}] "
            f"offset {w.index(lay.offset)}")


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name.isidentifier() or name in _CONSTANT_WORDS:
        raise ValueError(f"name {name!r} cannot be written as kernel text: names must be identifiers "
                         f"other than {', '.join(sorted(_CONSTANT_WORDS))}")


def parse_kernel(text: str) -> Kernel:
    """The kernel ``kernel_text`` wrote, rebuilt and checked: names resolve, ranks and dtypes of
    loads and ops agree, accumulators are read only after their loop. ParseError (a ValueError)
    naming line, column and what was expected, for anything else."""
    return _KernelReader(text).kernel()


class _KernelReader(IRReader):
    def kernel(self) -> Kernel:
        self._keyword_line(HEADER)
        self.expect("name")
        name = self.name("the kernel's name")
        self.end_line()
        nodes = self._name_list("nodes")
        self.symbols = set(self._name_list("symbols"))
        self._check_symbols()
        pdomain, rdomain = self._domain("p"), self._domain("r")
        self.declare_loops("p", pdomain)
        self.declare_loops("r", rdomain)
        while self.at("buffer"):
            self._buffer()
        reductions: list[KReduction] = []
        stores: dict[str, list[KStore]] = {"store": [], "row": [], "col": []}
        lines: dict[int, Token] = {}
        while not self.at("end"):
            tok = self.peek()
            if self.accept("let"):
                self._let()
            elif self.accept("acc"):
                reductions.append(self._reduction())
                lines[id(reductions[-1])] = tok
            elif tok.text in stores and tok.kind == "name":
                self.next()
                stores[tok.text].append(self._store())
                lines[id(stores[tok.text][-1])] = tok
            else:
                raise self.error(f"expected 'buffer', 'let', 'acc', 'store', 'row', 'col' or 'end', found "
                                 f"{tok.describe()}")
        self.next()
        self.accept_newline()
        if self.peek().kind != "end":
            raise self.error(f"expected end of text after 'end', found {self.peek().describe()}")
        kernel = Kernel(name, pdomain, rdomain, reductions, stores["store"], stores["row"], nodes, self.buffers,
                        stores["col"])
        _KernelChecker(self, kernel, lines).check()
        return kernel

    def accept_newline(self) -> None:
        if self.peek().kind == "newline":
            self.next()

    def _keyword_line(self, words: str) -> None:
        for word in words.split():
            if self.peek().text != word:
                raise self.error(f"expected {words!r} (the first line of kernel text), found {self.peek().describe()}")
            self.next()
        self.end_line()

    def _name_list(self, keyword: str) -> list[str]:
        self.expect(keyword)
        names = []
        while self.peek().kind == "name":
            tok = self.next()
            if tok.text in names:
                raise self.error(f"{tok.text!r} is listed twice", tok)
            names.append(tok.text)
        self.end_line()
        return names

    def _check_symbols(self) -> None:
        for s in self.symbols:
            if is_loop_var_name(s) or s in ("indirect", "check", "wrap", "nowrap"):
                raise self.error(f"symbol name {s!r} is reserved (loop variables and index keywords)")

    def _domain(self, prefix: str) -> tuple[Index, ...]:
        self.expect(prefix, f"'{prefix} [sizes]'")
        sizes = self.shape()
        self.end_line()
        return sizes

    def _buffer(self) -> None:
        self.next()
        tok = self.peek()
        name = self.name("a buffer name")
        if name in self.buffers:
            raise self.error(f"buffer {name!r} is declared twice", tok)
        if name in _CONSTANT_WORDS:
            raise self.error(f"{name!r} cannot name a buffer", tok)
        kind_tok = self.expect_kind("name", "the buffer's kind (input, output or intermediate)")
        if kind_tok.text not in _KINDS:
            raise self.error(f"unknown buffer kind {kind_tok.text!r}; expected {', '.join(_KINDS)}", kind_tok)
        dtype = self.dtype()
        sizes = self.shape()
        self.expect("strides")
        strides_tok = self.peek()
        strides = self.shape()
        if len(strides) != len(sizes):
            raise self.error(f"{len(sizes)} sizes but {len(strides)} strides", strides_tok)
        self.expect("offset")
        offset = self.index(loops=False)
        self.end_line()
        self.buffers[name] = Buffer(name, dtype, Layout(sizes, strides, offset), _KINDS[kind_tok.text])

    def _let(self) -> None:
        tok = self.expect_kind("ref", f"${len(self.lets)}")
        if tok.text != f"${len(self.lets)}":
            raise self.error(f"expected ${len(self.lets)} (lets are numbered in order), found {tok.text}", tok)
        self.expect("=")
        self.lets.append(self.expr())
        self.end_line()

    def _reduction(self) -> KReduction:
        tok = self.peek()
        name = self.name("the accumulator's name")
        if name in _CONSTANT_WORDS:
            raise self.error(f"{name!r} cannot name an accumulator", tok)
        op_tok = self.expect_kind("name", "a reduction op")
        if op_tok.text not in _REDUCE_OPS:
            raise self.error(f"unknown reduction {op_tok.text!r}; expected one of {', '.join(_REDUCE_OPS)}", op_tok)
        dtype = self.dtype()
        across = self.accept("across")
        self.expect("level")
        level = self.natural("the accumulator's level (its loop phase)")
        self.expect("=")
        body = self.statement_expr()
        self.end_line()
        return KReduction(name, _REDUCE_OPS[op_tok.text], body, dtype, level, bool(across))

    def _store(self) -> KStore:
        self.expect("phase")
        phase = self.natural("the store's phase")
        tok = self.peek()
        name = self.name("the stored buffer's name")
        buf = self.buffers.get(name)
        if buf is None:
            raise self.error(f"store to undeclared buffer {name!r}; declare it on a 'buffer' line", tok)
        index = self.indices("[", "]")
        if len(index) != len(buf.sizes):
            raise self.error(f"buffer {name} has rank {len(buf.sizes)} but is stored with {len(index)} indices", tok)
        self.expect("=")
        value = self.statement_expr()
        self.end_line()
        return KStore(name, index, value, phase)


class _KernelChecker:
    """Checks what spans statements; errors point at the statement's line."""

    def __init__(self, reader: _KernelReader, kernel: Kernel, lines: dict[int, Token]):
        self.reader, self.kernel, self.lines = reader, kernel, lines
        self.accs = {}
        for r in kernel.reductions:
            if r.name in self.accs:
                raise self._error(r, f"accumulator {r.name!r} is defined twice")
            self.accs[r.name] = r
        self.rvars = {a for v in kernel.rvars() for a in v.atoms() if isinstance(a, Var)}
        self.pvars = {a for v in kernel.pvars() for a in v.atoms() if isinstance(a, Var)}

    def _error(self, statement, message: str) -> ParseError:
        tok = self.lines[id(statement)]
        return ParseError(message, tok.line, tok.column)

    def check(self) -> None:
        k = self.kernel
        for r in k.reductions:
            self._expression(r, r.body, before=r.level, what=f"accumulator {r.name} (level {r.level})")
        for s in k.elem_stores:
            self._expression(s, s.value, before=s.phase, what=f"the store to {s.buffer} in phase {s.phase}")
        for s in k.row_stores:
            self._expression(s, s.value, before=None, what=f"the row store to {s.buffer}")
            used = {a for i in s.index for a in i.atoms()} | _atoms_in(s.value)
            if used & self.rvars:
                raise self._error(s, f"the row store to {s.buffer} uses a reduced loop variable; "
                                        f"row stores run after the reduction loops")
        for r in k.across:
            if r.op.spec.joint is not None:
                raise self._error(r, f"accumulator {r.name}: a {r.op.value} cannot be reduced across rows")
            if not (k.pdomain and k.rdomain):
                raise self._error(r, f"accumulator {r.name} is reduced across rows, but the kernel has no rows "
                                     f"or no reduced dims")
        for s in k.col_stores:
            self._expression(s, s.value, before=None, what=f"the col store to {s.buffer}", across=True)
            used = {a for i in s.index for a in i.atoms()} | _atoms_in(s.value)
            if used & self.pvars:
                raise self._error(s, f"the col store to {s.buffer} uses a row loop variable; col stores "
                                     f"run after every row")

    def _expression(self, statement, root: Expr, before: int | None, what: str, across: bool = False) -> None:
        """Check ``root``: valid ops, and accumulators read where they are final (``across``: the
        statement runs after every row, and reads only reductions across rows)."""
        for node in walk(root):
            if isinstance(node, Apply):
                problem = apply_problem(node)
                if problem:
                    raise self._error(statement, f"{what}: {problem}")
            elif isinstance(node, AccRef):
                r = self.accs.get(node.name)
                if r is None:
                    raise self._error(statement, f"{what} reads acc({node.name}, {node.output}) but no "
                                                 f"'acc {node.name}' line defines it")
                if node.output >= r.op.num_outputs:
                    raise self._error(statement, f"{what} reads output {node.output} of {r.name}, a "
                                                 f"{r.op.value} with {r.op.num_outputs} output(s)")
                if r.across != across:
                    where = "only col stores read it" if r.across else "col stores read only reductions across rows"
                    raise self._error(statement, f"{what} reads {r.name}, {'' if r.across else 'not '}reduced "
                                                 f"across rows: {where}")
                if before is not None and r.level >= before:
                    raise self._error(statement, f"{what} reads {r.name} (level {r.level}) before its "
                                                 f"loop has finished")


def _atoms_in(root: Expr) -> set:
    """Every index atom the loads and index values of ``root`` use."""
    return {a for n in walk(root) if isinstance(n, (Load, IndexValue))
            for i in (n.index if isinstance(n, Load) else (n.index,)) for a in i.atoms()}
