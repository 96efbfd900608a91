"""The decomposition table applied before lowering: core ATen plus the composites that
``core_aten_decompositions()`` leaves intact (softmax, layer/group/batch norm, gelu, dropout, ...).

``var_mean.correction`` is deliberately absent: it has a lowering rule (one Welford pass), and
the norm decompositions produce it.
"""
from __future__ import annotations

import functools
import hashlib

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

from .short_attention import MAX_KEYS, short_attention

aten = torch.ops.aten

EXTRA = [
    aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.native_group_norm, aten.gelu,
    aten.native_batch_norm, aten._native_batch_norm_legit, aten._native_batch_norm_legit_no_training,
    aten._native_batch_norm_legit_functional, aten._batch_norm_with_update_functional,
    aten._batch_norm_no_update, aten.native_dropout, aten.dropout, aten.elu, aten.leaky_relu,
    aten.diagonal_scatter, aten.dist, aten.addmv, aten.ldexp, aten.upsample_nearest2d.vec,
    aten._adaptive_avg_pool2d,
]
# Not decomposed: var_mean has a rule of its own (one Welford pass instead of several reductions);
# an embedding's backward stays ATen's kernel (the core decomposition, a zero-filled index_put that
# accumulates, took 7x as long on the CPU and 6x the host time on an H100);
# CPU flash attention's core decomposition gives wrong gradients under AOTAutograd on torch 2.13 (a
# TransformerEncoderLayer backward differs from eager by O(1); see tests/test_dynamo.py): ours
# (``short_attention``) replaces it for short key sequences and keeps the ATen call elsewhere.
KEEP = [aten.var_mean.correction, aten.embedding_dense_backward.default]
OURS = {aten._scaled_dot_product_flash_attention_for_cpu.default: short_attention}


@functools.lru_cache(maxsize=None)
def _table() -> dict:
    table = dict(core_aten_decompositions())
    table.update(get_decompositions(EXTRA))
    for op in KEEP:
        table.pop(op, None)
    table.update(OURS)
    return table


# Kept as ATen calls in training graphs: CPU flash attention's backward (an ATen call) recomputes
# the scores with its own blocked matmuls and reads the forward's log-sum-exp, so the forward must
# be ATen's too. Ours rounds the scores differently, and at |scores| beyond ~1e9 the difference is
# beyond exp's range: the gradients came out NaN where eager's are finite.
TRAINING_KEEPS = {  # forward -> its backward
    aten._scaled_dot_product_flash_attention_for_cpu.default:
        aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
}


def decomposition_table(training: bool = False) -> dict:
    """ATen overload -> decomposition, for AOTAutograd, ``make_fx`` and ``run_decompositions``;
    ``training``: for a graph that is differentiated, or holds a backward (``TRAINING_KEEPS``)."""
    table = dict(_table())
    if training:
        for op in TRAINING_KEEPS:
            table.pop(op, None)
    return table


def holds_backward(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` (an ATen graph) calls a backward op whose forward ``TRAINING_KEEPS`` keeps."""
    backwards = set(TRAINING_KEEPS.values())
    return any(node.op == "call_function" and node.target in backwards for node in gm.graph.nodes)


def table_fingerprint() -> str:
    """A short digest of which ATen ops the table rewrites (part of the AOT cache key).

    Only the ``aten`` namespace counts: other libraries add decompositions of their own ops to
    PyTorch's registry when imported (importing Inductor adds a quantized one), which changes
    how those ops are spelled in a graph but not what it computes."""
    return _fingerprint()


@functools.lru_cache(maxsize=None)
def _fingerprint() -> str:
    names = sorted(str(op) for op in _table() if op.namespace == "aten")
    names.append(f"short attention up to {MAX_KEYS} keys")
    return hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]


def has_decomposition(op) -> bool:
    """True if ``op`` is rewritten by the table (so a graph holding it needs re-tracing)."""
    return op in _table()
