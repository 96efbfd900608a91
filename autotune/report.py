"""Plots of one tuning study: optimization history, parameter importance, best vs default.

Drawn with matplotlib (Agg) as one PNG, or an HTML page embedding it with a table of the best
trials (Optuna's own plots are plotly, whose PNG export needs a browser).
"""
from __future__ import annotations

import base64
import html
import itertools
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first
import optuna  # noqa: E402
from optuna.trial import TrialState as OptunaState  # noqa: E402


def _trials(study: optuna.Study, states=(OptunaState.COMPLETE, OptunaState.FAIL)):
    return study.get_trials(deepcopy=False, states=states)


def _done(study: optuna.Study):
    return _trials(study, (OptunaState.COMPLETE,))


def _history(ax, study: optuna.Study) -> None:
    done = _done(study)
    numbers, values = [t.number for t in done], [t.value for t in done]
    ax.scatter(numbers, values, s=14, label="trial (p50)")
    if done:
        ax.step(numbers, list(itertools.accumulate(values, min)), where="post", color="C1", label="best so far")
    failed = [t.number for t in _trials(study, (OptunaState.FAIL,))]
    if failed and done:
        ax.scatter(failed, [max(values)] * len(failed), marker="x", color="C3", s=18, label="failed")
    if values and min(values) > 0 and max(values) / min(values) > 20:
        ax.set_yscale("log")
    ax.set(title="optimization history", xlabel="trial", ylabel="time (µs)")
    ax.legend(fontsize=7)


def _importance(ax, study: optuna.Study) -> None:
    done = _done(study)
    try:
        scores = optuna.importance.get_param_importances(study) if len(done) >= 2 else {}
    except (RuntimeError, ValueError):
        scores = {}
    if scores:
        names = list(scores)[::-1]
        ax.barh(names, [scores[n] for n in names])
    else:
        ax.text(0.5, 0.5, "not enough completed trials", ha="center", va="center")
    ax.set(title="parameter importance (fANOVA)", xlabel="importance")


def best_and_default(study: optuna.Study) -> tuple[float | None, float | None]:
    """(best p50, default p50) in µs among completed trials (None if missing)."""
    done = _done(study)
    best = min((t.value for t in done), default=None)
    default = next((t.value for t in done if t.user_attrs.get("warm_start") == "default"), None)
    return best, default


def _versus(ax, study: optuna.Study) -> None:
    best, default = best_and_default(study)
    bars = [(label, value) for label, value in (("default", default), ("best", best)) if value is not None]
    ax.bar([label for label, _ in bars], [value for _, value in bars], color=["C7", "C2"][: len(bars)])
    ax.set_title(f"best vs default: {default / best:.2f}x" if best and default else "best vs default")
    ax.set_ylabel("time (µs)")


def figure_png(study: optuna.Study) -> bytes:
    """The three plots side by side, as PNG bytes."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, draw in zip(axes, (_history, _importance, _versus)):
        draw(ax, study)
    fig.suptitle(study.study_name, fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def _table(study: optuna.Study, top: int = 10) -> str:
    done = sorted(_done(study), key=lambda t: t.value)
    rows = "".join(f"<tr><td>{t.number}</td><td>{t.value:.2f}</td>"
                   f"<td><code>{html.escape(str(t.user_attrs.get('config', t.params)))}</code></td></tr>"
                   for t in done[:top])
    return f"<table><tr><th>trial</th><th>p50 µs</th><th>config</th></tr>{rows}</table>"


def write_report(study: optuna.Study, out: Path) -> Path:
    """Write ``out`` as .png, or .html (the plot embedded, plus the best trials)."""
    out = Path(out)
    png = figure_png(study)
    if out.suffix.lower() == ".png":
        out.write_bytes(png)
    elif out.suffix.lower() in (".html", ".htm"):
        img = base64.b64encode(png).decode()
        out.write_text(f"<!doctype html><meta charset='utf-8'><title>{html.escape(study.study_name)}</title>"
                       f"<h1>{html.escape(study.study_name)}</h1><img src='data:image/png;base64,{img}'>"
                       f"<h2>best trials</h2>{_table(study)}\n")
    else:
        raise ValueError(f"report file must end in .png or .html, got {out.name!r}")
    return out
