"""The autotuner: Optuna studies over each backend's search space, verified measurements, warm
starts from the tuning DB, and the compile-time lookup.

Modules: ``space`` (typed knobs and static constraints), ``study`` (the ask/evaluate/tell loop,
heartbeats, resume), ``evaluate`` (parallel builds, verify-then-time, trial records), ``harness``
(a compiled graph run once so each kernel can be checked and timed alone), ``measure`` and
``verify``, ``tuner`` (one graph: studies, winners), ``compile_time`` (``tune="db"``/``"sweep"``
in ``pipeline.compile_graph``), ``sweep`` and ``workloads`` (torch workloads through the
lowering), ``report`` (plots), ``hardware`` (fingerprints and software versions). Nothing is
imported here: ``import loopnest`` stays free of SQLAlchemy and Optuna until tuning is asked for.
"""
