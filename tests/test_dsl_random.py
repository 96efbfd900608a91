"""Random DSL expression trees (pointwise ops plus one reduction) against eager torch."""
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import dsl_trees
import loopnest as ln
from conftest import assert_close

# Each op is applied to both worlds: (dsl_fn, torch_fn); inputs stay in a tame range.
UNARY = {
    "tanh": (ln.tanh, torch.tanh), "sin": (ln.sin, torch.sin), "neg": (lambda a: -a, torch.neg),
    "abs": (abs, torch.abs), "sigmoid": (ln.sigmoid, torch.sigmoid),
    "sqrt1": (lambda a: ln.sqrt(abs(a) + 1), lambda a: torch.sqrt(a.abs() + 1)),
    "exp_tanh": (lambda a: ln.exp(ln.tanh(a)), lambda a: torch.exp(torch.tanh(a))),
}
BINARY = {
    "add": (lambda a, b: a + b, torch.add), "sub": (lambda a, b: a - b, torch.sub),
    "mul": (lambda a, b: a * b, torch.mul), "max": (ln.maximum, torch.maximum),
    "min": (ln.minimum, torch.minimum),
    "div": (lambda a, b: a / (abs(b) + 1), lambda a, b: a / (b.abs() + 1)),
    "where": (lambda a, b: ln.where(a > b, a, b * 0.5), lambda a, b: torch.where(a > b, a, b * 0.5)),
}
REDUCE = {
    "sum": (ln.sum, torch.sum), "max": (ln.max, torch.amax), "min": (ln.min, torch.amin),
    "mean": (ln.mean, torch.mean),
}

leaves = st.sampled_from(["x", "y", "c"])


def trees(depth):
    return dsl_trees.trees(depth, leaves, UNARY, BINARY)


def evaluate(tree, env, world):
    return dsl_trees.evaluate(tree, env, world, UNARY, BINARY)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pre=trees(3), post=trees(2), reduce=st.sampled_from(sorted(REDUCE)),
       axis=st.sampled_from([0, 1, None]), rows=st.integers(1, 9), cols=st.integers(1, 40))
def test_random_pointwise_reduction_pointwise(pre, post, reduce, axis, rows, cols):
    torch.manual_seed(rows * 100 + cols)
    X, Y = torch.randn(rows, cols), torch.randn(cols)
    x, y = ln.placeholder("x", (rows, cols), ln.float32), ln.placeholder("y", (cols,), ln.float32)
    dsl_r, torch_r = REDUCE[reduce]
    inner = evaluate(pre, {"x": x, "y": y, "c": x * 0.75}, 0)
    inner_t = evaluate(pre, {"x": X, "y": Y, "c": X * 0.75}, 1)
    inner = ln.broadcast_to(inner, (rows, cols))
    inner_t = inner_t.expand(rows, cols)
    red = dsl_r(inner, axis, keepdim=True)
    red_t = torch_r(inner_t, dim=tuple(range(2)) if axis is None else axis, keepdim=True)
    out = evaluate(post, {"x": x, "y": y, "c": red}, 0)
    out_t = evaluate(post, {"x": X, "y": Y, "c": red_t}, 1)
    outputs, expected = [red, out], [red_t, out_t]
    got = ln.compile(outputs, inputs=[x, y])(X, Y)
    for k, (g, e) in enumerate(zip(got, expected)):
        torch.testing.assert_close(g, e.expand(g.shape) if g.shape != e.shape else e, atol=1e-4, rtol=1e-4,
                                   equal_nan=True, msg=lambda m: f"output {k} of {pre} / {reduce} / {post}: {m}")
    assert_close(got[0], red_t, "reduction")
