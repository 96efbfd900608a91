"""Shared pytest setup: an isolated code cache and tuning DB, NaN-poisoned buffers, tolerances."""
import os

import numpy as np
import pytest
import torch

from loopnest.backends import registry
from loopnest.core import settings

# Every buffer loopnest allocates starts as NaN (or a sentinel), so unwritten elements show.
os.environ.setdefault("LOOPNEST_POISON", "1")


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Point loopnest's on-disk caches and tuning DB at temp dirs, whatever the environment says:
    tests never touch the user's DB (torch.compile defaults to tune="db") or code cache."""
    os.environ["LOOPNEST_CACHE_DIR"] = str(tmp_path_factory.mktemp("ln-cache"))
    os.environ["LOOPNEST_DB"] = f"sqlite:///{tmp_path_factory.mktemp('ln-db')}/tuning.db"
    yield


# Triton 3.6's interpreter fails on loops over tensors with numpy >= 2.3 (the GPU image has one)
INTERPRETER_USABLE = tuple(map(int, np.__version__.split(".")[:2])) < (2, 3)


@pytest.fixture(autouse=True)
def _triton_mode():
    """Triton kernels run in Triton's CPU interpreter on machines without a GPU, in every test
    (nothing depends on the environment or on which test module was imported first)."""
    with settings.scope(triton_interpret=not torch.cuda.is_available()):
        yield


@pytest.fixture
def fresh_dynamo():
    """Dynamo's caches cleared before and after the test: nothing compiled by another test, and no
    size made dynamic by another test's recompiles."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(params=["cpp", "triton"])
def backend(request):
    """Each backend in turn (Triton in its interpreter without a GPU), for shared correctness tests."""
    return registry.get(request.param)


@pytest.fixture
def real_gpu():
    """Triton kernels compiled for the GPU, whatever TRITON_INTERPRET says."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    with settings.scope(triton_interpret=False):
        yield



TOLERANCES = {
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=2e-2, rtol=2e-2),
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float64: dict(atol=1e-10, rtol=1e-10),
}


def assert_close(got, want, what=""):
    """Exact for integers/bools; dtype-fit tolerances for floats; shapes and dtypes must match."""
    assert isinstance(got, torch.Tensor), f"{what}: got {type(got).__name__}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if want.dtype.is_floating_point:
        torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m: f"{what}: {m}", **TOLERANCES[want.dtype])
    else:
        assert torch.equal(got, want), f"{what}: {got} != {want}"
