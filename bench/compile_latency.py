"""Compile latency of the DSL softmax on the C++ backend.

Reports (1) IR construction + verification + scheduling + codegen, excluding g++, and (2) a fresh
process loading the already-built kernel from the disk cache, timed after its imports.
Run: python bench/compile_latency.py
"""
import os
import statistics
import subprocess
import sys
import tempfile

import loopnest as ln
from loopnest.backends.cpp.backend import CppBackend
from loopnest.dsl.build import GraphBuilder
from loopnest.ir.nodes import Layout
from loopnest.ir.verify import verify
from loopnest.scheduler import schedule

from common import median_ms

FRESH = """
import time, torch, loopnest as ln
t0 = time.perf_counter()
x = ln.placeholder("x", ("N", 1024), ln.float32)
e = ln.exp(x - ln.max(x, 1, keepdim=True))
f = ln.compile(e / ln.sum(e, 1, keepdim=True), name="softmax")
y = f(torch.randn(64, 1024))
dt = time.perf_counter() - t0
assert ln.counters["kernels_compiled"] == 0 and ln.counters["code_cache_hits"] == 1, dict(ln.counters)
print(dt)
"""


def softmax_source() -> str:
    x = ln.placeholder("x", ("N", 1024), ln.float32)
    e = ln.exp(x - ln.max(x, 1, keepdim=True))
    y = e / ln.sum(e, 1, keepdim=True)
    graph = GraphBuilder({"x": Layout.contiguous(x.shape)}).build([x], [y])
    verify(graph)
    be = CppBackend()
    kernels = schedule(graph, "softmax").kernels
    return be.module_source([(k, be.default_config(k)) for k in kernels])


def main():
    print(f"IR + schedule + codegen (no g++), DSL softmax: median {median_ms(softmax_source, 50):.2f} ms")
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "LOOPNEST_CACHE_DIR": cache}
        subprocess.run([sys.executable, "-c", FRESH.replace("== 0 and", ">= 0 and").replace("== 1", ">= 0")],
                       env=env, check=True, capture_output=True)
        warm = [float(subprocess.run([sys.executable, "-c", FRESH], env=env, check=True, capture_output=True,
                                     text=True).stdout) for _ in range(5)]
    print(f"fresh process, kernel from disk cache (after imports, incl. first call): "
          f"median {statistics.median(warm) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
