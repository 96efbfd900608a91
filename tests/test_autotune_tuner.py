"""The tuner end to end on SQLite and PostgreSQL: sweep, store, serve; failures never win."""
from __future__ import annotations

import dataclasses
import logging

import optuna
import pytest
import torch

from autotune_support import absmax_graph, db_url, fast, rows_graph  # noqa: F401 - db_url is a fixture
from conftest import INTERPRETER_USABLE, assert_close
from loopnest.autotune.compile_time import tuner_for
from loopnest.autotune.evaluate import KernelEvaluator, TrialRecorder
from loopnest.autotune.harness import GraphHarness
from loopnest.autotune.keys import study_name, tuning_key
from loopnest.core.timing import BenchOptions
from loopnest.db.api import open_db
from loopnest.autotune.study import StudyLoop
from loopnest.autotune.tuner import GraphTuner
from loopnest.backends.cpp.backend import CppBackend
from loopnest.backends.cpp.params import CppConfig
from loopnest.backends.cpp.space import search_space as cpp_space
from loopnest.backends import registry
from loopnest.core import settings as ln_settings
from loopnest.core.counters import counters
from loopnest.db.api import TrialState
from loopnest.pipeline import compile_graph as build

CPP = registry.get("cpp")


def compile_graph(graph, backend=CPP, tune="off", tuning=None):
    return build(graph, backend, tuner=tuner_for(tune, tuning))


def key_of(compiled, env=None):
    kernel = compiled.schedule.kernels[0]
    return kernel, tuning_key(kernel, "cpp", CPP.hardware(), env or {})


def test_sweep_stores_a_verified_winner_and_db_mode_serves_it(db_url):
    graph, args = rows_graph()
    swept = compile_graph(graph, tune="sweep", tuning=fast(db_url, trials=3))
    (decision,) = swept.tuning.values()
    assert decision.source == "sweep" and decision.lookup == "miss"
    kernel, key = key_of(swept)
    db = open_db(db_url)
    trials = db.trials(key)
    assert len(trials) >= 3 and all(t.state != TrialState.RUNNING for t in trials)
    for t in trials:
        if t.state == TrialState.OK:
            assert 0 < t.p20_us <= t.p50_us <= t.p80_us and t.verified_error is not None
    (winner,) = db.winners()
    assert winner.default_time_us and winner.speedup and winner.config == decision.config
    assert db.trials(key)[[t.id for t in trials].index(winner.trial_id)].state == TrialState.OK

    counters.reset()
    served = compile_graph(graph, tune="db", tuning=fast(db_url))
    assert counters["benchmarks_run"] == 0
    (decision,) = served.tuning.values()
    assert (decision.source, decision.lookup) == ("db", "exact")
    assert served.configs[kernel.name] == CppConfig.from_json(winner.config)
    var, mean = torch.var_mean(args[0], 1, correction=0)
    got = served(*args)
    assert_close(got[0], var, "var")
    assert_close(got[1], mean, "mean")


def test_optuna_study_lives_in_the_tuning_db_under_its_key(db_url):
    graph, _ = absmax_graph()
    compiled = compile_graph(graph, tune="sweep", tuning=fast(db_url, trials=2, study_prefix="mine"))
    _, key = key_of(compiled)
    name = study_name("mine", key)
    assert name in optuna.get_all_study_names(db_url)
    study = optuna.load_study(study_name=name, storage=db_url)
    states = {t.user_attrs["state"] for t in study.trials}
    assert states <= {s.value for s in TrialState} and "ok" in states
    assert study.trials[0].user_attrs.get("warm_start") == "default"


class FaultyCpp(CppBackend):
    """The C++ backend, except that one config's kernel writes zeros and returns at once: the
    fastest candidate of all, and wrong."""

    def __init__(self, bad: CppConfig):
        self.bad = bad

    def compile(self, kernels):
        artifact = super().compile(kernels)
        launchers = {k.name: zero_writer(k) if c == self.bad else artifact.launchers[k.name] for k, c in kernels}
        return dataclasses.replace(artifact, launchers=launchers)


def zero_writer(kernel):
    def launch(buffers, syms):
        for name in kernel.outputs:
            buffers[name].zero_()
    return launch


@pytest.mark.parametrize("oracle", ["eager", "interpreter"])
def test_a_wrong_config_is_recorded_wrong_result_and_never_wins(db_url, oracle):
    graph, args = absmax_graph()
    compiled = compile_graph(graph)
    expected = [args[0].abs().amax()] if oracle == "eager" else None
    harness = GraphHarness(compiled, lambda g: list(g(*args)), expected, BenchOptions(budget_s=0.02))
    bad = CppConfig(threads=1)
    settings = fast(db_url, trials=8, sampler="grid")
    tuner = GraphTuner(harness, settings, open_db(db_url), backend=FaultyCpp(bad))
    (report,) = tuner.tune_all()
    _, key = key_of(compiled)
    db = open_db(db_url)
    wrong = [t for t in db.trials(key) if t.state == TrialState.WRONG_RESULT]
    assert [t.config for t in wrong] == [bad.to_json()] and "expected" in wrong[0].message
    (winner,) = db.winners()
    assert winner.config != bad.to_json() and report.config == winner.config
    assert report.failed == 1


def test_stale_and_nearest_winners_are_only_warm_starts(db_url):
    graph, _ = rows_graph(rows=64)
    swept = compile_graph(graph, tune="sweep", tuning=fast(db_url, trials=2))
    kernel, key = key_of(swept)
    other, _ = rows_graph(rows=32)
    near = compile_graph(other, tune="db", tuning=fast(db_url))
    (decision,) = near.tuning.values()
    assert (decision.source, decision.lookup) == ("default", "nearest") and "nearest shape" in decision.note
    db = open_db(db_url)
    near_winner = CppConfig(threads=1, schedule="guided", grain=1)  # lanes: fixed (two-pass rows)
    # faster than any measured time, so it replaces the sweep's winner (the DB keeps the fastest)
    db.store_winner(key, near_winner.to_json(), 0.001, 8.0, CPP.software())
    compile_graph(other, tune="sweep", tuning=fast(db_url, trials=2))
    _, other_key = key_of(near)
    study = optuna.load_study(study_name=study_name("ln", other_key), storage=db_url)
    warm = {t.user_attrs.get("warm_start"): t.user_attrs["config"] for t in study.trials if "config" in t.user_attrs}
    assert warm["nearest"] == near_winner.to_json()

    old_software = {**CPP.software(), "codegen_version": 0}
    marked = CppConfig(threads=1, schedule="dynamic", grain=8)
    db.store_winner(key, marked.to_json(), 5.0, 10.0, old_software)
    stale = compile_graph(graph, tune="db", tuning=fast(db_url))
    (decision,) = stale.tuning.values()
    assert (decision.source, decision.lookup) == ("default", "stale")
    assert stale.configs[kernel.name] == CppBackend().default_config(kernel)

    compile_graph(graph, tune="sweep", tuning=fast(db_url, trials=3))
    study = optuna.load_study(study_name=study_name("ln", key), storage=db_url)
    warm = {t.user_attrs.get("warm_start"): t.user_attrs["config"] for t in study.trials
            if "warm_start" in t.user_attrs and "config" in t.user_attrs}
    assert warm["stale"] == marked.to_json()
    (winner,) = [w for w in db.winners() if w.sizes == key.sizes]
    assert winner.software == CPP.software() and not winner.stale


@pytest.mark.parametrize("stored", [
    {"threads": 1, "lanes": 3, "chunk": 0, "schedule": "static", "grain": 0},
    {"threads": 1, "lanes": 16, "chunk": 0, "schedule": "static", "grain": 0, "hook": "__import__('os')"},
    {"threads": 10_000},
])
def test_a_tampered_stored_config_is_skipped_with_a_warning(db_url, stored, caplog):
    graph, args = rows_graph()
    compiled = compile_graph(graph)
    kernel, key = key_of(compiled)
    db = open_db(db_url)
    db.register_kernel(key.kernel_hash, "cpp", kernel.name, kernel.text())
    db.store_winner(key, stored, 1.0, 2.0, CPP.software())
    with caplog.at_level(logging.WARNING, logger="loopnest.autotune"):
        served = compile_graph(graph, tune="db", tuning=fast(db_url))
    (decision,) = served.tuning.values()
    assert (decision.source, decision.lookup) == ("default", "invalid")
    assert served.configs[kernel.name] == CppBackend().default_config(kernel)
    assert "skipping the stored config" in caplog.text


def test_time_budget_stops_a_study(tmp_path):
    graph, _ = rows_graph()
    compiled = compile_graph(graph, tune="sweep",
                             tuning=fast(f"sqlite:///{tmp_path / 't.db'}", trials=50, time_budget_s=0.5))
    (decision,) = compiled.tuning.values()
    assert decision.source == "sweep"
    db = open_db(f"sqlite:///{tmp_path / 't.db'}")
    assert 1 <= len(db.trials()) < 50


@pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::DeprecationWarning")  # numpy in the interpreter
@pytest.mark.skipif(not INTERPRETER_USABLE, reason="Triton 3.6's interpreter fails on loops over tensors "
                                                   "with numpy >= 2.3")
def test_triton_kernels_tune_in_the_interpreter(tmp_path):
    graph, args = absmax_graph(n=2000)
    url = f"sqlite:///{tmp_path / 't.db'}"
    with ln_settings.scope(triton_interpret=True):
        compiled = compile_graph(graph, registry.get("triton"), tune="sweep", tuning=fast(url, trials=3, sampler="random"))
        (decision,) = compiled.tuning.values()
        assert decision.source == "sweep"
        assert_close(compiled(*args)[0], args[0].abs().amax(), "absmax")
    trials = open_db(url).trials()
    assert len(trials) >= 3 and {t.backend for t in trials} == {"triton"}
    bad = [(t.state, t.message) for t in trials if t.state not in (TrialState.OK, TrialState.INVALID)]
    assert not bad, bad


class CountingCpp(CppBackend):
    """The C++ backend, remembering every config it was asked to build."""

    def __init__(self):
        self.built = []

    def compile(self, kernels):
        self.built.extend(c for _, c in kernels)
        return super().compile(kernels)


def test_points_rejected_by_static_constraints_are_recorded_invalid_and_never_built(tmp_path):
    graph, args = rows_graph()
    compiled = compile_graph(graph)
    kernel, key = key_of(compiled)
    url = f"sqlite:///{tmp_path / 't.db'}"
    db = open_db(url)
    db.register_kernel(key.kernel_hash, "cpp", kernel.name, kernel.text())
    space = dataclasses.replace(cpp_space(kernel, key.hardware),
                                constraint=lambda c: "grains above 1 rejected" if c.grain > 1 else None)
    backend = CountingCpp()
    harness = GraphHarness(compiled, lambda g: list(g(*args)), None, BenchOptions(budget_s=0.02))
    evaluator = KernelEvaluator(kernel, backend, harness, 60.0, 2,
                                TrialRecorder(db, key, "constrained"))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    result = StudyLoop(study, space, evaluator, fast(url, trials=4), "tag").run()
    invalid = db.trials(key, state=TrialState.INVALID)
    assert invalid and all(t.config["grain"] > 1 and t.message == "grains above 1 rejected" for t in invalid)
    assert backend.built and all(c.grain <= 1 for c in backend.built)
    assert result.counts[0] == 4 and all(c.grain <= 1 for c, _ in result.results.values())


@pytest.mark.parametrize("attrs", [
    {"state": "runtime_error", "p20_us": 1.0, "p50_us": 2.0},        # killed between two attribute writes
    {"state": "ok"},                                                 # ok without its timings
    {"state": "ok", "p20_us": 1.0, "p50_us": "2", "p80_us": 3.0},    # a timing that is not a number
    {"state": "bogus", "p20_us": 1.0, "p50_us": 2.0, "p80_us": 3.0},  # an unknown state
])
def test_a_partial_or_damaged_trial_record_is_no_result(attrs):
    """A sweep that read such a trial back (another process's, or one written before a SIGKILL
    between two of its attribute writes) failed with KeyError or took it as measured."""
    from loopnest.autotune.study import previous_results

    graph, (X,) = rows_graph()
    kernel = build(graph, CppBackend()).schedule.kernels[0]
    space = cpp_space(kernel, CppBackend().hardware())
    config = space.validate(CppBackend().default_config(kernel).to_json())
    study = optuna.create_study()
    timed = {"state": "ok", "p20_us": 1.0, "p50_us": 2.0, "p80_us": 3.0}
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.COMPLETE, value=2.0,
                                              user_attrs={"config": config.to_json(), "software": "tag", **timed}))
    damaged = {"config": dataclasses.replace(config, threads=1).to_json(), "software": "tag", **attrs}
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs=damaged))
    results = previous_results(study.get_trials(deepcopy=False), space, "tag")
    assert [c for c, _ in results.values()] == [config]


def test_random_inputs_keep_indices_in_range_through_pointwise_nodes_and_scatters(tmp_path):
    """A sweep without example inputs (torch.compile's) draws its own: integer inputs that reach a
    gather index through a pointwise node (cross-entropy's ``where(t != -100, t, 0)``) or that
    place a scatter's one-hot (an index value) stay inside what they index, so the sweep of a
    cross-entropy forward and backward runs instead of stopping at an out-of-range index."""
    from loopnest.autotune.compile_time import index_bounds
    import torch.nn.functional as F

    graphs = []
    f = torch.compile(lambda x, t: F.cross_entropy(x, t), backend="loopnest", dynamic=False,
                      options={"backend": "cpp", "tune": "sweep", "recorder": graphs.append,
                               "tuning": {"db_url": f"sqlite:///{tmp_path}/t.db", "trials": 2, "measure_s": 0.02}})
    x = torch.randn(16, 300, requires_grad=True)
    t = torch.randint(0, 300, (16,))
    loss = f(x, t)
    loss.backward()
    torch.testing.assert_close(loss, F.cross_entropy(x, t))
    torch.testing.assert_close(x.grad, torch.autograd.grad(F.cross_entropy(x, t), x)[0])
    for g in graphs:  # forward and backward: the target's bound is the class count
        bounds = index_bounds(g.compiled.graph, {})
        targets = [b for b in g.compiled.graph.inputs if g.compiled.graph.buffers[b].dtype.torch == torch.int64]
        assert targets and all(bounds.get(b) == 300 for b in targets), (bounds, targets)


def test_a_training_row_sweeps_its_forward_and_backward_graphs_and_steps_find_both(db_url):
    """``autotune sweep layernorm_train``: the graphs of one step, as torch.compile partitions
    them, are tuned; a ``tune="db"`` training step then takes exact winners for both."""
    from loopnest.autotune.sweep import sweep, target, targets
    from loopnest.autotune.workloads import WORKLOADS, training_step

    found = targets("layernorm_train", "cpp", "tiny")
    assert [t.name for t in found] == ["layernorm_train/fwd", "layernorm_train/bwd"]
    reports = [r for t in found for r in sweep(t, "cpp", fast(db_url, trials=2))]
    assert len(reports) == 2 and all(r.ok for r in reports)
    with pytest.raises(ValueError, match="training row"):
        target("layernorm_train", "cpp", "tiny")
    lookups: list = []
    workload = WORKLOADS["layernorm_train"]
    torch._dynamo.reset()
    step = torch.compile(workload.fn, backend="loopnest", dynamic=False,
                         options={"backend": "cpp", "tune": "db", "tuning": {"db_url": db_url},
                                  "recorder": lambda g: lookups.extend(d.lookup for d in g.compiled.tuning.values())})
    training_step(step, workload.train_inputs("tiny"))
    assert lookups == ["exact", "exact"]
