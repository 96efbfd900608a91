"""The autotuner: Optuna studies over each backend's search space, verified measurements, warm
starts from the tuning DB, and the compile-time tuner.

Modules: ``options`` (``TuneSettings``), ``study`` (the ask/evaluate/tell loop, heartbeats,
resume), ``evaluate`` (parallel builds, verify-then-time, trial records), ``harness`` (a compiled
graph run once so each kernel can be checked and timed alone), ``verify``, ``tuner`` (one graph:
studies, winners), ``compile_time`` (``tuner_for``: the tuner of ``tune="db"``/``"sweep"`` that
the entry points pass down to ``pipeline.compile_graph``), ``sweep`` and ``workloads`` (torch
workloads through the lowering), ``queries`` (what the CLI asks of the DB), ``report`` (plots).
Nothing is imported here, so ``loopnest.autotune.options`` loads without Optuna or torch;
``loopnest.autotune.request`` (the tuning service's entry point, ``requests``) loads on first use.
"""
import importlib


def __getattr__(name: str):
    """``loopnest.autotune.request``, imported on first use (it needs torch)."""
    if name == "request":
        return importlib.import_module(f"{__name__}.requests").request
    raise AttributeError(f"module 'loopnest.autotune' has no attribute {name!r}")
