"""The suite's new rows (autotune/workloads.py NEW_ROWS, TRAIN_ROWS) at tiny sizes on every
backend, through torch.compile: wide and few long rows, the Llama-3 cross-entropy, a mean over the
middle dim, and training steps (forward, then backward with a random grad_out) whose outputs and
gradients are compared with float64 on the same input values."""
import pytest
import torch

from loopnest.autotune.workloads import (GRAD_TOLERANCE, NEW_ROWS, TOLERANCE, TRAIN_ROWS, WORKLOADS,
                                         float64_results, relative_error, training_step)

pytestmark = [pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning"),  # Triton's interpreter
              pytest.mark.filterwarnings("ignore:Conversion of an array with ndim:DeprecationWarning")]


# nll_loss's backward scatters -1 at the targets into zeros; scatter has no lowering yet, so that
# one-hot goes through ATen (the fused cross-entropy backward is future work).
KNOWN_FALLBACKS = {"ce_train_bf16": {"aten.scatter.value"}}


def _compiled(workload, backend, graphs):
    torch._dynamo.reset()
    return torch.compile(workload.fn, backend="loopnest",
                         options={"backend": backend.name, "tune": "off", "recorder": graphs.append})


@pytest.mark.parametrize("name", NEW_ROWS)
def test_new_rows_match_float64(backend, name):
    workload, graphs = WORKLOADS[name], []
    args = workload.inputs("tiny", backend.device)
    got = _compiled(workload, backend, graphs)(*args)
    (want,) = float64_results(workload, args)
    assert got.dtype == workload.fn(*args).dtype and got.shape == want.shape
    assert relative_error(got, want) < TOLERANCE[got.dtype], name
    assert not [f.op for g in graphs for f in g.program.fallbacks]


@pytest.mark.parametrize("name", TRAIN_ROWS)
def test_training_steps_match_float64(backend, name):
    """Output and every gradient; the forward and backward graphs compile without fallbacks."""
    workload, graphs = WORKLOADS[name], []
    args = workload.train_inputs("tiny", backend.device)
    got = training_step(_compiled(workload, backend, graphs), args)
    want = float64_results(workload, args)
    assert len(got) == len(want) == 1 + sum(a.is_floating_point() for a in args)
    for k, (g, w) in enumerate(zip(got, want)):
        tolerance = (TOLERANCE if k == 0 else GRAD_TOLERANCE)[g.dtype]
        assert g.shape == w.shape and relative_error(g, w) < tolerance, (name, k, relative_error(g, w))
    assert len(graphs) == 2, "a forward and a backward graph"
    assert {f.op for g in graphs for f in g.program.fallbacks} <= KNOWN_FALLBACKS.get(name, set())


def test_training_bytes_count_passes_and_weights():
    workload = WORKLOADS["layernorm_train"]
    x, w, b = workload.train_inputs("tiny")
    out = training_step(workload.fn, (x, w, b))
    assert workload.min_bytes((x, w, b), out) == 5 * x.numel() * 4 + 3 * (w.numel() + b.numel()) * 4
    ce = WORKLOADS["ce_train_bf16"]
    logits, target = ce.train_inputs("tiny")
    assert ce.min_bytes((logits, target), None) == 3 * logits.numel() * 2 + 2 * target.numel() * 8
    mean = WORKLOADS["mean_mid"]
    (x,) = mean.inputs("tiny")
    assert mean.min_bytes((x,), x.mean(1)) == (x.numel() + x.numel() // x.shape[1]) * 4


def test_a_result_rounded_through_bf16_gets_the_bf16_tolerance():
    """rmsnorm_bf16 returns bf16(x_hat) * w in float32 when w is float32: float32 differences that
    move x_hat across a bf16 rounding boundary flip whole bf16 steps, so that result is held to
    bf16's tolerance (``Workload.rounds_to``); every other result keeps its own."""
    from loopnest.autotune.workloads import mismatch
    assert WORKLOADS["rmsnorm_train_bf16"].rounds_to is torch.bfloat16
    assert WORKLOADS["layernorm_train"].rounds_to is None
    want = torch.randn(4096, dtype=torch.float64)
    flipped = want.float().clone()
    flipped[::512] *= 1 + 2 ** -8  # eight elements one bf16 step off: relative error ~2e-4
    assert mismatch((flipped,), (want,), [torch.float32], False) is not None
    assert mismatch((flipped,), (want,), [torch.float32], False, torch.bfloat16) is None
    assert mismatch((flipped * 1.1,), (want,), [torch.float32], False, torch.bfloat16) is not None
