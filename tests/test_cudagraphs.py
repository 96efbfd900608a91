"""Whole-graph CUDA graph replay: ``options={"cudagraphs": True}`` and the default "auto" (needs a CUDA GPU)."""
import pytest
import torch

import loopnest  # noqa: F401

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.usefixtures("real_gpu")]


def test_cudagraph_replay_matches_eager_and_tracks_new_inputs():
    def fn(x, w):
        return torch.softmax(x * w, -1), (x + w).abs().amax()

    f = torch.compile(fn, backend="loopnest", options={"backend": "triton", "cudagraphs": True})
    w = torch.randn(256, device="cuda")
    for step in range(4):  # warm-up, capture, then replays with fresh inputs
        x = torch.randn(64, 256, device="cuda")
        got = [t.clone() for t in f(x, w)]
        for g, e in zip(got, fn(x, w)):
            torch.testing.assert_close(g, e, msg=lambda m: f"step {step}: {m}")


def test_cudagraphs_rejects_a_new_shape():
    from loopnest.runtime.cudagraphs import CudaGraphRunner

    runner = CudaGraphRunner(lambda x: x * 2)
    runner(torch.ones(4, device="cuda"))
    with pytest.raises(ValueError, match="captured for inputs"):
        runner(torch.ones(5, device="cuda"))


def test_inputs_at_a_fixed_address_are_read_in_place_and_captured_again_when_they_move():
    from loopnest.runtime.cudagraphs import CudaGraphRunner

    runner = CudaGraphRunner(lambda x, w: x * w)
    w = torch.randn(8, device="cuda")
    kept = w.clone()
    for _ in range(3):  # warm-up, capture, replay; the caller's x is new each time
        x = torch.randn(8, device="cuda")
        torch.testing.assert_close(runner(x, w).clone(), x * w)
    assert 1 in runner.pinned and runner.static_inputs[1] is w
    w.mul_(3)  # written in place where the graph reads it
    x = torch.randn(8, device="cuda")
    torch.testing.assert_close(runner(x, w).clone(), x * w)
    w2 = torch.randn(8, device="cuda")  # another address: the graph is captured again, w2 copied
    x = torch.randn(8, device="cuda")
    torch.testing.assert_close(runner(x, w2).clone(), x * w2)
    assert 1 not in runner.pinned
    torch.testing.assert_close(w, kept * 3)  # the caller's tensors are never written


def test_a_graph_that_writes_its_input_runs_without_replay():
    def fn(x):
        x.add_(1)
        return x * 2

    f = torch.compile(fn, backend="loopnest", options={"backend": "triton", "cudagraphs": True})
    for step in range(4):
        x = torch.randn(64, device="cuda")
        want_x = x + 1
        got = f(x).clone()
        torch.testing.assert_close(x, want_x, msg=lambda m: f"step {step}: {m}")
        torch.testing.assert_close(got, want_x * 2, msg=lambda m: f"step {step}: {m}")


def auto_compiled(fn):
    """``fn`` compiled with the defaults (``cudagraphs="auto"``), and the graphs it replays."""
    from loopnest.lowering.graph_replay import CudaGraphBoxed

    boxes = []
    real_init = CudaGraphBoxed.__init__

    def spy(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        boxes.append(self)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="loopnest", options={"backend": "triton", "tune": "off"})

    def call(*args):
        with pytest.MonkeyPatch.context() as m:
            m.setattr(CudaGraphBoxed, "__init__", spy)
            return compiled(*args)
    return call, boxes


def test_auto_replays_a_small_graph_and_its_outputs_outlive_the_next_call():
    def fn(x, w):
        return torch.softmax(x * w, -1), (x + w).abs().amax()

    f, boxes = auto_compiled(fn)
    w = torch.randn(256, device="cuda")
    xs = [torch.randn(64, 256, device="cuda") for _ in range(5)]
    kept = [f(x, w) for x in xs]  # warm-up, capture, replays; every result kept, none cloned
    for step, (x, got) in enumerate(zip(xs, kept)):
        for g, e in zip(got, fn(x, w)):
            torch.testing.assert_close(g, e, msg=lambda m: f"call {step}: {m}")
    (box,) = boxes
    assert box.replays and box.runner.graph is not None


def test_auto_replays_a_plain_training_step_and_matches_eager():
    """Forward and backward each replay; gradients and updated weights match eager's over steps
    of an optimizer, two forwards before one backward included (each keeps its own saved tensors)."""
    import copy

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.LayerNorm(96), torch.nn.GELU(),
                                torch.nn.Linear(96, 64)).cuda()
    reference = copy.deepcopy(model)
    f, boxes = auto_compiled(model)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
    for step in range(5):
        x = torch.randn(32, 64, device="cuda")
        for fn, m in ((f, model), (reference, reference)):
            fn(x).square().mean().backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=lambda m: f"step {step}: {m}")
        for opt in optimizers:
            opt.step()
            opt.zero_grad()
    assert len(boxes) == 2 and all(box.replays and box.runner.graph is not None for box in boxes)
    x1, x2 = torch.randn(32, 64, device="cuda"), torch.randn(32, 64, device="cuda")
    for fn, m in ((f, model), (reference, reference)):
        (fn(x1).sum() + fn(x2).square().sum()).backward()  # the first gradient expanded: a plain call
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_attention_training_replays_with_its_seeds_on_the_device_at_every_call():
    """Flash attention's forward leaves its philox seed and offset on the CPU when it draws no
    dropout: both call paths (the first call's and the written-out plan's) put them on the device,
    so the forward's outputs look alike at every call. q, k and v, split from one projection and
    saved for the backward, share memory: they are copied together. Both graphs replay; the
    forward's views of its inputs (x and w transposed, saved for the matmul's backward) are made
    again from each call's inputs. In float16 on an H100, SDPA picks cuDNN attention."""
    torch.manual_seed(0)

    def fn(x, w):
        q, k, v = (t.unflatten(-1, (4, 16)).transpose(1, 2) for t in (x @ w).split(64, -1))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum((1, 3))
    f, boxes = auto_compiled(fn)
    w = (torch.randn(64, 192, device="cuda", dtype=torch.half) / 8).requires_grad_()
    w_eager = w.detach().clone().requires_grad_()
    for step in range(5):
        x = torch.randn(8, 128, 64, device="cuda", dtype=torch.half, requires_grad=True)
        x_eager = x.detach().clone().requires_grad_()
        g = torch.randn(8, 128, device="cuda", dtype=torch.half)
        f(x, w).backward(g)
        fn(x_eager, w_eager).backward(g)
        for got, want in ((x.grad, x_eager.grad), (w.grad, w_eager.grad)):
            torch.testing.assert_close(got, want, atol=5e-2, rtol=2e-2, msg=lambda m: f"step {step}: {m}")
    assert len(boxes) == 2, [(box.declined, box.runner.declined) for box in boxes]
    backward, forward = boxes  # the plain training path boxes its backward graph first
    assert forward.replays and forward.runner.graph is not None, (forward.declined, forward.runner.declined)
    assert backward.replays and backward.runner.graph is not None, (backward.declined, backward.runner.declined)


def test_auto_replays_views_of_inputs_as_views_of_each_calls_inputs():
    from loopnest.runtime.cudagraphs import CudaGraphRunner

    runner = CudaGraphRunner(lambda x, w: (x[1:], w.t(), (x * 2).sum() + w.sum()), fresh_outputs=True)
    for _ in range(4):
        x, w = torch.randn(8, device="cuda"), torch.randn(6, 4, device="cuda").t()
        view, wt, total = runner(x, w)
        assert view._base is x and wt._base is w._base and wt.stride() == (4, 1)
        torch.testing.assert_close(wt, w.t())
        torch.testing.assert_close(total, (x * 2).sum() + w.sum())
    assert runner.declined is None and runner.graph is not None


def test_auto_runs_plainly_where_a_view_of_one_input_could_not_stand_in_for_the_result():
    from loopnest.runtime.cudagraphs import CudaGraphRunner

    runner = CudaGraphRunner(lambda x, y: (x[1:], x * 2), fresh_outputs=True)
    base = torch.randn(16, device="cuda")
    for _ in range(3):
        out = runner(base[:8], base[8:])  # two inputs in one memory: the view's source is ambiguous
        assert out[0].data_ptr() == base[1:].data_ptr()
    assert runner.graph is None and "several inputs" in runner.declined


def test_auto_replays_outputs_that_share_memory_and_they_keep_sharing_it():
    from loopnest.runtime.cudagraphs import CudaGraphRunner

    def fn(x):
        y = x.exp()
        return y[:, 0::2], y[:, 1::2], y.sum()
    runner = CudaGraphRunner(fn, fresh_outputs=True)
    xs = [torch.randn(16, 8, device="cuda") for _ in range(4)]
    kept = [runner(x) for x in xs]
    assert runner.declined is None and runner.graph is not None
    for x, got in zip(xs, kept):
        for g, e in zip(got, fn(x)):
            assert g.stride() == e.stride()
            torch.testing.assert_close(g, e)
    assert kept[-1][0].untyped_storage().data_ptr() == kept[-1][1].untyped_storage().data_ptr()


def test_inputs_that_settle_after_a_few_calls_are_read_in_place_and_others_decline():
    """Over the copy limit, the capture waits (up to ``SETTLING_CALLS`` more calls) for the
    inputs to stay where they are, as a backward's saved tensors do once the forward replays."""
    from loopnest.runtime.cudagraphs import SETTLING_CALLS, CudaGraphRunner

    runner = CudaGraphRunner(lambda x: x * 2, fresh_outputs=True, max_copy_bytes=0)
    xs = [torch.randn(64, device="cuda") for _ in range(3)]
    for x in xs + [xs[-1]] * 3:
        torch.testing.assert_close(runner(x), x * 2)
    assert runner.declined is None and runner.graph is not None and runner.pinned == {0}
    moving = CudaGraphRunner(lambda x: x * 2, fresh_outputs=True, max_copy_bytes=0)
    for _ in range(SETTLING_CALLS + 3):
        x = torch.randn(64, device="cuda")
        torch.testing.assert_close(moving(x), x * 2)
    assert moving.graph is None and "copied" in moving.declined


def test_pinned_inputs_that_move_and_settle_again_are_read_in_place_again():
    """A backward captured with its saved tensors pinned sees them move once, when the forward
    starts replaying; over the copy limit it waits for them to settle at their new addresses."""
    from loopnest.runtime.cudagraphs import CudaGraphRunner

    runner = CudaGraphRunner(lambda x: x * 2, fresh_outputs=True, max_copy_bytes=0)
    first, second = torch.randn(64, device="cuda"), torch.randn(64, device="cuda")
    for x in [first] * 3 + [second] * 4:
        torch.testing.assert_close(runner(x), x * 2)
    assert runner.declined is None and runner.graph is not None and runner.pinned == {0}
    assert runner.resettles == 1 and runner.static_inputs[0] is second


def test_auto_passes_inputs_and_nones_through_and_replays_the_rest():
    from loopnest.runtime.cudagraphs import CudaGraphRunner

    runner = CudaGraphRunner(lambda x, w: (x * w, w, None, (x + w).exp()), fresh_outputs=True)
    w = torch.randn(8, device="cuda")
    for step in range(4):
        x = torch.randn(8, device="cuda")  # a new address each call: copied into the graph's buffer
        got = runner(x, w)
        assert got[1] is w and got[2] is None
        torch.testing.assert_close(got[0], x * w, msg=lambda m: f"call {step}: {m}")
        torch.testing.assert_close(got[3], (x + w).exp(), msg=lambda m: f"call {step}: {m}")
    assert runner.declined is None and runner.graph is not None


def test_varying_strides_run_plainly_and_the_replay_keeps_its_layout():
    from loopnest.runtime.cudagraphs import CudaGraphRunner

    runner = CudaGraphRunner(lambda g, x: (g * x).sum(0), checked=False, fresh_outputs=True, varying=(0,))
    x = torch.randn(16, 8, device="cuda")
    grads = [torch.randn(16, 8, device="cuda"), torch.randn(16, 8, device="cuda"),
             torch.randn(8, 16, device="cuda").t(), torch.randn(16, 8, device="cuda"),
             torch.ones((), device="cuda").expand(16, 8)]
    for step, g in enumerate(grads):
        torch.testing.assert_close(runner(g, x), (g * x).sum(0), msg=lambda m: f"call {step}: {m}")
    assert runner.graph is not None and runner.calls == 3  # the transposed and expanded calls ran plainly


def test_auto_runs_plainly_when_the_capture_fails():
    from loopnest.runtime.cudagraphs import CudaGraphRunner

    def synced(x):
        return x * float(x.sum())  # a host sync: not capturable

    runner = CudaGraphRunner(synced, fresh_outputs=True)
    for _ in range(3):
        x = torch.randn(8, device="cuda")
        torch.testing.assert_close(runner(x), synced(x))
    assert runner.graph is None and runner.declined.startswith("the capture failed")
    torch.randn(4, device="cuda")  # random ops outside a graph still work after the failed capture
    torch.cuda.synchronize()


def test_reduce_overhead_mode_returns_views_of_the_callers_inputs():
    """With ``cudagraphs=True`` an output that views an input views that call's input, not the
    buffer the replay copied it into (which the next call overwrites)."""
    def fn(x, w):
        return x.t(), (x * w).sum()

    torch._dynamo.reset()
    f = torch.compile(fn, backend="loopnest", options={"backend": "triton", "cudagraphs": True})
    w = torch.randn(32, device="cuda")
    for step in range(4):  # warm-up, capture, then replays with fresh inputs
        x = torch.randn(16, 32, device="cuda")
        view, total = f(x, w)
        assert view.data_ptr() == x.data_ptr() and view.stride() == (1, 32), f"step {step}"
        torch.testing.assert_close(total, (x * w).sum(), msg=lambda m: f"step {step}: {m}")
