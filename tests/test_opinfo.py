"""PyTorch's OpInfo samples through ``torch.compile(backend="loopnest")``.

Every pointwise (unary/binary ufunc) and reduction OpInfo, forward, up to 4 samples each: float32
on CPU through the C++ backend, and (on a machine with CUDA) float32, float16 and bfloat16 on the
GPU through the Triton backend. A sample passes when Dynamo hands the whole function to loopnest
(fullgraph, one ``graphs_compiled`` per sample) and the result matches eager within tolerances
that fit the dtype. Only samples eager itself rejects are skipped: complex and uint64 results
count (loopnest calls the ops on them through ATen).
"""
from __future__ import annotations

import json
import os
import random
import types

import pytest
import torch
import torch._dynamo
import torch.utils._pytree as pytree

import loopnest as ln

pytest.importorskip("expecttest")  # torch.testing._internal needs it
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.opinfo.core import BinaryUfuncInfo, ReductionOpInfo, UnaryUfuncInfo  # noqa: E402

SAMPLES_PER_OP = 4
SEED = 42
# user-defined CUDA kernels that Dynamo refuses to trace ("marked as skipped"): nothing to compile
JITERATOR = {"jiterator_binary", "jiterator_binary_return_by_ref", "jiterator_unary"}


def op_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


# (rtol, atol): eager and loopnest each round once from float32, so results may be an ulp or two apart
TOLERANCES = {torch.float32: (1e-4, 1e-5), torch.float16: (2e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2)}


def sweep_ops(device: str = "cpu", dtype: torch.dtype = torch.float32) -> list:
    """Every pointwise and reduction OpInfo that supports ``dtype`` on ``device``."""
    kinds = (UnaryUfuncInfo, BinaryUfuncInfo, ReductionOpInfo)
    return [op for op in op_db if isinstance(op, kinds) and op.name not in JITERATOR
            and dtype in op.supported_dtypes(device)]


def _no_seed_wrapper(fn, *args, **kwargs):
    return fn(*args, **kwargs)


def seedless(fn):
    """``fn`` with OpInfo's ``wrapper_set_seed`` (which Dynamo refuses to trace: it calls
    ``freeze_rng_state``) replaced by a plain call; the sweep seeds the RNG with the same value
    before the eager and the compiled call instead, as Inductor's OpInfo test does."""
    code = getattr(fn, "__code__", None)
    if code is None or "wrapper_set_seed" not in code.co_names:
        return fn
    return types.FunctionType(code, {**fn.__globals__, "wrapper_set_seed": _no_seed_wrapper}, fn.__name__,
                              fn.__defaults__, fn.__closure__)


def _split(sample):
    """The sample's tensors (compiled-function arguments) and a function rebuilding the call."""
    tree = (sample.input, list(sample.args), dict(sample.kwargs))
    leaves, spec = pytree.tree_flatten(tree)
    slots = [k for k, v in enumerate(leaves) if isinstance(v, torch.Tensor)]

    def call(op, *tensors):
        vals = list(leaves)
        for k, t in zip(slots, tensors):
            vals[k] = t
        inp, args, kwargs = pytree.tree_unflatten(vals, spec)
        return op(inp, *args, **kwargs)

    return [leaves[k] for k in slots], call


def _clone(tensors):
    return [t.clone() for t in tensors]


def run_sample(op, sample, fallbacks: set, backend: str = "cpp",
               tolerance: tuple[float, float] = TOLERANCES[torch.float32]) -> str | None:
    """None if the sample passes, "skip: ..." if it does not count, else the failure; the ATen ops
    that went to Extern calls are added to ``fallbacks``."""
    tensors, call = _split(sample)
    fn = seedless(op.op)
    try:
        torch.manual_seed(SEED)
        expected = call(fn, *_clone(tensors))
    except Exception as e:  # eager rejects the sample: nothing to compare
        return f"skip: eager raised {type(e).__name__}"
    torch._dynamo.reset()
    before = ln.counters["graphs_compiled"]
    recorded = []
    compiled = torch.compile(lambda *ts: call(fn, *ts), backend="loopnest", fullgraph=True,
                             options={"backend": backend, "recorder": recorded.append})
    try:
        torch.manual_seed(SEED)
        actual = compiled(*_clone(tensors))
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    fallbacks.update(f.op for g in recorded for f in g.program.fallbacks)
    if ln.counters["graphs_compiled"] == before:
        return "loopnest compiled nothing"
    try:
        torch.testing.assert_close(actual, expected, rtol=tolerance[0], atol=tolerance[1], equal_nan=True,
                                   check_device=True, check_dtype=True)
    except Exception as e:
        return f"mismatch: {str(e).splitlines()[0][:200]}"
    return None


def sweep(ops, device: str = "cpu", dtype: torch.dtype = torch.float32,
          backend: str = "cpp") -> tuple[int, int, dict, dict]:
    """Run up to SAMPLES_PER_OP samples of each op; (passed, counted, failures by op, Extern
    fallbacks by op)."""
    limits = dict(recompile_limit=1 << 20, accumulated_recompile_limit=1 << 20, cache_size_limit=1 << 20)
    passed = counted = 0
    failures: dict[str, list[str]] = {}
    externs: dict[str, set] = {}
    with torch._dynamo.config.patch(**limits):  # Dynamo must never fall back to eager silently
        for op in ops:
            samples = list(op.sample_inputs(device, dtype, requires_grad=False))[:SAMPLES_PER_OP]
            for sample in samples:
                result = run_sample(op, sample, externs.setdefault(op_name(op), set()), backend,
                                    TOLERANCES[dtype])
                if result is not None and result.startswith("skip"):
                    continue
                counted += 1
                if result is None:
                    passed += 1
                else:
                    failures.setdefault(op_name(op), []).append(result)
    return passed, counted, failures, externs


def _report(passed: int, counted: int, failures: dict, externs: dict) -> float:
    rate = passed / max(counted, 1)
    lowered = sorted(name for name, ops in externs.items() if not ops and name not in failures)
    print(f"\nOpInfo sweep: {passed}/{counted} samples match eager ({100 * rate:.1f}%); "
          f"{len(lowered)} of {len(externs)} ops compiled with no Extern call")
    for name, errs in sorted(failures.items()):
        print(f"  FAIL {name}: {len(errs)} sample(s): {errs[0]}")
    for name, ops in sorted(externs.items()):
        if ops:
            print(f"  extern {name}: {', '.join(sorted(ops))}")
    return rate


@pytest.mark.slow
def test_opinfo_sweep_all():
    ops = sweep_ops()
    assert len(ops) >= 150
    passed, counted, failures, externs = sweep(ops)
    assert _report(passed, counted, failures, externs) >= 0.996


def test_opinfo_sweep_sampled():
    """About 20 ops, a fixed random choice, so the default run stays fast."""
    ops = random.Random(1234).sample(sweep_ops(), 20)
    passed, counted, failures, externs = sweep(ops)
    assert counted >= 40
    assert _report(passed, counted, failures, externs) >= 0.996


GPU_CHUNKS = 8  # one test per dtype and chunk of ops, so pytest-xdist can spread them


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("chunk", range(GPU_CHUNKS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_opinfo_sweep_cuda_triton(dtype, chunk, real_gpu):
    """The sweep on the GPU through the Triton backend. With $LOOPNEST_OPINFO_REPORT set, each
    chunk also writes its counts and failures there as JSON."""
    ops = sweep_ops("cuda", dtype)[chunk::GPU_CHUNKS]
    passed, counted, failures, externs = sweep(ops, "cuda", dtype, "triton")
    report = os.environ.get("LOOPNEST_OPINFO_REPORT")
    if report:
        os.makedirs(report, exist_ok=True)
        with open(os.path.join(report, f"{str(dtype)[6:]}-{chunk}.json"), "w") as f:
            json.dump({"dtype": str(dtype), "chunk": chunk, "ops": len(ops), "passed": passed,
                       "counted": counted, "failures": failures,
                       "externs": {k: sorted(v) for k, v in externs.items() if v}}, f, indent=1)
    assert counted >= 10
    # a chunk holds about 70 samples: one op whose 4 samples Dynamo refuses (rrelu) costs 6%
    assert _report(passed, counted, failures, externs) >= 0.9
