"""Generated kernels vectorize for AVX-512 too, not only for this machine's ISA: g++ compiles the
module for Sapphire Rapids (nothing runs) and reports the loops it vectorized."""
import re
import subprocess

import pytest

import loopnest as ln
from loopnest.backends.cpp import compile as cc
from loopnest.backends.cpp.backend import CppBackend
from loopnest.core import settings
from test_backends import kernels_of, softmax


@pytest.fixture(autouse=True)
def inline_vecmath(monkeypatch):
    """Sources that define the vecmath functions they call, as without the prebuilt object
    (``pch.vecmath_object``, tested in test_cpp_pch.py): these tests read the definitions, or
    build for another CPU."""
    monkeypatch.setattr(cc, "prebuilt_vecmath", lambda: False)


SPR_FLAGS = [f if f != "-march=native" else "-march=sapphirerapids" for f in cc.flags()]


def bf16_tanh_gelu(x, b):
    h = ln.cast(x, ln.float32) + ln.cast(b, ln.float32)
    return ln.cast(0.5 * h * (1.0 + ln.tanh(0.7978845608028654 * (h + 0.044715 * h * h * h))), ln.bfloat16)


def unvectorized_simd_loops(outputs, inputs, tmp_path) -> list[str]:
    """The ``omp simd`` loops of the generated kernels that g++ did not vectorize for AVX-512
    (it reports a vectorized loop at its pragma's line or one of the four after it: a loop
    over lane arrays binds its row index on the line after its header, ``row_lanes.py``, and
    one inside loops over other reduced dims first loads what those index)."""
    backend = CppBackend()
    source = backend.module_source([(k, backend.default_config(k)) for k in kernels_of(outputs, inputs)])
    path = tmp_path / "module.cpp"
    path.write_text(source)
    proc = subprocess.run([settings.current().cxx, *SPR_FLAGS, "-fopt-info-vec-optimized", str(path), "-o",
                           str(tmp_path / "module.so")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    done = {int(n) for n in re.findall(r"module\.cpp:(\d+):\d+: optimized: loop vectorized", proc.stderr)}
    lines = source.splitlines()
    first_kernel = next(n for n, line in enumerate(lines, 1) if line.startswith('extern "C" LN_VECTORS_'))
    simd = [n for n, line in enumerate(lines, 1) if n > first_kernel and "omp" in line and " simd" in line]
    assert simd, "the kernels have no omp simd loop"
    return [lines[n] for n in simd if not done & {n, n + 1, n + 2, n + 3, n + 4}]


@pytest.mark.parametrize("case", ["bf16_gelu", "bf16_silu", "softmax", "bf16_rmsnorm", "elu_tail", "entropy_sum"])
def test_kernels_vectorize_for_avx512(case, tmp_path):
    """Including math that only one arm of a select reads (an ELU's exp; the log of an entropy
    term, in a sum over two reduced dims after the row's softmax): g++ must not sink the call
    into a branch (``-fno-tree-sink``), in the blocks' rest loops too."""
    if case == "bf16_gelu":
        x, b = ln.placeholder("x", (64, 96), ln.bfloat16), ln.placeholder("b", (96,), ln.bfloat16)
        outputs, inputs = [bf16_tanh_gelu(x, b)], [x, b]
    elif case == "bf16_silu":  # a vecmath call and bf16 rounding in one loop
        x = ln.placeholder("x", (64, 96), ln.bfloat16)
        xf = ln.cast(x, ln.float32)
        outputs, inputs = [ln.cast(xf * ln.sigmoid(xf), ln.bfloat16)], [x]
    elif case == "softmax":
        x = ln.placeholder("x", (64, 96), ln.float32)
        outputs, inputs = [softmax(x)], [x]
    elif case == "bf16_rmsnorm":
        x = ln.placeholder("x", (64, 96), ln.bfloat16)
        xf = ln.cast(x, ln.float32)
        outputs, inputs = [ln.cast(xf * ln.rsqrt(ln.mean(xf * xf, -1, keepdim=True) + 1e-6), ln.bfloat16)], [x]
    elif case == "elu_tail":  # 91 elements: five blocks of 16, then a rest loop calling exp
        x = ln.placeholder("x", (7, 13), ln.float32)
        outputs, inputs = [ln.where(x > 0, x, ln.exp(x * 1.5) - 1.0)], [x]
    else:
        x = ln.placeholder("x", (64, 100), ln.float32)
        p = softmax(x)
        outputs, inputs = [ln.sum(ln.where(p == 0, 0.0, p * ln.log(p)))], [x]
    assert unvectorized_simd_loops(outputs, inputs, tmp_path) == []


@pytest.mark.parametrize("width, variant", [(512, "_ZGVeN16v_ln_expf"), (256, "_ZGVdN8v_ln_expf")])
def test_vector_width_picks_the_vector_math_of_its_lanes(width, variant, tmp_path):
    """GCC prefers 256-bit vectors on AVX-512 Xeons under -march; a kernel's ``vector_width``
    decides, and its loops call the vector math variant of that many lanes."""
    from loopnest.backends.cpp.params import CppConfig

    x = ln.placeholder("x", (64, 96), ln.float32)
    backend = CppBackend()
    source = backend.module_source([(k, CppConfig(vector_width=width)) for k in kernels_of([softmax(x)], [x])])
    path = tmp_path / "module.cpp"
    path.write_text(source)
    proc = subprocess.run([settings.current().cxx, *[f for f in SPR_FLAGS if f not in ("-shared", "-lmvec")], "-S",
                           str(path), "-o", str(tmp_path / "module.s")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    asm = (tmp_path / "module.s").read_text()
    calls = set(re.findall(r"call\s+(_ZGV\w+_ln_expf)", asm))
    assert calls <= {variant}, calls  # loops over whole blocks run the math inline (vector_blocks.py)
    kernels = "".join(body for _, body in re.findall(r"\n(k_[\w.]+):\n(.*?)\.size\s+\1,", asm, re.S))
    assert kernels and ("%zmm" in kernels) == (width == 512)  # the blocks' math at the kernel's width
