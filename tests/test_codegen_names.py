"""User names never reach generated code raw: any placeholder, size or graph name compiles.

Names like the generators' own temporaries, a placeholder named like a size, C/C++ and Python
keywords, libm and module names, and Python identifiers that are no C identifiers (``é``) must
all work on both backends (Triton in its interpreter) and give eager's results; graph names may
be any string. (Placeholder and size names must be Python identifiers: ``ln.placeholder`` says so.)
"""
from __future__ import annotations

import pytest
import torch

import loopnest as ln
from loopnest.backends.names import BUFFER, SYMBOL, escape, mangle
from conftest import INTERPRETER_USABLE, assert_close

HOSTILE = ["int", "float", "args", "syms", "ln_err", "expf", "main", "std", "t1", "acc0", "ix2", "p0", "r0",
           "i0", "lambda", "def", "tl", "triton", "pid", "xindex", "rindex", "IDX64", "XBLOCK", "b_x", "s_N",
           "k_main", "é", "名前", "__", "_", "N"]


def _backends():
    return ["cpp"] + (["triton"] if INTERPRETER_USABLE else [])


def test_escape_is_one_to_one_and_spells_identifiers():
    names = HOSTILE + ["a_b", "a__b", "a_5f_b", "a.b", "a_2e_b", "", "_2e_", "x-1", "1st", "a b"]
    mangled = {mangle(BUFFER, n) for n in names} | {mangle(SYMBOL, n) for n in names}
    assert len(mangled) == 2 * len(names)
    for m in mangled:
        assert m.isidentifier() and m.isascii(), m
    assert escape("a.b") != escape("a_b") != escape("a__b")


@pytest.mark.parametrize("backend", _backends())
def test_hostile_placeholder_names_compile_and_match_eager(backend):
    """Every hostile name at once, sharing a size named ``N`` with a placeholder named ``N``."""
    gen = torch.Generator().manual_seed(0)
    xs = [ln.placeholder(name, ("N", 8), ln.float32) for name in HOSTILE[:-1]]
    n_tensor = ln.placeholder("N", (8,), ln.float32)
    total = xs[0]
    for k, x in enumerate(xs[1:]):
        total = total + x * float(k + 2)
    outs = [ln.exp(total / 100) + n_tensor, ln.sum(total, 1)]
    f = ln.compile(outs, backend=backend, name="int main(void) {")
    args = [torch.randn(3, 8, generator=gen) for _ in xs] + [torch.randn(8, generator=gen)]
    want_total = args[0] + sum(a * float(k + 2) for k, a in enumerate(args[1:-1]))
    got = f(*args)
    assert_close(got[0], torch.exp(want_total / 100) + args[-1])
    assert_close(got[1], want_total.sum(1), "sum")


@pytest.mark.parametrize("backend", _backends())
def test_size_symbols_with_hostile_names(backend):
    """Sizes named like keywords, temporaries and buffers; a gather through one of them."""
    x = ln.placeholder("float", ("int", "args"), ln.float32)
    t = ln.placeholder("t1", ("int", 2), ln.int64)
    outs = [ln.gather(x, 1, t) * 2, ln.max(x, 1)]
    f = ln.compile(outs, backend=backend, name="std")
    a = torch.randn(5, 7)
    i = torch.randint(0, 7, (5, 2))
    got = f(a, i)
    assert_close(got[0], a.gather(1, i) * 2)
    assert_close(got[1], a.amax(1))
