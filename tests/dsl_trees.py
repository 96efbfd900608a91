"""Random expression trees over op tables, for the property tests (``test_dsl_random``,
``test_fuzz``).

A tree is a leaf name, ``(unary, tree)`` or ``(binary, tree, tree)``; tables map an op name to a
pair of functions ``(dsl_fn, torch_fn)``, so one tree is evaluated in both worlds.
"""
from __future__ import annotations

from hypothesis import strategies as st

DSL, TORCH = 0, 1  # the worlds: which function of a table's pair to apply


def trees(depth: int, leaves, unary: dict, binary: dict):
    """Trees of at most ``depth`` ops over ``leaves`` (a strategy of leaf names)."""
    if depth == 0:
        return leaves
    sub = trees(depth - 1, leaves, unary, binary)
    ops = [st.tuples(st.sampled_from(sorted(unary)), sub)] if unary else []
    ops += [st.tuples(st.sampled_from(sorted(binary)), sub, sub)] if binary else []
    return st.one_of(leaves, *ops)


def evaluate(tree, env: dict, world: int, unary: dict, binary: dict):
    """``tree`` computed in ``world`` with leaf values from ``env``."""
    if isinstance(tree, str):
        return env[tree]
    if len(tree) == 2:
        return unary[tree[0]][world](evaluate(tree[1], env, world, unary, binary))
    return binary[tree[0]][world](evaluate(tree[1], env, world, unary, binary),
                                  evaluate(tree[2], env, world, unary, binary))


def leaves_of(tree) -> set[str]:
    """The leaf names ``tree`` reads."""
    if isinstance(tree, str):
        return {tree}
    return set().union(*(leaves_of(t) for t in tree[1:]))
