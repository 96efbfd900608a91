"""A process that compiles generated Triton modules into Triton's on-disk cache (``prebuild.py``).

Run as a script (``python -P compile_worker.py``): it imports Triton only, not torch or loopnest,
so it starts in a fraction of a second. It reads one JSON request per line on stdin and answers
one JSON line per request: ``{"ok": true, "compiled": n, "cache_hits": m}`` or ``{"ok": false,
"error": "..."}``. A request names the module's file and module name (as the code cache loads
it, so Triton hashes the functions alike), the GPU target, Triton's cache directory and, per
launch, the function and the specialization the measuring process's JIT will ask for (Triton's
own ``serialize_specialization_data`` format). Each is compiled through ``JITFunction.preload``,
the JIT's own path, so the binary lands under the key the JIT looks up. No GPU is touched: the
driver is a stand-in that only names the target. The process ends when stdin closes.
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys

import triton
from triton.backends.compiler import GPUTarget

_MODULES: dict[tuple, object] = {}

# Compiles yield the cores to the processes that measure: several workers sharing a GPU compile
# while one of them times, and a measurement's launches must not wait behind a compiler.
COMPILE_NICENESS = 10


class TargetOnly:
    """What Triton's JIT asks of a driver to compile (target, device, stream), for a GPU target
    this process never launches on."""

    def __init__(self, target: GPUTarget):
        self.target = target

    def get_current_target(self) -> GPUTarget:
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0


def load(path: str, name: str, target: tuple):
    """The generated module at ``path``, imported as ``name`` with compiled (not interpreted)
    functions; one per target, since each function keeps its target from its first compile."""
    key = (path, name, target)
    if key not in _MODULES:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        with triton.knobs.runtime.scope():
            triton.knobs.runtime.interpret = False
            spec.loader.exec_module(module)
        _MODULES[key] = module
    return _MODULES[key]


def compile_request(request: dict) -> dict:
    """Compile every launch of ``request``; counts what was compiled and what Triton's cache had."""
    target = tuple(request["target"])
    triton.runtime.driver.set_active(TargetOnly(GPUTarget(*target)))
    triton.knobs.cache.dir = request["cache_dir"]
    module = load(request["path"], request["module"], target)
    hits: list[bool] = []
    triton.knobs.compilation.listener = lambda **event: hits.append(bool(event.get("cache_hit")))
    try:
        for launch in request["launches"]:
            getattr(module, launch["fn"]).preload(launch["specialization"])
    finally:
        triton.knobs.compilation.listener = None
    return {"ok": True, "compiled": hits.count(False), "cache_hits": hits.count(True)}


def main() -> None:
    """Answer requests until stdin closes. Replies go to the original stdout; anything printed
    while compiling goes to stderr."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is for the parent, which closes stdin
    os.nice(COMPILE_NICENESS)
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    for line in sys.stdin:
        try:
            reply = compile_request(json.loads(line))
        except Exception as exc:  # noqa: BLE001 - the parent records the candidate's compile error
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[-4000:]}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
