"""Bad input raises errors that say what was wrong."""
import pytest
import torch

import loopnest as ln


def test_shape_mismatch_in_broadcast():
    x, y = ln.placeholder("x", (3, 4), ln.float32), ln.placeholder("y", (5,), ln.float32)
    with pytest.raises(ValueError, match=r"add: shapes \(3, 4\) and \(5\) do not broadcast"):
        x + y


def test_unsupported_dtype():
    with pytest.raises(TypeError, match="unsupported dtype torch.complex64"):
        ln.placeholder("x", (3,), torch.complex64)


def test_out_of_range_axis():
    x = ln.placeholder("x", (3, 4), ln.float32)
    with pytest.raises(IndexError, match="sum: axis 2 is out of range for a tensor of rank 2"):
        ln.sum(x, 2)
    with pytest.raises(IndexError, match="permute"):
        ln.permute(x, (0, 5))


def test_bad_reshape_and_index():
    x = ln.placeholder("x", (3, 4), ln.float32)
    with pytest.raises(ValueError, match=r"reshape: shape \(5, 2\) has 10 elements, \(3, 4\) has 12"):
        ln.reshape(x, (5, 2))
    with pytest.raises(IndexError, match="index 3 is out of range for dimension 0 of size 3"):
        x[3]


def test_call_time_errors():
    x = ln.placeholder("x", ("N", 4), ln.float32)
    y = ln.placeholder("y", ("N",), ln.float32)
    f = ln.compile(x * y[:, None])
    with pytest.raises(ln.InputError, match=r"takes 2 tensors \(x, y\), got 1"):
        f(torch.randn(2, 4))
    with pytest.raises(ln.InputError, match="argument 'x' must have dtype torch.float32, got torch.float64"):
        f(torch.randn(2, 4, dtype=torch.float64), torch.randn(2))
    with pytest.raises(ln.InputError, match=r"argument 'x' must have rank 2"):
        f(torch.randn(8), torch.randn(2))
    with pytest.raises(ln.InputError, match=r"size N is 2 from an earlier argument but 3"):
        f(torch.randn(2, 4), torch.randn(3))
    with pytest.raises(ln.InputError, match=r"argument 'x' must have shape \(2, 4\), got \(2, 5\)"):
        f(torch.randn(2, 5), torch.randn(2))
    with pytest.raises(ln.InputError, match="must be a torch.Tensor, got list"):
        f([1, 2], torch.randn(2))


@pytest.mark.parametrize("entry", ["dsl", "compile_fx"])
def test_fake_tensors_raise_instead_of_crashing(entry):
    """A FakeTensor has the right shape, dtype and device but no memory: a kernel given its null
    pointer would crash the process, so every call path (first call, kept plan, written entry)
    refuses it, also after real calls have made those paths fast."""
    from torch._subclasses import FakeTensorMode
    if entry == "dsl":
        x = ln.placeholder("x", (4, 8), ln.float32)
        f = ln.compile(x * 2)
    else:
        f = ln.compile_fx(torch.fx.symbolic_trace(lambda x: x * 2), [torch.randn(4, 8)], backend="cpp")
    with FakeTensorMode():
        fake = torch.randn(4, 8)
    with pytest.raises(ln.InputError, match="FakeTensor without data"):
        f(fake)
    real = torch.randn(4, 8)
    for _ in range(3):
        torch.testing.assert_close(f(real), real * 2)
        torch.testing.assert_close(f(torch.nn.Parameter(real)), real * 2, check_stride=False)
    with pytest.raises(ln.InputError, match="FakeTensor without data"):
        f(fake)


def test_lazily_negated_views_are_read_as_their_values():
    """``z.conj().imag`` and ``torch._neg_view`` hold minus their values in memory (the negative
    bit): every call path reads them as the values they stand for, in their own strides."""
    x = ln.placeholder("x", ("N", 8), ln.float32)
    dsl = ln.compile(ln.sum(x * 2, 1))
    fx = ln.compile_fx(torch.fx.symbolic_trace(lambda x: (x * 2).sum(-1)), [torch.randn(4, 8)], backend="cpp")
    strided = torch.randn(4, 8, dtype=torch.complex64).conj().imag
    contiguous = torch._neg_view(torch.randn(4, 8))
    assert strided.is_neg() and contiguous.is_neg() and contiguous.is_contiguous()
    for f in (dsl, fx):
        for t in (strided, contiguous, strided, contiguous):  # first calls, then kept plans
            torch.testing.assert_close(f(t), (t.resolve_neg() * 2).sum(-1))
            plain = torch.randn(4, 8)
            torch.testing.assert_close(f(plain), (plain * 2).sum(-1))


@pytest.mark.parametrize("layout", ["sparse", "sparse_csr", "mkldnn"])
def test_non_strided_layouts_raise(layout):
    x = ln.placeholder("x", (4, 8), ln.float32)
    f = ln.compile(x * 2)
    t = getattr(torch.randn(4, 8), f"to_{layout}")()
    with pytest.raises(ln.InputError, match="to_dense"):
        f(t)


def test_overlapping_strides_are_rejected():
    x = ln.placeholder("x", (3, 4), ln.float32)
    f = ln.compile(x + 1)
    overlapping = torch.randn(20).as_strided((3, 4), (2, 1))
    with pytest.raises(ln.InputError, match=r"overlapping strides \(2, 1\).*contiguous"):
        f(overlapping)


def test_type_errors_name_the_op():
    x = ln.placeholder("x", (3,), ln.float32)
    with pytest.raises(TypeError, match="bitand is defined on integer and bool tensors, got float32"):
        x & x
    with pytest.raises(TypeError, match="mean: input dtype must be floating point"):
        ln.mean(ln.placeholder("i", (3,), ln.int32))
    with pytest.raises(TypeError, match="no truth value"):
        bool(x > 0)
