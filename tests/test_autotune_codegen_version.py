"""Generated code is pinned together with CODEGEN_VERSION, so stored winners go stale when it changes.

The tuning DB serves a winner as measured only while ``software["codegen_version"]`` matches. A
change to generated code that forgets to bump ``CODEGEN_VERSION`` would silently serve configs
measured on other code; this test catches it by hashing the default-config source of a few
reference kernels per backend.
"""
from __future__ import annotations

import hashlib

import pytest
import torch

import loopnest as ln
from loopnest.backends.codegen_version import CODEGEN_VERSION
from loopnest.backends.registry import get_backend
from loopnest.backends.cpp.ops import PRELUDE, simd_declarations
from loopnest.backends.triton import settings as triton_settings
from loopnest.backends.triton.mathlib import all_helpers_source
from loopnest.scheduler import schedule

# CODEGEN_VERSION -> backend -> reference kernel -> sha256[:16] of its default-config source.
PINNED = {
    1: {
        "cpp": {"softmax": "d9041da8c476dc3c", "layernorm": "50dbcdeb5dbe5737",
                "pointwise": "6cb9c6d46c3da2db"},
        "triton": {"softmax": "0c73703214567e57", "layernorm": "13c95f733940791d",
                   "pointwise": "945fb920c78518f0"},
    },
    2: {  # C++: hoisted reciprocals; Triton: rows reduced with tl.reduce
        "cpp": {"softmax": "e8a8dc6211d91e87", "layernorm": "50dbcdeb5dbe5737",
                "pointwise": "6cb9c6d46c3da2db"},
        "triton": {"softmax": "2b2f03ec14a8061d", "layernorm": "498151bb82a90593",
                   "pointwise": "945fb920c78518f0"},
    },
    3: {  # sign(NaN) = 0 like torch.sign; the prelude and helper functions are pinned too
        "cpp": {"softmax": "e7306f197843ccc6", "layernorm": "40c24cf782a8e611",
                "pointwise": "e6c47b54c22be60f"},
        "triton": {"softmax": "d92c7cfc0fd739d4", "layernorm": "b8d86495ec34c1d6",
                   "pointwise": "830acab5460761a6"},
    },
    4: {  # C++: small kernels stay on one thread (an omp `if` clause)
        "cpp": {"softmax": "435af541b2fb55a7", "layernorm": "be232e5c0d8bc8e2",
                "pointwise": "9c0f1bc38f0279b7"},
        "triton": {"softmax": "d92c7cfc0fd739d4", "layernorm": "b8d86495ec34c1d6",
                   "pointwise": "830acab5460761a6"},
    },
    5: {  # Triton: bfloat16 pointwise kernels use tanh.approx.f32 (the float32 references are unchanged)
        "cpp": {"softmax": "435af541b2fb55a7", "layernorm": "be232e5c0d8bc8e2",
                "pointwise": "9c0f1bc38f0279b7"},
        "triton": {"softmax": "d92c7cfc0fd739d4", "layernorm": "b8d86495ec34c1d6",
                   "pointwise": "830acab5460761a6"},
    },
    6: {  # C++: the NaN flag of max/min is an int reduced with | (a bool with || did not vectorize)
        "cpp": {"softmax": "c6747d8b94f9ae28", "layernorm": "be232e5c0d8bc8e2",
                "pointwise": "9c0f1bc38f0279b7"},
        "triton": {"softmax": "d92c7cfc0fd739d4", "layernorm": "b8d86495ec34c1d6",
                   "pointwise": "830acab5460761a6"},
    },
    7: {  # C++: bfloat16 rounding tests NaN with a float compare; casts to an operand's own dtype fold
        "cpp": {"softmax": "e305a9f2ec224d97", "layernorm": "5ff042baa020565d",
                "pointwise": "f77297292d79ba9b"},
        "triton": {"softmax": "d92c7cfc0fd739d4", "layernorm": "b8d86495ec34c1d6",
                   "pointwise": "830acab5460761a6"},
    },
}


# Code every generated module may include besides its kernels: the C++ prelude and the Triton
# helper functions (pinned from version 3 on).
SHARED_SOURCE = {"cpp": lambda: PRELUDE + simd_declarations(), "triton": all_helpers_source}


def reference_graphs() -> dict:
    """DSL softmax, layernorm and a pointwise chain, as IR graphs for (4, 1024) inputs."""
    x = ln.placeholder("x", ("N", 1024), ln.float32)
    w = ln.placeholder("w", (1024,), ln.float32)
    b = ln.placeholder("b", (1024,), ln.float32)
    e = ln.exp(x - ln.max(x, axis=-1, keepdim=True))
    softmax = ln.compile(e / e.sum(axis=-1, keepdim=True))
    var, mean = ln.var_mean(x, axis=-1, correction=0, keepdim=True)
    layernorm = ln.compile((x - mean) * ln.rsqrt(var + 1e-5) * w + b)
    pointwise = ln.compile(ln.tanh(x * 2.0 + b))
    X, W, B = torch.randn(4, 1024), torch.randn(1024), torch.randn(1024)
    return {"softmax": softmax.graph(X), "layernorm": layernorm.graph(X, W, B),
            "pointwise": pointwise.graph(X, B)}


def source_hashes(backend: str) -> dict[str, str]:
    """sha256[:16] of each reference graph's generated source under default configs."""
    be = get_backend(backend)
    out = {}
    with triton_settings.scope(interpret=False, debug=False):  # the GPU source, not the interpreter's
        for name, graph in reference_graphs().items():
            kernels = schedule(graph, name).kernels
            source = SHARED_SOURCE[backend]() + "\n".join(be.codegen(k, be.default_config(k)) for k in kernels)
            out[name] = hashlib.sha256(source.encode()).hexdigest()[:16]
    return out


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_generated_code_is_pinned_with_codegen_version(backend):
    got = source_hashes(backend)
    pinned = PINNED.get(CODEGEN_VERSION, {}).get(backend)
    assert pinned is not None, (
        f"CODEGEN_VERSION is {CODEGEN_VERSION} but tests/test_autotune_codegen_version.py pins no "
        f"hashes for it: add PINNED[{CODEGEN_VERSION}][{backend!r}] = {got!r}")
    changed = {k: (pinned[k], v) for k, v in got.items() if pinned.get(k) != v}
    assert not changed, (
        f"generated {backend} code changed for {sorted(changed)} (pinned, now: {changed}) while "
        f"CODEGEN_VERSION is still {CODEGEN_VERSION}. Tuned winners measured on the old code would "
        f"be served as exact. Bump CODEGEN_VERSION in backends/codegen_version.py to "
        f"{CODEGEN_VERSION + 1} and add PINNED[{CODEGEN_VERSION + 1}] with the new hashes "
        f"(keep the old entry); if the change is not meant to alter code, fix the codegen instead.")
