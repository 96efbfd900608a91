"""The on-disk code cache: a cached library is loaded only while it matches the checksum stored
beside it; anything else (truncated, emptied, overwritten, patched, swapped) is rebuilt."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


CHECK_SOFTMAX = """
import torch, loopnest as ln
x = ln.placeholder("x", (8, 100), ln.float32)
e = ln.exp(x - ln.max(x, axis=1, keepdim=True))
f = ln.compile(e / ln.sum(e, axis=1, keepdim=True), name="cached_softmax")
a = torch.randn(8, 100)
torch.testing.assert_close(f(a), torch.softmax(a, -1))
print("ok", ln.counters["kernels_compiled"])
"""


def _corruptions(path, other):
    data = path.read_bytes()
    return {
        "truncated": data[: len(data) // 2],
        "empty": b"",
        "random bytes": bytes(range(256)) * 64,
        "patched code": data[:4096] + bytes(b ^ 0xFF for b in data[4096:4160]) + data[4160:],
        "another library": other.read_bytes(),
    }


@pytest.mark.parametrize("how", ["truncated", "empty", "random bytes", "patched code", "another library"])
def test_a_corrupt_cached_library_is_rebuilt_never_loaded(tmp_path, how):
    env = {**os.environ, "LOOPNEST_CACHE_DIR": str(tmp_path)}
    run = lambda: subprocess.run([sys.executable, "-c", CHECK_SOFTMAX], env=env, capture_output=True,  # noqa: E731
                                 text=True, timeout=300)
    first = run()
    assert first.returncode == 0 and first.stdout.split() == ["ok", "1"], first.stderr[-2000:]
    (lib,) = (tmp_path / "cpp").rglob("*.so")
    other = tmp_path / "other.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-x", "c++", "-", "-o", str(other)], input="extern \"C\" void f() {}",
                   text=True, check=True)
    lib.write_bytes(_corruptions(lib, other)[how])
    second = run()
    assert second.returncode == 0, f"died with {second.returncode}: {second.stderr[-2000:]}"
    assert second.stdout.split() == ["ok", "1"] and "does not match its checksum" in second.stderr
    assert run().stdout.split() == ["ok", "0"]  # rebuilt once, then a cache hit again
