"""``options={"cudagraphs": True}``: whole-graph CUDA graph replay (needs a CUDA GPU)."""
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
