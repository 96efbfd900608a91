"""Integer division at the minimum value: ``INT_MIN // -1`` and ``INT_MIN % -1`` trap on x86
(SIGFPE) if computed naively; eager returns INT_MIN and 0. Run in a subprocess, so a crash fails
the test instead of killing the run."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import loopnest as ln
from conftest import INTERPRETER_USABLE

SCRIPT = """
import sys, torch, loopnest as ln
from loopnest.dsl.functions import apply
from loopnest.ir.ops import Op
dtype = getattr(torch, sys.argv[1])
lo = torch.iinfo(dtype).min
a = torch.tensor([lo, lo, 7, -7, lo + 1], dtype=dtype)
b = torch.tensor([-1, 1, -1, 2, -1], dtype=dtype)
x = ln.placeholder("x", (5,), getattr(ln, sys.argv[1]))
y = ln.placeholder("y", (5,), x.dtype)
floor, mod = ln.compile([apply(Op.FLOORDIV, x, y), apply(Op.MOD, x, y)])(a, b)
assert torch.equal(floor, torch.floor_divide(a, b)), (floor, torch.floor_divide(a, b))
assert torch.equal(mod, torch.remainder(a, b)), (mod, torch.remainder(a, b))
f = torch.compile(lambda a, b: (a // b, a % b, torch.fmod(a, b)), backend="loopnest", options={"backend": "cpp"})
for got, want in zip(f(a, b), (a // b, a % b, torch.fmod(a, b))):
    assert torch.equal(got, want), (got, want)
print("ok")
"""


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_minimum_divided_by_minus_one_matches_eager(dtype):
    out = subprocess.run([sys.executable, "-c", SCRIPT, dtype], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.returncode, out.stderr[-2000:])


def test_a_scalar_beyond_64_bits_is_an_overflow_error_as_in_eager():
    x = ln.placeholder("x", (2,), ln.int32)
    with pytest.raises(OverflowError, match="int too big to convert"):
        ln.compile(x + 2**70)


ZERO_SCRIPT = """
import sys, torch, loopnest as ln
from loopnest.dsl.functions import apply
from loopnest.ir.ops import Op
dtype = getattr(torch, sys.argv[1])
a = torch.tensor([7, -7, 3, 5], dtype=dtype)
b = torch.tensor([2, -3, 0, 3], dtype=dtype)
x = ln.placeholder("x", (4,), getattr(ln, sys.argv[1]))
y = ln.placeholder("y", (4,), x.dtype)
eager = {"FLOORDIV": torch.floor_divide, "MOD": torch.remainder, "FMOD": torch.fmod}
for name, fn in eager.items():
    f = ln.compile(apply(getattr(Op, name), x, y))
    assert torch.equal(f(a, b.abs() + 1), fn(a, b.abs() + 1))
    compiled = torch.compile(lambda a, b: fn(a, b) + 1, backend="loopnest", options={"backend": "cpp"})
    for run in (lambda: f(a, b), lambda: compiled(a, b)):
        try:
            run()
            print(name, "no error")
        except RuntimeError as e:
            print(name, str(e).splitlines()[0])
"""


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_division_by_zero_raises_on_cpu_like_eager(dtype):
    """Eager raises ``RuntimeError: ZeroDivisionError`` for //, % and fmod by 0 on the CPU."""
    out = subprocess.run([sys.executable, "-c", ZERO_SCRIPT, dtype], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 6, lines
    for line, op in zip(lines, ["FLOORDIV"] * 2 + ["MOD"] * 2 + ["FMOD"] * 2):
        words = {"FLOORDIV": "floor_divide (//)", "MOD": "remainder (%)", "FMOD": "fmod"}[op]
        assert line.startswith(f"{op} ZeroDivisionError: integer {words} by zero"), line


@pytest.mark.skipif(not INTERPRETER_USABLE, reason="Triton's interpreter needs numpy < 2.3")
def test_integer_division_by_zero_does_not_crash_triton():
    """On CUDA eager does not raise and the value is unspecified: any value, no crash."""
    from loopnest.dsl.functions import apply
    from loopnest.ir.ops import Op

    x = ln.placeholder("x", (4,), ln.int32)
    y = ln.placeholder("y", (4,), ln.int32)
    a, b = torch.tensor([7, -7, 3, 5], dtype=torch.int32), torch.tensor([2, -3, 0, 3], dtype=torch.int32)
    for op, fn in ((Op.FLOORDIV, torch.floor_divide), (Op.MOD, torch.remainder), (Op.FMOD, torch.fmod)):
        got = ln.compile(apply(op, x, y), backend="triton")(a, b)
        keep = b != 0
        assert torch.equal(got[keep], fn(a[keep], b[keep]))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_signed_overflow_wraps_as_in_eager(dtype):
    """Signed overflow is undefined in C++: g++ used it to fold ``(x * y) // y`` to ``x`` (found by
    the fuzz test: INT_MIN * 9 // 9 gave INT_MIN where eager gives -238609295). Kernels are built
    with -fwrapv, so products, sums and their reductions wrap as eager's do."""
    lo, hi = torch.iinfo(dtype).min, torch.iinfo(dtype).max
    x = torch.tensor([[lo, hi, -23, 7], [hi, hi, lo, lo]], dtype=dtype)
    y = torch.tensor([9, 3, -37, 2], dtype=dtype)

    def f(x, y):
        return ((x * y) // y).abs(), (x + y) - y, (x * y).sum(0, dtype=dtype), x.sum(1, dtype=dtype) * 3

    compiled = torch.compile(f, backend="loopnest", options={"backend": "cpp", "tune": "off"})
    for got, want in zip(compiled(x, y), f(x, y)):
        assert torch.equal(got, want), (got, want)
