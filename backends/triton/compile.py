"""Load generated Triton modules from the code cache and build launchers for their programs.

``triton.jit`` reads a kernel's source from its file, so generated source is written to
``cache_dir()/triton/<hash[:2]>/<hash>.py`` (atomically; the same source always maps to the same
file) and imported from there. Triton compiles each function (when a graph's call plan warms its
launches up, or else on the first launch) and keeps its own binary cache.
"""
from __future__ import annotations

import hashlib
import importlib.util
import logging
from pathlib import Path
from types import ModuleType

import torch
import triton
from triton.runtime.jit import JITFunction

from ...core import settings
from ...core.counters import counters
from ...core.files import atomic_write
from ...ir.index import evaluate
from ..tensor_helpers import allocator
from .codegen import INDEX32_LIMIT, Program
from .launch import StaticLaunch, TritonLaunch, direct_launch

log = logging.getLogger("loopnest")

_MODULES: dict[tuple[str, bool], ModuleType] = {}


def source_key(source: str) -> str:
    """The code-cache key of a generated module."""
    return hashlib.sha256(source.encode()).hexdigest()


def module_path(source: str) -> Path:
    """Where the module generated as ``source`` lives in the code cache."""
    key = source_key(source)
    return settings.cache_dir("triton") / key[:2] / f"ln_{key[:32]}.py"


def module_name(path: Path) -> str:
    """The name the module at ``path`` is imported under (Triton hashes functions by it)."""
    return f"loopnest_triton_{path.stem}"


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
        atomic_write(path, source)
        counters["kernels_compiled"] += 1
    spec = importlib.util.spec_from_file_location(module_name(path), path)
    module = importlib.util.module_from_spec(spec)
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = interpret
        spec.loader.exec_module(module)
    _MODULES[key] = module
    return module


MAX_BOUND = 256  # symbol-value bindings kept per launcher (dynamic shapes)

# debug=True functions (index checks) keep their asserts, not Triton's int32 overflow checks. No
# contraction of a*b+c into one fused multiply-add: a row's passes must round alike, and a max
# over x * c next to an exp(x * c - max) that LLVM fused left the row's largest term at exp(the
# product's rounding error), beyond exp's range at |x * c| above ~2^31 (NaN rows on an H100,
# where eager's are finite). Explicit fmas (``tl.fma``) stay fused.
KERNEL_OPTIONS = {"sanitize_overflow": False, "enable_fp_fusion": False}


class Launcher:
    """Runs a program's launches. Argument order, constexprs and static grids are fixed once;
    ``bind`` fixes the symbol values too (grids, scalar arguments, workspace sizes), so a call
    only gathers tensors and launches."""

    def __init__(self, program: Program, module: ModuleType, dtypes: dict[str, torch.dtype]):
        self.program = program
        self.name = program.name
        self.module = module
        self.dtypes = {**dtypes, **{w.name: w.dtype for w in program.workspaces}}
        self.device_buffer = program.launches[0].args[0].name
        self._bound: dict[tuple, BoundLaunch] = {}

    def _index64(self, syms: dict) -> bool:
        if self.program.index64 is not None:
            return self.program.index64
        return any(evaluate(e, syms) >= INDEX32_LIMIT for e in self.program.extents)

    def _check_rows(self, syms: dict) -> None:
        limit = self.program.max_rnumel
        rnumel = evaluate(self.program.extents[1], syms)
        if limit is not None and rnumel > limit:
            raise RuntimeError(f"{self.name}: rows of {rnumel} elements exceed the "
                               f"persistent block of {limit}; use the looped strategy")

    def bind(self, syms: dict[str, int]) -> "BoundLaunch":
        """This program's launches for symbol values ``syms`` (made once per distinct values)."""
        key = tuple(sorted(syms.items()))
        bound = self._bound.get(key)
        if bound is None:
            self._check_rows(syms)
            if len(self._bound) >= MAX_BOUND:
                self._bound.clear()
            bound = self._bound[key] = BoundLaunch(self, syms)
        return bound

    def __call__(self, buffers: dict[str, torch.Tensor], syms: dict[str, int]) -> None:
        self.bind(syms)(buffers)


class BoundLaunch:
    """A program's launches with the symbol values fixed.

    On the GPU each launch keeps the kernels Triton compiled for it, keyed by device and by which
    tensor arguments are 16-byte aligned (what Triton specializes on, beside the scalar values
    fixed here), and launches them directly (``launch.direct_launch``): no argument binding, cache
    key or launch metadata per call. The first launch of a new key compiles or loads the kernel
    through ``JITFunction.warmup``."""

    def __init__(self, launcher: Launcher, syms: dict[str, int]):
        program = launcher.program
        self.name = program.name
        self.device_buffer = launcher.device_buffer
        index64 = launcher._index64(syms)
        self.workspaces = [(w.name, w.dtype, evaluate(w.numel, syms), w.zeroed) for w in program.workspaces]
        self.steps = []
        for launch in program.launches:
            programs = evaluate(launch.grid, syms)
            if programs <= 0:
                continue
            fn = getattr(launcher.module, launch.fn)
            args = [syms[a.name] if a.kind == "sym" else None for a in launch.args]
            tensors = [(k, a.kind == "workspace", a.name) for k, a in enumerate(launch.args) if a.kind != "sym"]
            tail = [value for _, value in launch.constexprs] + [index64]  # constexprs in parameter order
            options = {"num_warps": launch.num_warps, "num_stages": launch.num_stages, **KERNEL_OPTIONS}
            dtypes = [launcher.dtypes[a.name] for a in launch.args if a.kind != "sym"]
            self.steps.append(_Step(fn, programs, args, tensors, tail, options, dtypes))
        self.native = all(isinstance(step.fn, JITFunction) for step in self.steps)  # not interpreted
        # the positional form (``run``): the device buffer first, then every other buffer once
        self.names = tuple(dict.fromkeys([self.device_buffer] + [n for step in self.steps
                                                                  for _, ws, n in step.tensors if not ws]))
        position = {n: i for i, n in enumerate(self.names)}
        self._picks = [[(k, ws, n if ws else position[n]) for k, ws, n in step.tensors] for step in self.steps]

    def __call__(self, buffers: dict[str, torch.Tensor]) -> None:
        t = buffers[self.device_buffer]
        if not self.native:  # Triton's interpreter
            workspaces = {name: (torch.zeros if zeroed else torch.empty)(numel, dtype=dtype, device=t.device)
                          for name, dtype, numel, zeroed in self.workspaces}
            for step in self.steps:
                step.launch_jit(step.arguments(buffers, workspaces))
            return
        device = t.get_device()
        if device != _current_device():
            with torch.cuda.device(device):
                self._launch_cuda(buffers, device)
        else:
            self._launch_cuda(buffers, device)

    def run(self, *tensors: torch.Tensor) -> None:
        """The launches, with the buffers given in ``names`` order (``PositionalLaunch``'s form:
        no dict per call). A launch on another device than the current one, or interpreted, takes
        the path of ``__call__``."""
        device = tensors[0].get_device() if self.native else None
        if device is None or device != _current_device():
            self(dict(zip(self.names, tensors)))
            return
        workspaces = self._workspaces()
        stream = _current_stream(device)
        hooked = _launch_hooks_active()
        for step, picks in zip(self.steps, self._picks):
            args = list(step.template)
            for k, is_workspace, key in picks:
                args[k] = workspaces[key] if is_workspace else tensors[key]
            step.launch(args, device, stream, hooked)

    def _workspaces(self) -> dict:
        """This call's workspaces on the current device, through the allocator Inductor's code
        calls (zeroed where a kernel counts on it)."""
        if not self.workspaces:
            return _NO_WORKSPACES
        workspaces = {}
        for name, dtype, numel, zeroed in self.workspaces:
            w = workspaces[name] = _empty_cuda((numel,), (1,), dtype)
            if zeroed:
                w.zero_()
        return workspaces

    def _launch_cuda(self, buffers: dict, device: int) -> None:
        workspaces = self._workspaces()
        stream = _current_stream(device)
        hooked = _launch_hooks_active()
        for step in self.steps:
            step.launch(step.arguments(buffers, workspaces), device, stream, hooked)

    def warmup(self) -> None:
        """Compile every launch for the current device, assuming aligned tensors (the usual case;
        other alignments compile on their first launch)."""
        if not self.native or not torch.cuda.is_available():
            return
        device = torch.cuda.current_device()
        for step in self.steps:
            step.warmup(device)


class _Step:
    """One launch of one Triton function with fixed grid, scalars and constexprs."""

    def __init__(self, fn, programs: int, args: list, tensors: list, tail: list, options: dict,
                 dtypes: list[torch.dtype]):
        self.fn, self.programs, self.template, self.tensors, self.tail, self.options = \
            fn, programs, args, tensors, tail, options
        self.dtypes = dtypes  # of the tensor arguments, in order
        self.kernels: dict[tuple[int, int], object] = {}  # (device, alignment bits) -> direct launch

    def arguments(self, buffers: dict, workspaces: dict) -> list:
        args = list(self.template)
        for k, is_workspace, name in self.tensors:
            args[k] = workspaces[name] if is_workspace else buffers[name]
        return args

    def launch_jit(self, args: list):
        """Launch through Triton's ``JITFunction.run`` (compiles on a cache miss); its kernel."""
        return self.fn.run(*args, *self.tail, grid=(self.programs,), warmup=False, **self.options)

    def launch(self, args: list, device: int, stream: int, hooked: bool) -> None:
        if hooked:  # profilers hook JITFunction.run
            self.launch_jit(args)
            return
        aligned = 0
        for k, _, _ in self.tensors:
            aligned = aligned << 1 | (args[k].data_ptr() & 15 == 0)
        fast = self.kernels.get((device, aligned))
        if fast is None:
            fast = self.kernels[(device, aligned)] = self._load(args, device)
        positional = len(args)
        args.extend(self.tail)
        try:
            fast(self.programs, stream, args)
        except RuntimeError as e:
            if not isinstance(fast, StaticLaunch):
                raise
            # PyTorch's launcher refused the launch: Triton's own from now on, which checks its
            # arguments and says what is wrong (a CPU tensor given to a CUDA kernel came back
            # from PyTorch's as "CUDA driver error: invalid argument", from Triton's by name)
            log.debug("loopnest: %s goes through Triton's launcher: %s", self.fn.__name__, e)
            with torch.cuda.device(device):
                fast = self.kernels[(device, aligned)] = TritonLaunch(self.compiled(args[:positional]))
            fast(self.programs, stream, args)

    def warmup(self, device: int) -> None:
        """Compile and load the kernel for aligned tensors of the dtypes ``fn`` expects."""
        key = (device, (1 << len(self.tensors)) - 1)
        if key in self.kernels:
            return
        self.kernels[key] = self._load(self.warmup_args(), device)

    def warmup_args(self) -> list:
        """The arguments for aligned tensors: their dtypes, as Triton's warmup takes them."""
        args = list(self.template)
        for (k, _, _), dtype in zip(self.tensors, self.dtypes):
            args[k] = dtype
        return args

    def compiled(self, args: list):
        """Triton's compiled kernel for ``args`` (tensors or dtypes), from its in-memory or on-disk
        cache, or compiled now for the current device; not loaded."""
        return self.fn.warmup(*args, *self.tail, grid=(self.programs,), **self.options)

    def _load(self, args: list, device: int):
        """Compile (or find in Triton's cache) the kernel ``args`` specialize, loaded on ``device``."""
        with torch.cuda.device(device):  # warm-ups run in worker threads: compile for this device
            kernel = self.compiled(args)
        return direct_launch(kernel, device)


_NO_WORKSPACES: dict = {}

_empty_cuda = allocator("cuda")  # on the current CUDA device


# the current CUDA device; straight from C once CUDA is initialized (a tensor of the call lives there)
_current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what Inductor's code calls


def _current_stream(device: int) -> int:
    if _raw_stream is not None:
        return _raw_stream(device)
    return triton.runtime.driver.active.get_current_stream(device)


def _launch_hooks_active() -> bool:
    """True when something (a profiler such as proton) hooks Triton's launches: those launches go
    through ``JITFunction.run``, which feeds the hooks."""
    hook = triton.knobs.runtime.launch_enter_hook
    return hook is not None and bool(getattr(hook, "calls", True))


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
        options = {"num_warps": launch.num_warps, "num_stages": launch.num_stages, **KERNEL_OPTIONS}
        with triton.knobs.runtime.scope():  # the compiler, never the interpreter
            triton.knobs.runtime.interpret = False
            out.append(triton.compile(source, target=target, options=options))
    return out
