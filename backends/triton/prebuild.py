"""Compiling a candidate's Triton kernels ahead of its measurement, in worker processes.

The measuring process compiles a kernel when a launch first needs it (``compile._Step``), through
``JITFunction.warmup``, which looks the kernel up in Triton's on-disk cache first. A prebuild
compiles the same kernels into that cache from a worker process (``workers.py``), so the
measuring process only loads them. For the cache key to match, the specialization is worked out
here exactly as the JIT works it out for the launch (its binder, ``_pack_args`` and cache key,
for aligned tensors: what ``_Step.warmup`` asks for), serialized in Triton's own format and
compiled by the worker through ``JITFunction.preload``, with the same module file and name, GPU
target and cache directory. What this process already prebuilt is not sent again; what another
process compiled is a cache hit in the worker.

Only static kernels are prebuilt: the scalar arguments of a kernel with symbolic sizes are known
at the call, and Triton specializes on them.
"""
from __future__ import annotations

import hashlib
import threading
from types import ModuleType

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import make_backend
from triton.runtime.jit import (MockTensor, compute_cache_key, create_function_from_signature, get_full_name,
                                serialize_specialization_data)

from .codegen import Program
from .compile import Launcher, module_name, module_path
from .workers import pool

_DONE: set[str] = set()  # requests prebuilt by this process
_DONE_LOCK = threading.Lock()


def specialization(step, target: GPUTarget) -> str:
    """What the JIT will compile for ``step`` (a ``compile._Step``) with aligned tensors on
    ``target``, in Triton's ``serialize_specialization_data`` format (``JITFunction.run`` up to
    its compile, for ``_Step.warmup``'s arguments)."""
    fn = step.fn
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = dict(step.options)
    kwargs["debug"] = kwargs.get("debug", fn.debug) or triton.knobs.runtime.debug
    kwargs["instrumentation_mode"] = triton.knobs.compilation.instrumentation_mode
    args = [MockTensor.wrap_dtype(a) for a in step.warmup_args()] + list(step.tail)
    bound, specialized, options = binder(*args, **kwargs)
    key = compute_cache_key({}, specialized, options)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialized, options)
    return serialize_specialization_data(get_full_name(fn), signature, constexprs, attrs, options, key)


def request(program: Program, module: ModuleType, dtypes: dict[str, torch.dtype], target: GPUTarget) -> dict:
    """The worker request compiling every launch of ``program`` (static sizes) for ``target``."""
    bound = Launcher(program, module, dtypes).bind({})
    path = module_path(program.source)
    return {"path": str(path), "module": module_name(path), "cache_dir": triton.knobs.cache.dir,
            "target": [target.backend, target.arch, target.warp_size],
            "launches": [{"fn": step.fn.__name__, "specialization": specialization(step, target)}
                         for step in bound.steps]}


def prebuild(program: Program, module: ModuleType, dtypes: dict[str, torch.dtype], target: GPUTarget,
             timeout: float | None, cancel: threading.Event | None = None) -> dict | None:
    """Compile ``program``'s kernels into Triton's cache in a worker; the worker's counts, or None
    when this process prebuilt the same request before. Raises RuntimeError with the compiler's
    message, or TimeoutError (past ``timeout`` or once ``cancel`` is set)."""
    req = request(program, module, dtypes, target)
    digest = hashlib.sha256(repr(sorted(req.items())).encode()).hexdigest()
    with _DONE_LOCK:
        if digest in _DONE:
            return None
    reply = pool().run(req, timeout, cancel)
    if not reply.get("ok"):
        raise RuntimeError(reply.get("error", "the Triton compile worker failed"))
    with _DONE_LOCK:
        _DONE.add(digest)
    return reply
