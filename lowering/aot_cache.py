"""A disk cache above AOTAutograd: a Dynamo graph and its inputs' metadata -> the ATen inference
graph AOTAutograd made of it, so a warm process skips AOTAutograd's tracing (functionalization,
decompositions, fake-tensor propagation: most of the time between Dynamo and loopnest).

Only plain inference graphs are stored: no input mutated, no output aliasing an input or an
intermediate, no parameters or constants held by the graph module, static shapes, every input a
tensor that needs no gradient (or grad mode off). Then AOTAutograd's runtime wrapper adds nothing,
and the ATen graph alone, called with Dynamo's arguments, is the whole compiled function.

The key covers the graph's code, each input's dtype, shape, strides, device and requires_grad,
grad and autocast modes, the default dtype, torch's version and the decomposition table. Entries
are ATen graphs with their traced metadata, pickled by ``torch.fx._graph_pickler``;
``LOOPNEST_AOT_CACHE=0`` turns the cache off.
"""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import torch

from ..core import settings
from ..core.counters import counters
from ..core.files import atomic_write

log = logging.getLogger("loopnest")

FORMAT = 1  # bump when the key or the entry changes meaning


def enabled() -> bool:
    """False when ``LOOPNEST_AOT_CACHE`` is off."""
    return settings.current().aot_cache


def graph_key(gm: torch.fx.GraphModule, example_inputs, extra: str) -> str | None:
    """The cache key of Dynamo's ``gm`` called with ``example_inputs`` (``extra``: what else the
    ATen graph depends on, e.g. the decomposition table); None when the graph is not cacheable."""
    if not enabled() or _pickler() is None or not plain_inputs(gm, example_inputs):
        return None
    if any(n.op == "placeholder" and _symbolic(n.meta.get("example_value")) for n in gm.graph.nodes):
        return None
    parts = [f"format {FORMAT}", torch.__version__, extra, gm.code, f"grad {torch.is_grad_enabled()}",
             f"default dtype {torch.get_default_dtype()}", _autocast_state()]
    for x in example_inputs:
        if _symbolic(x):
            return None
        parts.append(f"{x.dtype} {tuple(x.shape)} {x.stride()} {x.device} {x.requires_grad}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def plain_inputs(gm: torch.fx.GraphModule, example_inputs, sizes: bool = False, grads: bool = False) -> bool:
    """True when Dynamo's ``gm`` holds no parameters, buffers or submodules and every input is a
    strided tensor needing no gradient (under grad mode; else AOTAutograd makes forward and
    backward graphs; ``grads`` allows them), or with ``sizes`` also a SymInt: the inputs
    AOTAutograd hands on as they are."""
    if any(True for _ in gm.parameters()) or any(True for _ in gm.buffers()):
        return False
    if any(n.op in ("get_attr", "call_module") for n in gm.graph.nodes):
        return False
    grad = torch.is_grad_enabled()
    for x in example_inputs:
        if sizes and isinstance(x, (int, torch.SymInt)) and not isinstance(x, bool):
            continue
        if type(x) not in (torch.Tensor, torch.nn.Parameter) or x.is_nested or x.layout != torch.strided:
            return False
        if grad and x.requires_grad and not grads:
            return False
    return True


def _symbolic(value) -> bool:
    """True for a SymInt/SymFloat or a tensor with a symbolic size, stride or offset."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(value, torch.Tensor):
        return any(not isinstance(s, int) for s in (*value.shape, *value.stride(), value.storage_offset()))
    return False


def _autocast_state() -> str:
    states = [f"{device} {torch.is_autocast_enabled(device)} {torch.get_autocast_dtype(device)}"
              for device in ("cpu", "cuda") if torch.amp.is_autocast_available(device)]
    return "autocast " + ", ".join(states)


def _path(key: str) -> Path:
    return settings.cache_dir("aot") / key[:2] / f"{key}.pkl"


def load(key: str) -> torch.fx.GraphModule | None:
    """The ATen inference graph stored under ``key``, with fresh fake tensors as its nodes'
    traced values; None on a miss or an unreadable entry."""
    path = _path(key)
    try:
        data = path.read_bytes()
    except OSError:
        counters["aot_cache_misses"] += 1
        return None
    from torch._subclasses import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    try:
        gm = _pickler().loads(data, FakeTensorMode(shape_env=ShapeEnv()))
    except Exception as e:  # a torch upgrade can make old entries unreadable: recompute them
        log.warning("loopnest: ignoring unreadable AOT cache entry %s (%s: %s)", path, type(e).__name__, e)
        counters["aot_cache_misses"] += 1
        return None
    counters["aot_cache_hits"] += 1
    return gm


def store(key: str, gm: torch.fx.GraphModule, num_inputs: int, num_outputs: int) -> bool:
    """Store AOTAutograd's inference graph ``gm`` of the graph keyed ``key`` if it is plain (see
    the module docstring); ``num_inputs``/``num_outputs``: those of Dynamo's graph. True if stored."""
    if not plain_inference(gm, num_inputs, num_outputs):
        counters["aot_cache_not_plain"] += 1
        return False
    try:
        data = _pickler().dumps(gm)
    except Exception as e:  # ops or metadata the pickler refuses
        log.debug("loopnest: AOT cache skips %s: %s: %s", key[:12], type(e).__name__, e)
        counters["aot_cache_unpicklable"] += 1
        return False
    atomic_write(_path(key), data)
    counters["aot_cache_stores"] += 1
    return True


def plain_metadata(buffer_updates: bool = False):
    """AOTAutograd's metadata of the graph being compiled (``fw_metadata``) if it shows nothing
    its runtime wrapper would do beyond calling the compiled graphs: no mutation, aliasing,
    tokens, functionalized RNG or subclasses; else None. With ``buffer_updates``, inputs whose
    only mutation is a ``buffer_update`` are allowed (the caller applies them)."""
    from torch._guards import TracingContext
    context = TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    if meta is None:
        return None
    from torch._functorch._aot_autograd.schemas import OutputType
    if any((i.mutates_data or i.mutates_metadata) and not (buffer_updates and buffer_update(i))
           for i in meta.input_info):
        return None
    if any(o.output_type != OutputType.non_alias for o in meta.output_info):
        return None
    if meta.num_intermediate_bases or meta.tokens or getattr(meta, "is_rng_op_functionalized", False):
        return None
    if meta.subclass_inp_meta and any(not isinstance(m, int) and type(m).__name__ != "PlainTensorMeta"
                                      for m in meta.subclass_inp_meta):
        return None
    return meta


def buffer_update(info) -> bool:
    """Whether an input's mutation (AOTAutograd's ``InputAliasInfo``) is only new values for a
    leaf that needs no gradient, which the forward graph returns first among its results for the
    caller to copy in (a batch norm's running statistics in training)."""
    kind = getattr(info, "mutation_type", None)
    return (info.mutates_data and not info.mutates_metadata and not getattr(info, "mutates_storage_metadata", False)
            and info.is_leaf and not info.requires_grad and getattr(kind, "name", None) == "MUTATED_OUT_GRAPH")


def plain_inference(gm: torch.fx.GraphModule, num_inputs: int, num_outputs: int) -> bool:
    """True if AOTAutograd's metadata of the graph being compiled shows nothing its runtime
    wrapper would have to do around ``gm`` (``plain_metadata``), and ``gm`` takes and returns
    what Dynamo's graph does."""
    if plain_metadata() is None:
        return False
    outs = gm.graph.output_node().args[0]
    placeholders = gm.graph.find_nodes(op="placeholder")
    return len(placeholders) == num_inputs and isinstance(outs, (tuple, list)) and len(outs) == num_outputs


def _pickler():
    try:
        from torch.fx._graph_pickler import GraphPickler
    except ImportError:  # an older torch
        return None
    return GraphPickler

