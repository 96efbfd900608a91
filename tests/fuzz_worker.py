"""The fuzz test's worker process: reads cases (one JSON object a line) on stdin, runs each in
eager PyTorch and through loopnest's C++ backend, and answers one JSON line per case on stdout.

A case is a random DSL graph (``dsl_trees`` trees of the ops below, an optional gather and an
optional reduction) with its input values. The answer says what eager did (results or the error
it raised) and what loopnest did, and, when both returned, whether they agree. The test runs this
in a subprocess so that a kernel killed by a signal fails the test instead of the test run.
"""
from __future__ import annotations

import json
import sys
import traceback

import torch

import dsl_trees
import loopnest as ln
from dsl_trees import DSL, TORCH


def _nonzero(a, world: int):
    """``a`` with zeros replaced by 1 (divisors, while integer division by zero is excluded)."""
    return ln.where(a == 0, 1, a) if world == DSL else torch.where(a == 0, 1, a)


def _safe(fn, world: int):
    return lambda a, b: fn(a, _nonzero(b, world))


COMMON_UNARY = {"neg": (lambda a: -a, torch.neg), "abs": (abs, torch.abs)}
COMMON_BINARY = {
    "add": (lambda a, b: a + b, torch.add), "sub": (lambda a, b: a - b, torch.sub),
    "mul": (lambda a, b: a * b, torch.mul), "max": (ln.maximum, torch.maximum), "min": (ln.minimum, torch.minimum),
    "where": (lambda a, b: ln.where(a > b, a, b), lambda a, b: torch.where(a > b, a, b)),
}
DIVISIONS = {"floordiv": (lambda a, b: a // b, torch.floor_divide), "mod": (lambda a, b: a % b, torch.remainder)}
SAFE_DIVISIONS = {name: (_safe(f, DSL), _safe(g, TORCH)) for name, (f, g) in DIVISIONS.items()}
FLOAT_UNARY = {**COMMON_UNARY, "exp": (ln.exp, torch.exp), "log": (ln.log, torch.log), "sqrt": (ln.sqrt, torch.sqrt),
               "tanh": (ln.tanh, torch.tanh), "sigmoid": (ln.sigmoid, torch.sigmoid)}
FLOAT_BINARY = {**COMMON_BINARY, **DIVISIONS, "div": (lambda a, b: a / b, torch.div)}


def tables(float_case: bool, safe_division: bool) -> tuple[dict, dict]:
    """(unary, binary) op tables for a float or an integer case."""
    if float_case:
        return FLOAT_UNARY, FLOAT_BINARY
    return COMMON_UNARY, {**COMMON_BINARY, **(SAFE_DIVISIONS if safe_division else DIVISIONS)}


def _amax(t, axis, keepdim):
    return torch.amax(t, dim=(0, 1) if axis is None else axis, keepdim=keepdim)


def _amin(t, axis, keepdim):
    return torch.amin(t, dim=(0, 1) if axis is None else axis, keepdim=keepdim)


def _sum(t, axis, keepdim):
    return torch.sum(t, dim=(0, 1) if axis is None else axis, keepdim=keepdim)


def _mean(t, axis, keepdim):
    return torch.mean(t, dim=(0, 1) if axis is None else axis, keepdim=keepdim)


REDUCE = {  # name: (dsl_fn, torch_fn, floats only)
    "sum": (ln.sum, _sum, False), "max": (ln.max, _amax, False), "min": (ln.min, _amin, False),
    "argmax": (ln.argmax, torch.argmax, False), "mean": (ln.mean, _mean, True),
}
EMPTY_RAISES = {"max", "min", "argmax"}  # eager raises for these over an empty dimension


def run_graph(case: dict, world: int, inputs: dict):
    """The case's outputs computed in ``world`` (DSL tensors or torch results)."""
    unary, binary = tables(case["float"], case["safe_division"])
    x, y = inputs["x"], inputs["y"]
    if "c" not in dsl_trees.leaves_of(case["pre"]):
        c = None  # eager would gather (and raise) even where nothing reads the result
    elif case["gather"]:
        c = ln.gather(x, 1, inputs["index"]) if world == DSL else torch.gather(x, 1, inputs["index"])
    else:
        c = x * 3
    inner = dsl_trees.evaluate(case["pre"], {"x": x, "y": y, "c": c}, world, unary, binary)
    shape = (case["rows"], case["cols"])
    inner = ln.broadcast_to(inner, shape) if world == DSL else inner.expand(shape)
    if case["reduce"] is None:
        return [inner]
    dsl_fn, torch_fn, _ = REDUCE[case["reduce"]]
    red = (dsl_fn if world == DSL else torch_fn)(inner, case["axis"], keepdim=True)
    if case["post"] is None:
        return [inner, red]
    post = dsl_trees.evaluate(case["post"], {"x": x, "y": y, "c": red}, world, unary, binary)
    return [inner, red, post]


def _tensors(case: dict, dtype) -> dict:
    rows, cols = case["rows"], case["cols"]
    out = {"x": torch.tensor(case["x"], dtype=dtype).reshape(rows, cols),
           "y": torch.tensor(case["y"], dtype=dtype).reshape(cols)}
    if case["gather"]:
        out["index"] = torch.tensor(case["index"], dtype=torch.int64).reshape(rows, cols)
    return out


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _compare(got: torch.Tensor, want: torch.Tensor, want64: torch.Tensor | None) -> str | None:
    """None if ``got`` equals eager's ``want``: same dtype and shape; integers exact; floats with
    NaN and infinities in the same places and finite values within a tolerance that grows with
    how far float32 eager itself is from float64 (cancellation in sums)."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"dtype/shape {got.dtype} {tuple(got.shape)} != eager {want.dtype} {tuple(want.shape)}"
    if not want.dtype.is_floating_point:
        return None if torch.equal(got, want) else f"{got.tolist()} != eager {want.tolist()}"
    if not torch.equal(got.isnan(), want.isnan()) or not torch.equal(got.isinf() & (got > 0), want.isinf() & (want > 0)) \
            or not torch.equal(got.isinf() & (got < 0), want.isinf() & (want < 0)):
        return f"NaN/inf differ: {got.tolist()} != eager {want.tolist()}"
    finite = want.isfinite()
    g, w = got[finite].double(), want[finite].double()
    sensitivity = (w - want64[finite]).abs().nan_to_num(0.0, 0.0, 0.0) if want64 is not None else 0.0
    tol = 1e-5 + 1e-4 * w.abs() + 16 * sensitivity
    bad = (g - w).abs() > tol
    return f"{got.tolist()} != eager {want.tolist()}" if bad.any() else None


def _eager(case: dict) -> tuple[list | None, list | None, str | None]:
    """(results, float64 results for float cases, error) of the case in eager PyTorch."""
    try:
        want = run_graph(case, TORCH, _tensors(case, getattr(torch, case["dtype"])))
    except Exception as e:  # noqa: BLE001 - any error eager raises, loopnest must raise too
        return None, None, _error(e)
    want64 = run_graph(case, TORCH, _tensors(case, torch.float64)) if case["float"] else None
    return want, want64, None


def _dsl(case: dict, tag: str) -> tuple[list, list, list]:
    """(placeholders, DSL outputs, argument tensors) of the case; ``tag`` keeps the placeholder
    names of cases compiled together apart."""
    values = _tensors(case, getattr(torch, case["dtype"]))
    dtype = getattr(ln, case["dtype"])
    keys = ["x", "y"] + (["index"] if case["gather"] else [])
    placeholders = {k: ln.placeholder(name + tag, tuple(values[k].shape), ln.int64 if k == "index" else dtype)
                    for k, name in zip(keys, case["names"])}
    return list(placeholders.values()), run_graph(case, DSL, placeholders), [values[k] for k in keys]


def _check(got: list, want: list, want64: list | None) -> str | None:
    for k, (g, w) in enumerate(zip(got, want)):
        w64 = want64[k].double() if want64 is not None and w.dtype.is_floating_point else None
        problem = _compare(g, w, w64)
        if problem is not None:
            return f"output {k}: {problem}"
    return None


def run_batch(cases: list[dict]) -> list[dict]:
    """Eager and loopnest on each case: one answer per case, {"eager_error"?, "loopnest_error"?,
    "mismatch"?, "traceback"?}. The cases eager runs are compiled together (one g++ run); if that
    raises, each is compiled alone to say which one fails."""
    eager = [_eager(c) for c in cases]
    answers = [{} if err is None else {"eager_error": err} for _, _, err in eager]
    ok = [k for k, (_, _, err) in enumerate(eager) if err is None]
    together = ok if len(ok) > 1 else []
    if together:
        try:
            got = _run_loopnest([cases[k] for k in together])
            for k, g in zip(together, got):
                problem = _check(g, *eager[k][:2])
                if problem is not None:
                    answers[k]["mismatch"] = problem
            return _alone(cases, answers, [k for k in range(len(cases)) if k not in together], eager)
        except Exception:  # noqa: BLE001 - find the case that fails by itself
            pass
    return _alone(cases, answers, range(len(cases)), eager)


def _alone(cases: list[dict], answers: list[dict], which, eager: list) -> list[dict]:
    for k in which:
        try:
            got = _run_loopnest([cases[k]])[0]
        except Exception as e:  # noqa: BLE001
            answers[k]["loopnest_error"] = _error(e)
            if "eager_error" not in answers[k]:
                answers[k]["traceback"] = traceback.format_exc()[-3000:]
            continue
        if "eager_error" not in answers[k]:
            problem = _check(got, *eager[k][:2])
            if problem is not None:
                answers[k]["mismatch"] = problem
    return answers


def _run_loopnest(cases: list[dict]) -> list[list]:
    """The cases' outputs computed by one graph compiled for the C++ backend."""
    inputs, outputs, args, counts = [], [], [], []
    for k, case in enumerate(cases):
        p, o, a = _dsl(case, f"_{k}" if len(cases) > 1 else "")
        inputs += p
        outputs += o
        args += a
        counts.append(len(o))
    got = list(ln.compile(outputs, inputs=inputs, backend="cpp")(*args))
    per_case = []
    for n in counts:
        per_case.append(got[:n])
        got = got[n:]
    return per_case


def main() -> None:
    """Answer each batch of cases (a JSON list a line) read from stdin with one JSON line."""
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(run_batch(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
