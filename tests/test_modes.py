"""torch.compile's ``mode=`` with loopnest: each mode means what it means for Inductor."""
from __future__ import annotations

import pytest
import torch

from loopnest.api import compile_options
from loopnest.core import settings
from loopnest.db.api import TrialState, TuningDB


def softmax(x):
    return torch.softmax(x * 2, -1)


def compiled_call(mode, x):
    torch._dynamo.reset()
    return torch.compile(softmax, backend="loopnest", mode=mode)(x)


@pytest.fixture
def fresh_db(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'modes.db'}"
    monkeypatch.setenv("LOOPNEST_DB", url)
    monkeypatch.setenv("LOOPNEST_TUNE_TRIALS", "2")
    return url


@pytest.mark.parametrize("mode", [None, "default", "reduce-overhead"])
def test_modes_that_do_not_tune_serve_the_db_and_store_nothing(fresh_db, mode):
    x = torch.randn(32, 40)
    torch.testing.assert_close(compiled_call(mode, x), softmax(x))
    assert TuningDB(fresh_db).winners() == []  # on the CPU reduce-overhead is the default


@pytest.mark.parametrize("mode", ["max-autotune", "max-autotune-no-cudagraphs"])
def test_max_autotune_sweeps_with_the_budget_from_the_settings(fresh_db, mode):
    x = torch.randn(32, 40)
    torch.testing.assert_close(compiled_call(mode, x), softmax(x))
    db = TuningDB(fresh_db)
    winners = db.winners()
    assert winners and all(w.backend == "cpp" for w in winners)
    measured = [t for t in db.trials() if t.state != TrialState.INVALID]
    for study in {t.study for t in measured}:
        assert len([t for t in measured if t.study == study]) <= 2  # LOOPNEST_TUNE_TRIALS


def test_an_unknown_mode_lists_the_valid_ones(fresh_db):
    with pytest.raises(Exception, match="unknown mode 'bogus'; valid modes: default, max-autotune"):
        compiled_call("bogus", torch.randn(4, 4))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU")
@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_cuda_inference_graphs_replay_as_cuda_graphs(fresh_db, mode):
    from loopnest.lowering.graph_replay import CudaGraphBoxed

    seen = []
    real_init = CudaGraphBoxed.__init__

    def spy(self, lowered, mode=True):
        seen.append(mode)
        real_init(self, lowered, mode)

    x = torch.randn(64, 80, device="cuda")
    torch._dynamo.reset()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(CudaGraphBoxed, "__init__", spy)
        fn = torch.compile(softmax, backend="loopnest", mode=mode)
        for _ in range(3):  # warm-up, capture, replay
            torch.testing.assert_close(fn(x), softmax(x))
    assert seen == [True]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without a GPU")
def test_triton_without_a_gpu_names_the_interpreter():
    with settings.scope(triton_interpret=False), pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        compile_options(backend="triton")
