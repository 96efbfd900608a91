"""Integer division at the minimum value: ``INT_MIN // -1`` and ``INT_MIN % -1`` trap on x86
(SIGFPE) if computed naively; eager returns INT_MIN and 0. Run in a subprocess, so a crash fails
the test instead of killing the run."""
from __future__ import annotations

import subprocess
import sys

import pytest

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
    import loopnest as ln

    x = ln.placeholder("x", (2,), ln.int32)
    with pytest.raises(OverflowError, match="int too big to convert"):
        ln.compile(x + 2**70)
