"""What the GPU executes per chunk of a generated Triton kernel's row loop, without a GPU.

Each kernel of a workload is compiled for a CUDA target (sm_90 unless told) as the JIT would
specialize it for aligned tensors (``prebuild.specialization``), disassembled with the
``cuobjdump`` Triton ships, and every loop of its SASS (a backward branch) is printed with its
instruction count and opcode histogram. A row loop bound by its instructions runs as fast as its
body is short: this shows which spelling of a kernel costs what, before device time is spent.

python bench/sass_loops.py ce_vocab_bf16 [--size gpu] [--arch 90] [--config '{"RBLOCK": 8192}'] [--dump DIR]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from loopnest.autotune.workloads import WORKLOADS
from loopnest.backends import registry
from loopnest.backends.base import schedule_for
from loopnest.backends.triton.compile import Launcher, load_module
from loopnest.backends.triton.prebuild import specialization
from loopnest.lowering.fx_lowering import FxLowering
from show_kernels import graphs

_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def sass(cubin: bytes) -> list[tuple[int, str]]:
    """(address, instruction) of each SASS instruction of ``cubin``."""
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([str(tool), "-sass", f.name], capture_output=True, text=True, check=True).stdout
    return [(int(a, 16), i) for a, i in _INSTR.findall(text)]


def opcode(instr: str) -> str:
    """The opcode of a SASS instruction, without its predicate and modifiers."""
    return re.sub(r"^@!?U?P\w+\s+", "", instr).split()[0].split(".")[0]


def loops(instrs: list[tuple[int, str]]) -> list[tuple[int, int, collections.Counter]]:
    """(start, end, opcode counts) of each loop: a branch back to an earlier address."""
    at = {a: k for k, (a, _) in enumerate(instrs)}
    found = []
    for k, (a, i) in enumerate(instrs):
        target = re.search(r"BRA\s.*?0x([0-9a-f]+)", i)
        if target and int(target.group(1), 16) < a and int(target.group(1), 16) in at:
            body = instrs[at[int(target.group(1), 16)]:k + 1]
            found.append((body[0][0], a, collections.Counter(opcode(x) for _, x in body)))
    return found


def compile_for(step, target: GPUTarget):
    """``step``'s kernel compiled for ``target`` as the JIT specializes it for aligned tensors
    (``JITFunction.preload``'s reading of the specialization, which asks for a live driver)."""
    spec = json.loads(specialization(step, target))
    constexprs = {tuple(k): tl.constexpr(v["constexpr"]) if isinstance(v, dict) and "constexpr" in v else v
                  for k, v in zip(spec["constant_keys"], spec["constant_vals"])}
    attrs = {tuple(k): v for k, v in zip(spec["attrs_keys"], spec["attrs_vals"])}
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in spec["options"].items()}
    source = ASTSource(step.fn, spec["signature"], constexprs, attrs)
    return triton.compile(source, target=target, options=options)


def main() -> None:
    """Print each kernel's registers, spills and loops."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=sorted(WORKLOADS))
    p.add_argument("--size", default="gpu")
    p.add_argument("--arch", type=int, default=90, help="CUDA compute capability, as 90 for sm_90")
    p.add_argument("--config", help="JSON config applied to every kernel (default: the heuristic's)")
    p.add_argument("--dump", type=Path, help="write each kernel's SASS here")
    a = p.parse_args()
    backend, target = registry.get("triton"), GPUTarget("cuda", a.arch, 32)
    for name, gm in graphs(WORKLOADS[a.workload], a.size):
        for kernel in schedule_for(FxLowering(gm).run().graph, backend, name).kernels:
            config = backend.default_config(kernel) if a.config is None else \
                backend.config_from_json(json.loads(a.config), backend.hardware("cpu"))
            program = backend.program(kernel, config)
            dtypes = {n: buf.dtype.torch for n, buf in kernel.buffers.items()}
            launcher = Launcher(program, load_module(program.source, interpret=False), dtypes)
            for step in launcher.bind({}).steps:
                compiled = compile_for(step, target)
                instrs = sass(compiled.asm["cubin"])
                meta = compiled.metadata
                print(f"{kernel.name} {step.fn.__name__} [{config}]: {len(instrs)} instructions, "
                      f"{meta.num_warps} warps, shared memory {meta.shared} B")
                for start, end, ops in loops(instrs):
                    top = ", ".join(f"{op} {n}" for op, n in ops.most_common(12))
                    print(f"  loop {start:#06x}-{end:#06x}: {sum(ops.values())} instructions ({top})")
                if a.dump:
                    os.makedirs(a.dump, exist_ok=True)
                    (a.dump / f"{step.fn.__name__}.sass").write_text("\n".join(i for _, i in instrs))


if __name__ == "__main__":
    main()
