"""Compiling Dynamo's torch-level graphs: AOTAutograd functionalizes them, applies the
decomposition table and partitions them into forward and backward ATen graphs, each lowered and
compiled here. Plain inference graphs skip AOTAutograd in a warm process (``aot_cache``), and are
called without its runtime wrapper, which has nothing to do for them, at static or symbolic sizes;
plain training graphs at static sizes are called through one ``autograd.Function`` of their own
(``plain_training``).
The ``torch.compile(backend="loopnest")`` entry point is ``loopnest.api.loopnest_backend``.
"""
from __future__ import annotations

import logging
from typing import Sequence

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch import config as functorch_config
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from . import aot_cache
from .decompositions import decomposition_table, table_fingerprint
from ..backends.base import Backend
from .graph_replay import CudaGraphBoxed
from .options import CompileOptions
from .plain_training import PlainTraining, plain_split
from .runner import BoxedGraph, LoweredGraph, lower_and_compile


_log = logging.getLogger("loopnest")


class AtenCompiler:
    """Compiles the ATen graphs AOTAutograd produces (forward, backward or inference)."""

    def __init__(self, options: CompileOptions, backend: Backend):
        self.options = options
        self.backend = backend
        self.graphs: list[LoweredGraph] = []
        self._to_store: tuple | None = None  # (AOT cache key, Dynamo graph's input and output counts)
        self._counts: tuple[int, int] | None = None  # Dynamo graph's input and output counts, if its inputs are plain
        self._direct = None  # the compiled inference graph, when AOTAutograd's wrapper has nothing to do
        self._training_inputs: int | None = None  # Dynamo graph's input count, if its inputs are plain and need grads
        self._backward_module: torch.fx.GraphModule | None = None  # the partitioner's backward graph
        self._plain_training: PlainTraining | None = None  # both graphs, when AOTAutograd's wrapper has nothing to do

    def compile(self, gm: torch.fx.GraphModule, kind: str) -> LoweredGraph:
        """Lower and build ``gm``; ``kind`` names it ("fwd", "bwd", "inf")."""
        lowered = lower_and_compile(gm, self.backend, kind, self.options.tuner)
        self.graphs.append(lowered)
        if self.options.recorder is not None:
            self.options.recorder(lowered)
        return lowered

    def forward(self, gm, example_inputs):
        boxed = BoxedGraph(self.compile(gm, "fwd"))
        bw = self._backward_module
        if self._training_inputs is not None and bw is not None:
            split = plain_split(gm, bw, self._training_inputs)
            if split is not None:  # the backward is compiled now: no wrapper of AOTAutograd's will ask
                lowered_bw = self.compile(bw, "bwd")
                saved = len(bw.graph.find_nodes(op="placeholder")) - len(split.differentiable)
                tangents = range(saved, saved + len(split.differentiable))
                # the saved tensors sit where the forward's replays put them from its second replay
                # on: a backward captured at its third call reads them in place (``CudaGraphRunner``)
                replayed_bw = self._replayed(lowered_bw, training=True, varying=tangents, warmup=2)
                self._plain_training = PlainTraining(self._replayed(boxed.lowered, training=True) or boxed,
                                                     replayed_bw or BoxedGraph(lowered_bw), split)
        return boxed

    def partition(self, joint: torch.fx.GraphModule, joint_inputs, **kwargs):
        """AOTAutograd's partitioner (min-cut rematerialization), keeping the backward graph."""
        fw, bw = min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
        self._backward_module = bw
        return fw, bw

    def backward(self, gm, example_inputs):
        return BoxedGraph(self.compile(gm, "bwd"))

    def inference(self, gm, example_inputs):
        if self._to_store is not None:
            key, num_inputs, num_outputs = self._to_store
            self._to_store = None
            aot_cache.store(key, gm, num_inputs, num_outputs)
        lowered = self.compile(gm, "inf")
        boxed = self._replayed(lowered) or BoxedGraph(lowered)
        if self._counts is not None and aot_cache.plain_inference(gm, *self._counts):
            self._direct = boxed
        return boxed

    def _replayed(self, lowered: LoweredGraph, training: bool = False, varying: Sequence[int] = (),
                  warmup: int = 1) -> CudaGraphBoxed | None:
        """``lowered`` replayed as a CUDA graph, if the ``cudagraphs`` option and the graph allow
        it (``graph_replay``; a training graph by the "auto" rules, a backward's incoming
        gradients at the positions ``varying``); else None, and it runs as a ``BoxedGraph``."""
        if not self.options.cudagraphs or self.backend.device != "cuda":
            return None
        boxed = CudaGraphBoxed(lowered, "auto" if training else self.options.cudagraphs, varying, warmup)
        return boxed if boxed.declined is None else None

    def aot(self, gm: torch.fx.GraphModule, example_inputs: Sequence):
        """Run AOTAutograd on a torch-level graph, compiling every graph it produces here.

        User Triton kernels behind ``torch.library.triton_op`` stay opaque custom ops (they are
        called through ATen as Extern nodes) instead of being decomposed into kernel wrappers."""
        if _data_dependent_sizes(gm):
            _log.warning("loopnest: a graph whose sizes depend on tensor values (nonzero, unique, boolean "
                         "masks, .item() under capture_dynamic_output_shape_ops / capture_scalar_outputs) "
                         "runs in eager PyTorch: loopnest compiles sizes known from the inputs; leave those "
                         "Dynamo options off to have the ops around such a call compiled")
            return gm.forward
        key = aot_cache.graph_key(gm, example_inputs, table_fingerprint())
        self._counts = self._direct = None
        if key is not None:
            cached = aot_cache.load(key)
            if cached is not None:
                return _unboxed(self.inference(cached, None))
        outputs = gm.graph.output_node().args[0]
        counts = (len(example_inputs), len(outputs) if isinstance(outputs, (tuple, list)) else -1)
        if key is not None:
            self._to_store = (key, *counts)
        self._backward_module = self._plain_training = self._training_inputs = None
        # AOTAutograd's runtime wrapper would disable autocast around the call if it is on now
        if not torch._C._is_any_autocast_enabled():
            if aot_cache.plain_inputs(gm, example_inputs, sizes=True):
                self._counts = counts
            elif aot_cache.plain_inputs(gm, example_inputs, grads=True):
                self._training_inputs = len(example_inputs)
        training = torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                                   for a in example_inputs)
        aot = aot_autograd(fw_compiler=self.forward, bw_compiler=self.backward,
                           inference_compiler=self.inference, decompositions=decomposition_table(training),
                           partition_fn=self.partition)
        if not hasattr(functorch_config, "decompose_custom_triton_ops"):  # torch < 2.12
            wrapped = aot(gm, example_inputs)
        else:
            with functorch_config.patch(decompose_custom_triton_ops=False):
                wrapped = aot(gm, example_inputs)
        direct, self._counts, self._direct = self._direct, None, None
        plain, self._plain_training, self._backward_module, self._training_inputs = \
            self._plain_training, None, None, None
        if plain is not None:
            return plain
        return wrapped if direct is None else _unboxed(direct)


def _data_dependent_sizes(gm: torch.fx.GraphModule) -> bool:
    """Whether a value in ``gm`` has a size or value known only at run time (an unbacked symbol)."""
    return any(free_unbacked_symbols(node.meta.get("example_value", node.meta.get("val")))
               for node in gm.graph.nodes)


def _unboxed(boxed):
    """Dynamo's calling convention (``fn(*args)``) for a compiled graph that takes one list; a
    plain ``BoxedGraph`` is called without checks its Dynamo guards make redundant
    (``LoweredGraph.guarded_call``)."""
    if type(boxed) is BoxedGraph:
        return boxed.lowered.guarded_call()

    def compiled(*args):
        return boxed(list(args))
    return compiled
