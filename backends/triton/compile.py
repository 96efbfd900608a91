"""Load generated Triton modules from the code cache and build launchers for their programs.

``triton.jit`` reads a kernel's source from its file, so generated source is written to
``cache_dir()/triton/<hash[:2]>/<hash>.py`` (atomically; the same source always maps to the same
file) and imported from there. Triton itself compiles each function on its first launch and
keeps its own binary cache.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch
import triton

from ... import settings
from ...counters import counters
from ...ir.index import Index
from ..emitter import IndexPrinter
from .codegen import INDEX32_LIMIT, Program

_MODULES: dict[tuple[str, bool], ModuleType] = {}


def source_key(source: str) -> str:
    """The code-cache key of a generated module."""
    return hashlib.sha256(source.encode()).hexdigest()


def module_path(source: str) -> Path:
    """Where the module generated as ``source`` lives in the code cache."""
    key = source_key(source)
    return settings.cache_dir() / "triton" / key[:2] / f"ln_{key[:32]}.py"


def _atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_module(source: str, interpret: bool) -> ModuleType:
    """Import ``source`` from the code cache (written there first if new).

    ``interpret`` decides whether ``triton.jit`` makes interpreter functions or compiled ones.
    """
    key = (source_key(source), interpret)
    module = _MODULES.get(key)
    if module is not None:
        counters["code_cache_hits"] += 1
        return module
    path = module_path(source)
    if path.exists() and path.read_text() == source:
        counters["code_cache_hits"] += 1
    else:
        _atomic_write_text(path, source)
        counters["kernels_compiled"] += 1
    spec = importlib.util.spec_from_file_location(f"loopnest_triton_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = interpret
        spec.loader.exec_module(module)
    _MODULES[key] = module
    return module


def index_function(e: Index) -> Callable[[dict], int]:
    """A Python function computing ``e`` from a dict of symbol values."""
    value = e.as_int()
    if value is not None:
        return lambda _syms: value
    text = IndexPrinter(lambda a: f"_s[{a.name!r}]", div="//", mod="%")(e)
    return eval(f"lambda _s: {text}")  # noqa: S307 - text is printed from an index expression


_SOURCES = {"buffer": 0, "sym": 1, "workspace": 2}


class Launcher:
    """Runs a program's launches. Argument order, constexprs and static grids are fixed once;
    per call only tensors, symbol values (and the grids and workspaces they size) change."""

    def __init__(self, program: Program, module: ModuleType):
        self.program = program
        self.name = program.name
        self.steps = []
        for launch in program.launches:
            fn = getattr(module, launch.fn)
            grid = launch.grid.as_int()
            self.steps.append((
                fn[(grid,)] if grid is not None else fn,
                None if grid is not None else index_function(launch.grid),
                grid != 0,
                [(_SOURCES[a.kind], a.name) for a in launch.args],
                tuple(value for _, value in launch.constexprs),  # positional, in parameter order
                {"num_warps": launch.num_warps, "num_stages": launch.num_stages},
            ))
        self.workspaces = [(w.name, w.dtype, index_function(w.numel)) for w in program.workspaces]
        self.extents = [index_function(e) for e in program.extents]
        self.rnumel = index_function(program.extents[1])
        self.device_buffer = program.launches[0].args[0].name

    def _index64(self, syms: dict) -> bool:
        if self.program.index64 is not None:
            return self.program.index64
        return any(extent(syms) >= INDEX32_LIMIT for extent in self.extents)

    def _check_rows(self, syms: dict) -> None:
        limit = self.program.max_rnumel
        if limit is not None and self.rnumel(syms) > limit:
            raise RuntimeError(f"{self.name}: rows of {self.rnumel(syms)} elements exceed the "
                               f"persistent block of {limit}; use the looped strategy")

    def __call__(self, buffers: dict[str, torch.Tensor], syms: dict[str, int]) -> None:
        self._check_rows(syms)
        device = buffers[self.device_buffer].device
        workspaces = {name: torch.empty(numel(syms), dtype=dtype, device=device)
                      for name, dtype, numel in self.workspaces}
        if device.type == "cuda" and device.index is not None and device.index != torch.cuda.current_device():
            with torch.cuda.device(device):
                self._launch((buffers, syms, workspaces), self._index64(syms))
        else:
            self._launch((buffers, syms, workspaces), self._index64(syms))

    def _launch(self, sources: tuple, index64: bool) -> None:
        syms = sources[1]
        for run, grid, nonempty, args, constexprs, options in self.steps:
            if grid is not None:
                programs = grid(syms)
                if programs <= 0:
                    continue
                run = run[(programs,)]
            elif not nonempty:
                continue
            run(*[sources[k][name] for k, name in args], *constexprs, index64, **options)


_SIGNATURE_TYPES = {
    torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp64",
    torch.int8: "i8", torch.int16: "i16", torch.int32: "i32", torch.int64: "i64", torch.uint8: "u8",
    torch.bool: "i1",
}


def compile_ahead(program: Program, module: ModuleType, dtypes: dict[str, torch.dtype],
                  target=None, index64: bool = False) -> list:
    """Compile every function of ``program`` for a GPU ``target`` without running it.

    ``dtypes`` gives each buffer's torch dtype; ``module`` must have been loaded with
    ``interpret=False``. Checks generated GPU code on machines without a GPU (default target:
    sm_90, an H100/H200). Returns Triton's compiled kernels (``.asm`` holds ttir/ptx/cubin).
    """
    target = target or triton.backends.compiler.GPUTarget("cuda", 90, 32)
    ws_dtypes = {w.name: w.dtype for w in program.workspaces}
    out = []
    for launch in program.launches:
        fn = getattr(module, launch.fn)
        signature, constexprs = {}, dict(launch.constexprs, IDX64=index64)
        for arg, param in zip(launch.args, fn.arg_names):
            if arg.kind == "sym":
                signature[param] = "i64" if index64 else "i32"
            else:
                dtype = dtypes[arg.name] if arg.kind == "buffer" else ws_dtypes[arg.name]
                signature[param] = "*" + _SIGNATURE_TYPES[dtype]
        signature.update({name: "constexpr" for name in constexprs})
        source = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs)
        options = {"num_warps": launch.num_warps, "num_stages": launch.num_stages}
        with triton.knobs.runtime.scope():  # the compiler, never the interpreter
            triton.knobs.runtime.interpret = False
            out.append(triton.compile(source, target=target, options=options))
    return out
