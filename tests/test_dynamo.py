"""``torch.compile(backend="loopnest")``: entry point, options, real torch.nn modules forward and
backward against eager, a training loop, dynamic shapes, custom ops and ``loopnest.explain``."""
from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch
import torch._dynamo
import torch.nn as nn
import torch.nn.functional as Fn

import loopnest as ln
from conftest import INTERPRETER_USABLE

RTOL, ATOL = 1e-4, 1e-5


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


@pytest.fixture(params=DEVICES)
def device(request):
    """Module tests run on the CPU (C++ backend) and, where a GPU exists, on CUDA (Triton)."""
    if request.param == "cuda":
        request.getfixturevalue("real_gpu")
    return request.param


def compare_module(module: nn.Module, *inputs, train: bool = True, options=None, device: str = "cpu"):
    """Forward (and backward when ``train``) of a compiled copy of ``module`` against eager; the
    loopnest backend must be the one the device implies (CUDA -> triton, CPU -> cpp)."""
    torch.manual_seed(0)
    module = module.to(device)
    ref = copy.deepcopy(module)
    recorded = []
    options = dict(options or {})
    outer = options.pop("recorder", None)
    options["recorder"] = lambda g: (recorded.append(g), outer and outer(g))
    compiled = torch.compile(module, backend="loopnest", options=options)
    ins = [x.detach().to(device).requires_grad_(train and x.is_floating_point()) for x in inputs]
    ref_ins = [x.detach().to(device).requires_grad_(train and x.is_floating_point()) for x in inputs]
    got, want = compiled(*ins), ref(*ref_ins)
    assert {g.stats.backend for g in recorded} == {"triton" if device == "cuda" else "cpp"}
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    for g, w in zip(got, want):
        if isinstance(w, torch.Tensor):
            torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL)
    if not train:
        return
    _loss(got).backward()
    _loss(want).backward()
    for (name, p), q in zip(module.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=RTOL, atol=ATOL, msg=lambda m: f"grad of {name}: {m}")
    for x, y in zip(ins, ref_ins):
        if x.grad is not None:
            torch.testing.assert_close(x.grad, y.grad, rtol=RTOL, atol=ATOL)


def _loss(outs) -> torch.Tensor:
    return sum((o.float() * torch.linspace(-1, 1, o.numel(), device=o.device).reshape(o.shape)).sum()
               for o in outs if isinstance(o, torch.Tensor) and o.requires_grad)


def test_entry_point_works_without_importing_loopnest(tmp_path):
    code = ("import sys, torch\n"
            "assert 'loopnest' not in sys.modules\n"
            "f = torch.compile(lambda x: torch.sin(x) * 2 + x.sum(), backend='loopnest')\n"
            "x = torch.randn(8)\n"
            "torch.testing.assert_close(f(x), torch.sin(x) * 2 + x.sum())\n"
            "print(sys.modules['loopnest'].counters['graphs_compiled'])\n")
    env = dict(os.environ, LOOPNEST_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "1"


def test_options_select_backend_and_tune():
    x = torch.randn(4, 5)
    f = torch.compile(lambda x: x.exp().sum(1), backend="loopnest", options={"backend": "cpp", "tune": "db"})
    torch.testing.assert_close(f(x), x.exp().sum(1))
    bad = torch.compile(lambda x: x + 1, backend="loopnest", options={"tune": "forever"})
    with pytest.raises(Exception, match="tune must be one of"):
        bad(x)


def test_transformer_encoder_layer_train_and_eval(device):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    x = torch.randn(2, 5, 16)
    compare_module(layer, x, train=True, device=device)
    layer.eval()
    with torch.no_grad():
        compare_module(layer, x, train=False, device=device)


def test_multihead_attention(device):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=True)
    q, k = torch.randn(2, 3, 16), torch.randn(2, 6, 16)
    compare_module(mha, q, k, k, device=device)


def test_layernorm_gelu_mlp(device):
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(12, 24), nn.LayerNorm(24), nn.GELU(), nn.Linear(24, 12), nn.GELU("tanh"))
    compare_module(mlp, torch.randn(7, 12), device=device)


def test_group_norm(device):
    torch.manual_seed(0)
    compare_module(nn.Sequential(nn.GroupNorm(4, 8), nn.SiLU()), torch.randn(2, 8, 5, 5), device=device)


def test_batchnorm2d_eval(device):
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(6)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    bn.eval()
    compare_module(bn, torch.randn(3, 6, 4, 4), device=device)


class EmbeddingClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.proj = nn.Linear(8, 5)

    def forward(self, tokens, labels):
        logits = self.proj(self.emb(tokens).mean(1))
        return Fn.cross_entropy(logits, labels)


def test_embedding_and_cross_entropy(device):
    torch.manual_seed(0)
    compare_module(EmbeddingClassifier(), torch.randint(0, 20, (6, 4)), torch.randint(0, 5, (6,)), device=device)


def test_three_step_training_loop_matches_eager(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 3)).to(device)
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend="loopnest")
    opt, ref_opt = (torch.optim.Adam(m.parameters(), lr=1e-2) for m in (model, ref))
    xs, ys = torch.randn(3, 16, 10, device=device), torch.randint(0, 3, (3, 16), device=device)
    losses, ref_losses = [], []
    for x, y in zip(xs, ys):
        for m, o, out in ((compiled, opt, losses), (ref, ref_opt, ref_losses)):
            o.zero_grad()
            loss = Fn.cross_entropy(m(x), y)
            loss.backward()
            o.step()
            out.append(loss.item())
    assert losses == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)
    assert losses[-1] < losses[0]


def test_dynamic_shapes_compile_one_kernel_for_all_sizes(device):
    recorded = []
    f = torch.compile(lambda x, w: torch.softmax(x * w, -1).sum(0), backend="loopnest", dynamic=True,
                      options={"recorder": recorded.append})
    before = dict(ln.counters)
    w = torch.randn(6, device=device)
    with torch.no_grad():
        for batch in (3, 5, 11):
            x = torch.randn(batch, 6, device=device)
            torch.testing.assert_close(f(x, w), torch.softmax(x * w, -1).sum(0))
    assert ln.counters["graphs_compiled"] - before["graphs_compiled"] == 1
    assert len(recorded) == 1 and recorded[0].program.graph.symbols()
    if device == "cpu":  # the C++ backend builds one library per graph: built (or loaded) once
        built = (ln.counters["kernels_compiled"] - before["kernels_compiled"]
                 + ln.counters["code_cache_hits"] - before["code_cache_hits"])
        assert built == 1


DYNAMIC_CASES = {
    "slice_cat": lambda x: torch.cat([x[:, 1:], x[:, :1] * 2], 1),
    "pad": lambda x: Fn.pad(x, (1, 2, 0, 1), value=0.5),
    "var_mean": lambda x: torch.var_mean(x, 0),
    "repeat_flip": lambda x: x.repeat(2, 1).flip(0),  # mod of 2*s - 1 - i: no negative numerator
    "reshape_floordiv": lambda x: x.reshape(-1, 2).sum(1).reshape(x.shape[0], -1),  # sizes s*t // 2
    "step_vs_half": lambda x: x[:, ::2] + x.reshape(x.shape[0], -1, 2).sum(-1),  # (s+1)//2 == s//2
    "gather_rows": lambda x: x[torch.arange(x.shape[0] - 1, -1, -1)] + x[:, -1:],
    # a kernel of no loops reading a size (the scale of a nearest interpolation): its symbol
    # is an argument though no domain or layout holds it
    "nearest_2x": lambda x: Fn.interpolate(x[None, None], scale_factor=2, mode="nearest").sum((0, 1)),
    # SymFloats: 0.1 / float(classes) and a mean over the batch
    "smoothed_ce": lambda x: Fn.cross_entropy(x, torch.arange(x.shape[0]) % x.shape[1], label_smoothing=0.1),
}


def test_a_dynamic_interpolation_scale_is_computed_by_a_kernel():
    """Under dynamic shapes nearest interpolation computes its scale from scalar tensors that
    ATen makes on the CPU (``scalar_tensor``, then ``true_divide``): lowered, that division runs in
    a kernel on the graph's device instead of an ATen call on the CPU, whose result a CUDA graph
    could not read."""
    recorded = []
    fn = DYNAMIC_CASES["nearest_2x"]
    f = torch.compile(fn, backend="loopnest", dynamic=True, options={"recorder": recorded.append})
    with torch.no_grad():
        for n in (3, 5):
            x = torch.randn(n, 2 * n)
            torch.testing.assert_close(f(x), fn(x))
    assert not [fb for g in recorded for fb in g.program.fallbacks if "divide" in str(fb.op)]


@pytest.mark.parametrize("case", sorted(DYNAMIC_CASES))
def test_dynamic_shapes_views_and_indexing(case):
    f = DYNAMIC_CASES[case]
    cf = torch.compile(f, backend="loopnest", dynamic=True)
    with torch.no_grad():
        for n in (3, 5, 8):
            x = torch.randn(n, 2 * n)
            torch.testing.assert_close(cf(x), f(x))


def test_batch_norm_in_training_across_batch_sizes():
    """A second batch size recompiles the graph with a symbolic batch: the running variance's
    unbiased correction divides the symbolic element count by the channels (a SymFloat of two
    sizes), which the lowering computes in float64 as Python does."""
    torch.manual_seed(0)
    eager = nn.BatchNorm1d(7)
    compiled_module = copy.deepcopy(eager)
    compiled = torch.compile(compiled_module, backend="loopnest")
    for batch in (5, 3, 4):
        x = torch.randn(batch, 7)
        torch.testing.assert_close(compiled(x), eager(x), msg=lambda m: f"batch {batch}: {m}")
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            torch.testing.assert_close(getattr(compiled_module, name), getattr(eager, name),
                                       msg=lambda m: f"batch {batch}, {name}: {m}")


def test_dynamic_graphs_pass_tensors_straight_through_unless_a_symbol_needs_a_carrier():
    recorded = []
    softmax = torch.compile(lambda x: torch.softmax(x, -1), backend="loopnest", dynamic=True,
                            options={"recorder": recorded.append})
    ramp = torch.compile(lambda x, n: torch.arange(n) * x.sum(), backend="loopnest", dynamic=True,
                         options={"recorder": recorded.append})
    with torch.no_grad():
        for n in (3, 5, 9):
            x = torch.randn(n, 2 * n)
            torch.testing.assert_close(softmax(x), torch.softmax(x, -1))
            torch.testing.assert_close(ramp(x, n + 4), torch.arange(n + 4) * x.sum())
    (direct, carried) = recorded
    assert direct.program.sym_sources and direct._direct is not None  # symbols bound from the tensor
    assert carried.program.carriers and carried._direct is None  # n reaches the graph as a carrier


def test_dynamic_shapes_with_size_arithmetic():
    f = torch.compile(lambda x: (x.reshape(-1) * x.shape[0]).reshape(x.shape[0], -1) + torch.arange(x.shape[1]),
                      backend="loopnest", dynamic=True)
    with torch.no_grad():
        for n in (2, 4, 7):
            x = torch.randn(n, 3)
            torch.testing.assert_close(f(x), x * n + torch.arange(3))


@torch.library.custom_op("lntest::scaled_sin", mutates_args=())
def scaled_sin(x: torch.Tensor, s: float) -> torch.Tensor:
    return torch.sin(x) * s


@scaled_sin.register_fake
def _(x, s):
    return torch.empty_like(x)


@torch.library.custom_op("lntest::add_twice_", mutates_args=("out",))
def add_twice_(x: torch.Tensor, out: torch.Tensor) -> None:
    out.add_(x * 2)


def test_mutating_custom_op_passes_through_as_extern():
    def f(x, y):
        y = y.clone()
        add_twice_(x.sin(), y)
        return y * 3

    x, y = torch.randn(5), torch.randn(5)
    e = ln.explain(f, x, y)
    assert len(e.fallbacks) == 1 and e.fallbacks[0].op.startswith("auto_functionalized")
    torch.testing.assert_close(torch.compile(f, backend="loopnest")(x, y), f(x, y))


def test_custom_op_passes_through_as_extern():
    def f(x):
        return scaled_sin(x.exp(), 3.0) + 1

    x = torch.randn(5)
    e = ln.explain(f, x)
    assert any("lntest" in fb.op and "custom op" in fb.reason for fb in e.fallbacks)
    torch.testing.assert_close(torch.compile(f, backend="loopnest")(x), f(x))


_SIZES_LIB = torch.library.Library("lntest_sizes", "DEF")
_SIZES_LIB.define("exp_and_rows(Tensor x) -> (Tensor, SymInt, Tensor?)")
_SIZES_LIB.impl("exp_and_rows", lambda x: (x.exp(), x.shape[0], None), "CPU")
torch.library.register_fake("lntest_sizes::exp_and_rows", lambda x: (torch.empty_like(x), x.shape[0], None),
                            lib=_SIZES_LIB)


@pytest.mark.parametrize("dynamic", [False, True])
def test_an_op_returning_sizes_beside_tensors_passes_through_as_extern(dynamic):
    """An ATen call whose results hold sizes beside tensors (cuDNN attention returns its sequence
    lengths, and a GPU training step with float16 attention calls it): the sizes follow from the
    input shapes, the symbolic ones included."""
    def f(x):
        y, n, none = torch.ops.lntest_sizes.exp_and_rows(x)
        assert none is None
        return y * n + 1

    g = torch.compile(f, backend="loopnest", dynamic=dynamic)
    for rows in (5, 7):
        x = torch.randn(rows, 3)
        torch.testing.assert_close(g(x), f(x))


def test_explain_reports_kernels_and_fallbacks():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU())
    with torch.no_grad():
        e = ln.explain(model, torch.randn(4, 8))
    assert isinstance(e, ln.Explanation) and len(e.graphs) == 1
    assert e.num_kernels == len(e.graphs[0].kernels) >= 1
    k = e.graphs[0].kernels[0]
    assert k.name.startswith("ln_") and k.kind in ("pointwise", "reduction") and k.nodes
    assert isinstance(k.bytes_moved, int) and k.bytes_moved > 0 and k.flops > 0
    assert k.source_path is not None and k.source_path.exists()
    assert [f.op for f in e.graphs[0].fallbacks] == ["aten.addmm.default"]
    text = str(e)
    assert "kernel ln_" in text and "fallback aten.addmm.default: matrix multiply" in text


def test_user_triton_op_passes_through_as_extern(tmp_path):
    """A ``torch.library.triton_op`` stays one opaque op (on the GPU, or in Triton's CPU
    interpreter without one)."""
    code = '''
import os
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
import triton, triton.language as tl
from torch.library import triton_op, wrap_triton
import loopnest as ln

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

@triton_op("lntest::tadd", mutates_args={})
def tadd(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    wrap_triton(add_kernel)[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
    return out

@tadd.register_fake  # the interpreter cannot run on fake tensors; on a GPU the default works
def _(x, y):
    return torch.empty_like(x)

x, y = torch.randn(40, device=device), torch.randn(40, device=device)
f = lambda x, y: tadd(x.sin(), y) * 2
e = ln.explain(f, x, y)
assert [fb.op for fb in e.fallbacks] == ["lntest.tadd.default"], e
torch.testing.assert_close(torch.compile(f, backend="loopnest")(x, y), (x.sin() + y) * 2)
print("ok")
'''
    env = dict(os.environ, LOOPNEST_CACHE_DIR=str(tmp_path))
    env.pop("TRITON_INTERPRET", None)  # the script decides (another test module may have set it)
    script = tmp_path / "user_triton_op.py"  # compiled @triton.jit functions must live in a file
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")


class Composites(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(8)
        self.gn = nn.GroupNorm(2, 4)

    def forward(self, x):
        a = torch.softmax(x, -1) + torch.log_softmax(x, 0) + Fn.gelu(self.ln(x))
        var, mean = torch.var_mean(x, 1, keepdim=True)
        g = self.gn(x.reshape(2, 4, 2, 2)).reshape(4, 8)
        return a * var + mean + g


def test_composites_are_lowered_not_externs():
    """softmax, log_softmax, layer/group norm, gelu and var_mean, forward and backward: no Extern."""
    recorded = []
    torch.manual_seed(0)
    m = Composites()
    compare_module(m, torch.randn(4, 8), options={"recorder": recorded.append})
    assert len(recorded) == 2
    assert [fb.op for g in recorded for fb in g.program.fallbacks] == []


def test_compile_fx_on_a_dynamo_graph_trains():
    """Another compiler hands loopnest its Dynamo graphs through the Python API."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 2))
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend=lambda gm, ex: ln.compile_fx(gm, ex, backend="cpp"))
    x = torch.randn(5, 6)
    compiled(x).sum().backward()
    ref(x).sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=RTOL, atol=ATOL)


@pytest.mark.skipif(not INTERPRETER_USABLE, reason="Triton's interpreter needs numpy < 2.3")
def test_triton_backend_forward_and_backward_in_the_interpreter(tmp_path):
    """The same lowered graphs run on the Triton backend (CPU tensors in Triton's interpreter)."""
    code = '''
import os
os.environ["TRITON_INTERPRET"] = "1"
import copy, torch, torch.nn as nn
import loopnest as ln
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(6, 12), nn.LayerNorm(12), nn.GELU(), nn.Linear(12, 3))
ref = copy.deepcopy(m)
x = torch.randn(5, 6)
f = torch.compile(m, backend="loopnest", options={"backend": "triton"})
out = f(x)
torch.testing.assert_close(out, ref(x), rtol=1e-4, atol=1e-5)
out.square().sum().backward()
ref(x).square().sum().backward()
for p, q in zip(m.parameters(), ref.parameters()):
    torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
print("ok", ln.counters["graphs_compiled"])
'''
    env = dict(os.environ, LOOPNEST_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "ok 2"


def test_saved_inputs_and_views_of_inputs_are_returned_not_copied():
    """A forward saves inputs (a Linear's weight) and views of them (``x @ w.t()`` saves ``w.t()``)
    for the backward: returned as the arguments, or views of them, never copied by a kernel."""
    recorded = []
    lin = nn.Linear(4, 3)
    f = torch.compile(lin, backend="loopnest", options={"recorder": recorded.append})
    x = torch.randn(2, 4, requires_grad=True)
    f(x).sum().backward()
    fwd = recorded[0]
    assert fwd.compiled.schedule.kernels == []
    assert "arg" in {leaf.kind for leaf in fwd.program.outputs}
    torch.testing.assert_close(lin.weight.grad, x.detach().sum(0, keepdim=True).expand(3, 4))

    recorded.clear()
    w = torch.randn(3, 4, requires_grad=True)
    g = torch.compile(lambda x, w: (x @ w.t() * 2).sum(), backend="loopnest", options={"recorder": recorded.append})
    g(x, w).backward()
    fwd = recorded[0]
    assert "arg_view" in {leaf.kind for leaf in fwd.program.outputs}
    assert all(s.buffer not in fwd.program.graph.inputs for k in fwd.compiled.schedule.kernels for s in k.elem_stores)
    torch.testing.assert_close(w.grad, 2 * x.detach().sum(0, keepdim=True).expand(3, 4))


def test_tune_db_serves_winners_swept_through_torch_compile():
    """options={"tune": "sweep"} stores winners; a later tune="db" compile serves them, no benchmarks."""
    def fn(x):
        return torch.softmax(x * 2, -1)

    x = torch.randn(32, 64)
    torch._dynamo.reset()
    swept = torch.compile(fn, backend="loopnest",
                          options={"backend": "cpp", "tune": "sweep", "tuning": {"trials": 3, "measure_s": 0.02}})
    torch.testing.assert_close(swept(x), fn(x))
    ln.counters.reset()
    torch._dynamo.reset()
    served = torch.compile(fn, backend="loopnest", options={"backend": "cpp", "tune": "db"})
    torch.testing.assert_close(served(x), fn(x))
    assert ln.counters["benchmarks_run"] == 0
    assert ln.counters["graphs_compiled"] == 1


def test_a_backend_given_tensors_of_another_device_says_so():
    """An explicit backend runs kernels on its own device: inputs that are all elsewhere would get
    their results back on that device, so the compile refuses them and names both devices."""
    fn = torch.compile(lambda x: x + 1, backend="loopnest", options={"backend": "cpp", "tune": "off"})
    with pytest.raises(Exception, match="backend 'cpp' runs kernels on cpu, but the inputs are on meta"):
        fn(torch.randn(3, device="meta"))


def test_a_forward_graph_returning_the_inputs_it_saves_takes_the_direct_path():
    recorded = []
    f = torch.compile(lambda x, w, b: Fn.layer_norm(x, (16,), w, b), backend="loopnest",
                      options={"recorder": recorded.append})
    x, w, b = (torch.randn(8, 16, requires_grad=True), torch.randn(16, requires_grad=True),
               torch.randn(16, requires_grad=True))
    for _ in range(2):
        got = torch.autograd.grad(f(x, w, b).sum(), (x, w, b))
        want = torch.autograd.grad(Fn.layer_norm(x, (16,), w, b).sum(), (x, w, b))
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)
    forward = recorded[0]
    assert any(leaf.kind == "arg" for leaf in forward.program.outputs)  # x and w, saved for backward
    assert forward._direct is not None
    args = [x.detach(), w.detach(), b.detach()]
    out = forward.run(args)
    for k, leaf in enumerate(forward.program.outputs):
        if leaf.kind == "arg":
            assert out[k] is args[leaf.value]  # the argument itself, as AOTAutograd saved it


def test_a_forward_graph_returning_views_of_its_inputs_takes_the_direct_path():
    """A tied output projection saves ``weight.t()`` (a view of an input) for its backward: the
    direct path and the written-out call plan return that view of the caller's argument."""
    recorded = []
    emb = torch.randn(50, 16, requires_grad=True)

    def head(tokens, weight):
        return torch.log_softmax(Fn.embedding(tokens, weight) @ weight.t(), -1)
    f = torch.compile(head, backend="loopnest", options={"backend": "cpp", "tune": "off", "recorder": recorded.append})
    for step in range(3):
        tokens = torch.randint(0, 50, (4, 7), generator=torch.Generator().manual_seed(step))
        g = torch.randn(4, 7, 50)
        got = torch.autograd.grad(f(tokens, emb), emb, g)[0]
        want = torch.autograd.grad(head(tokens, emb), emb, g)[0]
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    forward = recorded[0]
    views = [k for k, leaf in enumerate(forward.program.outputs) if leaf.kind == "arg_view"]
    assert views and forward._direct is not None
    w = emb.detach()
    args = [None] * len(forward.program.tensor_inputs)  # in the graph's order: the float one is the weight
    for ti in forward.program.tensor_inputs:
        args[ti.position] = w if ti.tensor.dtype.is_float else tokens
    for out in (forward.run(list(args)), forward.guarded_call()(*args), forward.guarded_call()(*args)):
        for k in views:
            position, layout = forward.program.outputs[k].value
            assert out[k].untyped_storage().data_ptr() == args[position].untyped_storage().data_ptr()
            assert out[k].stride() == tuple(s.as_int() for s in layout.strides)


@pytest.mark.parametrize("fn", [lambda x: torch.nonzero(x > 0).float().sum() + 1, lambda x: x[x > 0] * 2,
                                lambda x: torch.unique(x) + 1])
def test_graphs_with_data_dependent_sizes_run_in_eager(fn, caplog):
    """Dynamo's capture of data-dependent sizes hands over graphs with unbacked symbols; they run
    in eager PyTorch, with a warning that says why, instead of failing to compile."""
    x = torch.randn(64)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True), \
            caplog.at_level("WARNING", logger="loopnest"):
        got = torch.compile(fn, backend="loopnest", options={"backend": "cpp"})(x)
    torch.testing.assert_close(got, fn(x))
    assert "sizes depend on tensor values" in caplog.text


def test_values_of_a_python_random_generator_arrive_in_the_traced_dtype():
    """Dynamo traces ``random.Random`` draws as float32 0-d tensors but passes float64 ones at run
    time; loopnest casts them to the traced dtype (reading them as float32 would be garbage)."""
    import random

    def fn(x):
        r = random.Random(3)
        return x * r.random() + (1.0 if r.random() < 0.5 else 2.0)

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="loopnest", options={"backend": "cpp"})
    for _ in range(3):  # the first call, then the written-out call plan
        x = torch.randn(5)
        torch.testing.assert_close(compiled(x), fn(x))


@pytest.mark.parametrize("options", [{}, {"padding_idx": 3}, {"scale_grad_by_freq": True}])
def test_embedding_backward_matches_eager(options):
    """The embedding's backward (a masked index_put with accumulate), with its padding row and
    frequency scaling, and indices repeated."""
    def f(i, w):
        return torch.nn.functional.embedding(i, w, **options).tanh().sum()

    torch.manual_seed(0)
    w = torch.randn(50, 8, requires_grad=True)
    w_eager = w.detach().clone().requires_grad_()
    i = torch.randint(0, 50, (4, 30))
    i[0, :3] = 3
    torch.compile(f, backend="loopnest")(i, w).backward()
    f(i, w_eager).backward()
    torch.testing.assert_close(w.grad, w_eager.grad)
