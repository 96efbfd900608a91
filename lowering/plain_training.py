"""A training graph's forward and backward called through one ``torch.autograd.Function``, in
place of AOTAutograd's runtime wrapper, where that wrapper has nothing to do.

AOTAutograd traces, partitions and hands over the forward and backward graphs; its runtime
wrapper then handles, on every call, what a graph may need: input mutations, outputs aliasing
inputs or each other, subclasses, effect tokens, functionalized RNG, saved sizes, tangents in
another layout. A plain graph needs none of it (but new values for buffers, below), yet pays
it: a layernorm step on 64 x 96 inputs takes 122 µs through it and 90 µs through ``PlainStep``
around the same two compiled graphs (eager: 41; 2-core Zen 4, 2026-12-07, ``bench/RESULTS.md``).
So when the metadata (``aot_cache.plain_metadata``) and the graphs' signatures show a plain graph,
the compiled function is ``PlainStep`` instead; anything else keeps AOTAutograd's wrapper.

What ``PlainStep`` keeps of the wrapper's contract: outputs that need no gradient are marked
non-differentiable; the saved tensors go through ``save_for_backward`` (so an input changed in
place before the backward raises, as in eager); missing output gradients arrive as zeros
(autograd's materialized gradients); a gradient in another layout than traced is fitted by the
backward graph's checked call; a second differentiation raises (``once_differentiable``), as it
does through AOTAutograd.

One mutation is plain enough: new values for a leaf that needs no gradient, such as a batch
norm's running statistics in training (``aot_cache.buffer_update``). The forward graph returns
them first; ``PlainStep`` copies them into their inputs, as the wrapper does, unless the
backward saves one of those inputs (then the wrapper keeps the graph).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch.autograd.function import once_differentiable

from . import aot_cache


@dataclass(frozen=True)
class Split:
    """How the forward graph's results and the backward graph's arguments divide: the new values
    of the inputs ``updated`` (their positions) come first, then the user's outputs, then the
    tensors saved for the backward; the backward takes the saved tensors, then one gradient per
    differentiable output (``differentiable``: their positions)."""

    num_outputs: int
    differentiable: tuple[int, ...]
    non_differentiable: tuple[int, ...]
    updated: tuple[int, ...] = ()


def plain_split(fw: torch.fx.GraphModule, bw: torch.fx.GraphModule, num_inputs: int) -> Split | None:
    """The ``Split`` of a plain training graph (see the module's doc), or None where AOTAutograd's
    runtime wrapper has work to do or the graphs' signatures are not the plain ones: saved sizes
    (dynamic shapes), inputs AOTAutograd merged or rebased, counts that do not line up."""
    meta = aot_cache.plain_metadata(buffer_updates=True)
    if meta is None or _compiled_autograd():
        return None
    updated = tuple(k for k, info in enumerate(meta.input_info) if info.mutates_data)  # buffer updates alone
    fw_inputs = fw.graph.find_nodes(op="placeholder")
    fw_outputs = fw.graph.output_node().args[0]
    bw_inputs = bw.graph.find_nodes(op="placeholder")
    bw_outputs = bw.graph.output_node().args[0]
    num_outputs, first = len(meta.output_info), len(updated)
    if len(fw_inputs) != num_inputs or not isinstance(fw_outputs, (tuple, list)) \
            or len(fw_outputs) < first + num_outputs:
        return None
    if not isinstance(bw_outputs, (tuple, list)) or len(bw_outputs) != num_inputs:
        return None
    saved = fw_outputs[first + num_outputs:]
    if not all(isinstance(n, torch.fx.Node) and isinstance(n.meta.get("val"), torch.Tensor)
               for n in [*fw_outputs[:first], *saved]):
        return None  # a size saved for the backward, or a constant
    if any(fw_inputs.index(n) in updated for n in saved if n.op == "placeholder"):
        return None  # the backward would read an input changed after it was saved
    if any(isinstance(n, torch.fx.Node) and not isinstance(n.meta.get("val"), torch.Tensor)
           for n in fw_outputs[first:first + num_outputs]):
        return None  # a size or scalar output: Dynamo's convention, not a Function's
    differentiable = tuple(k for k, o in enumerate(meta.output_info)
                           if getattr(o, "requires_grad_for_backward", o.requires_grad))
    tangents = [n for n in bw_inputs if n.name.startswith("tangents")]
    if len(bw_inputs) != len(saved) + len(differentiable) or len(tangents) != len(differentiable):
        return None
    if bw_inputs[len(saved):] != tangents:
        return None
    non_differentiable = tuple(k for k, o in enumerate(meta.output_info) if not o.requires_grad)
    return Split(num_outputs, differentiable, non_differentiable, updated)


class PlainStep(torch.autograd.Function):
    """``forward(plan, *inputs)``: the compiled forward graph's user outputs, its saved tensors
    kept for ``backward``, which runs the compiled backward graph."""

    @staticmethod
    def forward(ctx, plan: "PlainTraining", *inputs):
        results = plan.forward(list(inputs))
        split = plan.split
        first = len(split.updated)
        for k, position in enumerate(split.updated):
            inputs[position].copy_(results[k])
        outputs = tuple(results[first:first + split.num_outputs])
        ctx.plan = plan
        ctx.save_for_backward(*results[first + split.num_outputs:])
        if split.non_differentiable:
            ctx.mark_non_differentiable(*[outputs[k] for k in split.non_differentiable])
        return outputs

    @staticmethod
    @torch.compiler.disable(reason="loopnest's compiled backward graph, not for Dynamo to trace")
    @once_differentiable
    def backward(ctx, *grads):
        # On the CPU the autograd engine runs this on the thread of a compiled step whose
        # backward broke its graph, under Dynamo's frame hook: untraced, it stays one call.
        plan = ctx.plan
        tangents = [grads[k] for k in plan.split.differentiable]
        return (None, *plan.backward([*ctx.saved_tensors, *tangents]))


class PlainTraining:
    """Dynamo's compiled function for a plain training graph: ``fn(*args)`` returns the graph's
    outputs as a tuple, recorded for autograd by ``PlainStep``."""

    def __init__(self, forward: Callable, backward: Callable, split: Split):
        self.forward = forward
        self.backward = backward
        self.split = split

    def __call__(self, *args):
        return PlainStep.apply(self, *args)


def _compiled_autograd() -> bool:
    """Whether Dynamo's compiled autograd is on: it traces backward passes, and knows
    AOTAutograd's wrapper, not this Function."""
    from torch._dynamo import compiled_autograd, config
    return bool(getattr(config, "compiled_autograd", False) or getattr(compiled_autograd, "compiled_autograd_enabled", False))
