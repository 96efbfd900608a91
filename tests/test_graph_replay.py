"""``cudagraphs="auto"``: which inference graphs replay as CUDA graphs (``lowering.graph_replay``).

The policy reads only the lowered program and its buffers, so it is checked here on graphs
compiled for the CPU; the replay itself is tested on a GPU in ``test_cudagraphs.py``."""
import pytest
import torch

from loopnest.api import compile_options
from loopnest.lowering import graph_replay
from loopnest.lowering.graph_replay import auto_declines


def lowered_graphs(fn, *args, dynamic=False):
    """The loopnest graphs ``torch.compile`` lowers for ``fn(*args)`` (C++ backend, heuristics)."""
    seen = []
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="loopnest", dynamic=dynamic,
                             options={"backend": "cpp", "tune": "off", "recorder": seen.append})
    compiled(*args)
    assert seen
    return seen


def softmaxes(x):
    """Two kernels: a softmax along each dimension."""
    return torch.softmax(x, 0) + torch.softmax(x, 1)


def test_a_small_static_graph_of_two_kernels_replays():
    (g,) = lowered_graphs(softmaxes, torch.randn(64, 80))
    assert len(g.compiled.steps) == 2 and auto_declines(g) is None


def test_one_kernel_does_not():
    (g,) = lowered_graphs(lambda x, w: torch.softmax(x * w, -1), torch.randn(64, 80), torch.randn(80))
    assert "one kernel" in auto_declines(g)


def test_a_graph_that_writes_its_input_does_not():
    """An ATen graph that writes its input (``make_fx`` keeps the write; under torch.compile
    AOTAutograd takes writes out of the graph and applies them after it)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from loopnest.backends import registry
    from loopnest.lowering import api as lowering_api
    from loopnest.lowering.options import CompileOptions

    def fn(x):
        x.add_(1)
        return x * 2
    seen = []
    lowering_api.compile_fx(make_fx(fn)(torch.randn(64)), [torch.randn(64)],
                            CompileOptions(backend=registry.get("cpp"), recorder=seen.append))
    (g,) = seen
    assert auto_declines(g) == "it writes into its inputs"


def test_symbolic_sizes_do_not():
    (g,) = lowered_graphs(lambda x: torch.softmax(x, -1) + 1, torch.randn(8, 33), dynamic=True)
    assert auto_declines(g) == "its sizes are symbolic"


def test_an_output_that_is_a_view_of_an_input_does_not_stop_it():
    (g,) = lowered_graphs(lambda x: (x.t(), softmaxes(x)), torch.randn(16, 8))
    assert auto_declines(g) is None


def test_buffers_beyond_the_pool_bound_do_not(monkeypatch):
    (g,) = lowered_graphs(softmaxes, torch.randn(64, 80))
    monkeypatch.setattr(graph_replay, "POOL_BYTES", 64 * 80 * 4 - 1)
    assert "held in a graph's pool" in auto_declines(g)


def test_launches_that_stream_many_bytes_do_not(monkeypatch):
    (g,) = lowered_graphs(softmaxes, torch.randn(64, 80))
    # x, the sum (written, then read and written again by the copy out), the column statistics
    # (the rest stays in registers)
    moved = (4 * 64 * 80 + 2 * 80) * 4
    monkeypatch.setattr(graph_replay, "BYTES_PER_CALL", 0)
    monkeypatch.setattr(graph_replay, "BYTES_PER_LAUNCH", moved // 2 - 1)
    assert "bound by the GPU" in auto_declines(g)
    monkeypatch.setattr(graph_replay, "BYTES_PER_LAUNCH", moved // 2)
    assert auto_declines(g) is None


@pytest.mark.parametrize("value", ["always", 1, None])
def test_cudagraphs_takes_auto_true_or_false(value):
    with pytest.raises(TypeError, match='cudagraphs must be "auto", True or False'):
        compile_options(cudagraphs=value)


def test_auto_is_the_default_and_no_cudagraphs_turns_it_off():
    from loopnest.api import options_for_mode

    assert compile_options().cudagraphs == "auto"
    assert compile_options(**options_for_mode("max-autotune-no-cudagraphs")).cudagraphs is False


def test_aten_calls_that_sync_or_cross_devices_do_not():
    from loopnest.lowering.extern import ExternFn
    from loopnest.lowering.graph_replay import _capturable

    cuda = torch.device("cuda")
    assert _capturable(ExternFn(torch.ops.aten.mm.default, None, (cuda, cuda)), "cuda")
    assert not _capturable(ExternFn(torch.ops.aten.nonzero.default, None, (cuda,)), "cuda")  # sized on the host
    assert not _capturable(ExternFn(torch.ops.aten._local_scalar_dense.default, None, (cuda,)), "cuda")
    assert not _capturable(ExternFn(torch.ops.aten.mm.default, None, (cuda, torch.device("cpu"))), "cuda")
    assert not _capturable(lambda x: x, "cuda")  # not an ATen op: nothing says what it does


def test_an_aten_call_of_a_device_tensor_replays():
    (g,) = lowered_graphs(lambda x, w: torch.relu(x @ w) + 1, torch.randn(16, 32), torch.randn(32, 8))
    assert auto_declines(g) is None


def test_copied_outputs_keep_their_strides_and_share_memory_as_the_outputs_did():
    """``CopyOut`` (a replay's fresh outputs): views of one buffer (q, k, v split from one
    projection) come back as views of one copy at their offsets and strides, a strided view alone
    keeps its strides, a dense output is copied alone; every copy holds the values and none is
    the graph's own memory."""
    from loopnest.runtime.cudagraphs import CopyOut

    qkv = torch.randn(4, 6, 9)
    q, k, v = qkv.unflatten(-1, (3, 3)).unbind(-1)  # non-dense views of one buffer
    column = torch.randn(5, 7)[:, 2]
    dense = torch.randn(3, 4).t()  # dense, not contiguous
    empty = torch.randn(0, 3)
    outputs = [q, dense, k, column, v, empty]
    copy = CopyOut(outputs)
    for _ in range(2):
        got = copy.run()
        for g, t in zip(got, outputs):
            assert g.shape == t.shape and g.stride() == t.stride() and g.dtype == t.dtype
            assert g.storage_offset() == (0 if t is dense else t.storage_offset())
            torch.testing.assert_close(g, t, rtol=0, atol=0)
            assert g.numel() == 0 or g.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
        storages = [g.untyped_storage().data_ptr() for g in got]
        assert storages[0] == storages[2] == storages[4] and len({storages[0], storages[1], storages[3]}) == 3
        got[0].fill_(7.0)
        assert (got[2] != 7).all() and (q != 7).all()  # the views interleave without overlapping
        torch.testing.assert_close(got[4], v, rtol=0, atol=0)


def test_a_replay_may_copy_in_what_keeps_its_traffic_within_the_host_bound(monkeypatch):
    (g,) = lowered_graphs(softmaxes, torch.randn(64, 80))
    moved = (4 * 64 * 80 + 2 * 80) * 4  # as above
    monkeypatch.setattr(graph_replay, "COPY_BYTES", 0)
    monkeypatch.setattr(graph_replay, "BYTES_PER_CALL", moved // 2)
    monkeypatch.setattr(graph_replay, "BYTES_PER_LAUNCH", moved)
    assert graph_replay.copy_limit(g) == moved // 2 + 2 * moved - moved
    monkeypatch.setattr(graph_replay, "COPY_BYTES", 5 * moved)
    assert graph_replay.copy_limit(g) == 5 * moved


def test_results_copied_out_count_as_traffic(monkeypatch):
    """A replay copies each result out of the graph's memory: a graph whose kernels would be
    host-bound alone but whose large output doubles its traffic does not replay."""
    (g,) = lowered_graphs(softmaxes, torch.randn(64, 80))
    kernels = (2 * 64 * 80 + 2 * 80) * 4  # what the kernels themselves read and write
    monkeypatch.setattr(graph_replay, "BYTES_PER_CALL", 0)
    monkeypatch.setattr(graph_replay, "BYTES_PER_LAUNCH", kernels // 2)
    assert "bound by the GPU" in auto_declines(g)
