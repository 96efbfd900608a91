"""PyTorch's OpInfo samples through ``torch.compile(backend="loopnest")`` on the C++ backend.

Every pointwise (unary/binary ufunc) and reduction OpInfo, float32 on CPU, forward, up to 4
samples each. A sample passes when Dynamo hands the whole function to loopnest (fullgraph, one
``graphs_compiled`` per sample) and the result matches eager. Samples whose results have a dtype
loopnest lacks (complex, uint64) are skipped, and so are samples eager itself rejects.
"""
from __future__ import annotations

import random

import pytest
import torch
import torch._dynamo
import torch.utils._pytree as pytree

import loopnest as ln
from loopnest.ir.dtypes import ALL_DTYPES

pytest.importorskip("expecttest")  # torch.testing._internal needs it
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.opinfo.core import BinaryUfuncInfo, ReductionOpInfo, UnaryUfuncInfo  # noqa: E402

SAMPLES_PER_OP = 4
SUPPORTED_DTYPES = {d.torch for d in ALL_DTYPES}  # no complex, no uint16/32/64
CUDA_ONLY = {"jiterator_binary", "jiterator_binary_return_by_ref", "jiterator_unary"}


def op_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def sweep_ops() -> list:
    """Every pointwise and reduction OpInfo that supports float32 on CPU."""
    kinds = (UnaryUfuncInfo, BinaryUfuncInfo, ReductionOpInfo)
    return [op for op in op_db if isinstance(op, kinds) and op.name not in CUDA_ONLY
            and torch.float32 in op.supported_dtypes("cpu")]


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


def run_sample(op, sample, fallbacks: set) -> str | None:
    """None if the sample passes, "skip: ..." if it does not count, else the failure; the ATen ops
    that went to Extern calls are added to ``fallbacks``."""
    tensors, call = _split(sample)
    try:
        expected = call(op.op, *_clone(tensors))
    except Exception as e:  # eager rejects the sample: nothing to compare
        return f"skip: eager raised {type(e).__name__}"
    outs = [x for x in pytree.tree_leaves(expected) if isinstance(x, torch.Tensor)]
    if any(x.dtype not in SUPPORTED_DTYPES for x in outs):
        return "skip: result dtype loopnest does not have"
    torch._dynamo.reset()
    before = ln.counters["graphs_compiled"]
    recorded = []
    fn = torch.compile(lambda *ts: call(op.op, *ts), backend="loopnest", fullgraph=True,
                       options={"recorder": recorded.append})
    try:
        actual = fn(*_clone(tensors))
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    fallbacks.update(f.op for g in recorded for f in g.program.fallbacks)
    if ln.counters["graphs_compiled"] == before:
        return "loopnest compiled nothing"
    try:
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5, equal_nan=True,
                                   check_device=True, check_dtype=True)
    except Exception as e:
        return f"mismatch: {str(e).splitlines()[0][:200]}"
    return None


def sweep(ops) -> tuple[int, int, dict, dict]:
    """Run up to SAMPLES_PER_OP samples of each op; (passed, counted, failures by op, Extern
    fallbacks by op)."""
    limits = dict(recompile_limit=1 << 20, accumulated_recompile_limit=1 << 20, cache_size_limit=1 << 20)
    passed = counted = 0
    failures: dict[str, list[str]] = {}
    externs: dict[str, set] = {}
    with torch._dynamo.config.patch(**limits):  # Dynamo must never fall back to eager silently
        for op in ops:
            samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))[:SAMPLES_PER_OP]
            for sample in samples:
                result = run_sample(op, sample, externs.setdefault(op_name(op), set()))
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
    assert _report(passed, counted, failures, externs) >= 0.97


def test_opinfo_sweep_sampled():
    """About 20 ops, a fixed random choice, so the default run stays fast."""
    ops = random.Random(1234).sample(sweep_ops(), 20)
    passed, counted, failures, externs = sweep(ops)
    assert counted >= 40
    assert _report(passed, counted, failures, externs) >= 0.97
