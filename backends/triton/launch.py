"""Direct launches of compiled Triton kernels, without Triton's per-call Python path.

Triton launches a kernel through a C launcher that it generates for each argument signature and
builds with gcc the first time (0.2-0.3 s per new signature with a cold cache). PyTorch ships a
prebuilt launcher (``torch._C._StaticCudaLauncher``, wrapped by Inductor's
``StaticallyLaunchedCudaKernel``) that launches a cubin given a type string of its parameters;
kernels go through it when this torch has it and the kernel fits its limits (one CTA, no scratch
memory, no launch hooks), and through Triton's launcher otherwise, or once PyTorch's refuses a
kernel at launch (``compile._Step.launch``).
"""
from __future__ import annotations

import importlib
import inspect
import logging
from functools import lru_cache

import torch

log = logging.getLogger("loopnest")

# where Inductor keeps the class, newest torch first
_STATIC_MODULES = ("torch._inductor.runtime.static_triton_launcher", "torch._inductor.runtime.static_cuda_launcher")


@lru_cache(maxsize=None)
def static_launcher_class():
    """PyTorch's prebuilt-launcher wrapper class, or None when this torch has none."""
    for name in _STATIC_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        cls = getattr(module, "StaticallyLaunchedCudaKernel", None)
        if cls is not None:
            return cls
    return None


def runtime_parameters(kernel) -> list[int]:
    """Positions (in the Triton function's parameter order) of the arguments the compiled kernel
    takes at run time: every parameter but the constexprs, declared or specialized by Triton
    (e.g. an integer equal to 1)."""
    src = kernel.src
    names = list(src.fn.arg_names)

    def position(key) -> int:  # Triton keys parameters by name, by index or by index path
        return names.index(key) if isinstance(key, str) else (key[0] if isinstance(key, tuple) else key)

    types = {position(k): v for k, v in src.signature.items()}
    constants = {position(k) for k in getattr(src, "constants", None) or {}}
    return [i for i in range(len(names)) if types.get(i) != "constexpr" and i not in constants]


class StaticLaunch:
    """A kernel launched through PyTorch's prebuilt launcher: ``launch(programs, stream, args)``
    with every argument of the Triton function (constexprs are dropped here).

    The wrapper's ``run`` works out per call what is fixed per kernel (the type string, the
    scratch arguments, the platform); where the wrapper has the fields its ``run`` reads (torch
    2.8 to 2.13), they are read once here and the launch calls the C entry point directly,
    1.5-4 us less per launch. Any other wrapper is called through its ``run``."""

    def __init__(self, static, keep: list[int]):
        self.static = static
        self.keep = keep
        self.direct = None
        names = ("C_impl", "function", "num_warps", "shared", "arg_tys", "has_global_scratch")
        if all(hasattr(static, n) for n in names) and static.function is not None:
            scratch = (static.has_global_scratch, getattr(static, "has_profile_scratch", False))
            self.direct = (static.C_impl._launch_kernel, static.function, static.num_warps, static.shared,
                           static.arg_tys + "O" * sum(scratch), (None,) * sum(scratch))

    def __call__(self, programs: int, stream: int, args: list) -> None:
        if self.direct is None:
            self.static.run(programs, 1, 1, stream, *[args[i] for i in self.keep])
            return
        launch, function, warps, shared, types, scratch = self.direct
        launch(function, programs, 1, 1, warps, shared, types, (*[args[i] for i in self.keep], *scratch), stream)


class TritonLaunch:
    """A kernel launched through the C launcher Triton generated for its signature."""

    def __init__(self, kernel):
        self.run, self.function, self.metadata = kernel.run, kernel.function, kernel.packed_metadata

    def __call__(self, programs: int, stream: int, args: list) -> None:
        self.run(programs, 1, 1, stream, self.function, self.metadata, None, None, None, *args)


def direct_launch(kernel, device: int):
    """The fastest launch of Triton's compiled ``kernel`` on CUDA ``device`` (loaded there now)."""
    static = _load_static(kernel, device)
    if static is not None:
        return static
    with torch.cuda.device(device):
        return TritonLaunch(kernel)


def static_kernel(kernel):
    """PyTorch's prebuilt-launcher wrapper of Triton's compiled ``kernel`` (not loaded yet) and the
    positions of the arguments it takes; None when this torch has no such launcher or the kernel
    is outside its limits."""
    cls = static_launcher_class()
    if cls is None or torch.version.hip is not None:
        return None
    cubin = next((p for name, p in kernel.metadata_group.items() if name.endswith(".cubin")), None)
    if cubin is None:
        return None
    kernel._cubin_path = cubin  # where the wrapper loads the binary from (Triton's cache)
    try:
        static = cls(kernel)
    except (NotImplementedError, KeyError) as e:
        log.debug("loopnest: %s goes through Triton's launcher: %s", kernel.name, e)
        return None
    keep = runtime_parameters(kernel)
    if len(keep) != len(static.arg_tys):
        raise RuntimeError(f"{kernel.name}: {len(keep)} runtime arguments, but PyTorch's launcher "
                           f"expects {len(static.arg_tys)} ({static.arg_tys!r})")
    return static, keep


def _load_static(kernel, device: int) -> StaticLaunch | None:
    found = static_kernel(kernel)
    if found is None:
        return None
    static, keep = found
    with torch.cuda.device(device):
        if "device" in inspect.signature(static.load_kernel).parameters:
            static.load_kernel(device)
        else:
            static.load_kernel()
    return StaticLaunch(static, keep)
