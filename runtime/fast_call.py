"""One flat Python function per call plan: the checks, allocations, launches and results of a call
with known shapes, written out once (as Inductor writes its ``call``) instead of walked per call.

``CallPlan.run`` goes through a dict of buffers, a loop over allocations, one bound launch per
step and a view per result; at tiny sizes that Python is most of a call's host time (and in a
training step it runs twice, with caches cold from the kernels before it). ``entry`` writes the
same work for one plan as straight-line code: each input's shape, dtype, device and contiguity
compared with the plan's, each buffer a local variable, each kernel called through its
positional launch (``backends.base.PositionalLaunch``). A step without one (an extern: an ATen
op) gets a dict of the buffers made so far and files its results into it, as in ``run``.

A buffer is allocated just before the first step that uses it, and an ATen result is dropped
after the step that reads it last (``del``), so that memory freed in a call can serve its later
steps rather than every buffer living from the call's start to its end.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from ..backends.tensor_helpers import device_flag, reinterpret_tensor


PLAIN_TENSORS = frozenset((torch.Tensor, torch.nn.Parameter))  # types whose data a kernel reads as is


class _Miss:
    """What an entry returns when its arguments are not the ones it was written for."""

    def __repr__(self) -> str:
        return "MISS"


MISS = _Miss()
# ``entry``'s picks: ``(ARG_VIEW, (k, sizes, strides, offset))`` returns a view of ``args[k]``, its
# offset counted from the argument's first element
ARG_VIEW = "arg_view"


def arg_view(args: Sequence[torch.Tensor], spec: tuple) -> torch.Tensor:
    """The view ``spec`` (``(k, sizes, strides, offset)``) of ``args[k]``."""
    k, sizes, strides, offset = spec
    t = args[k]
    return t.as_strided(sizes, strides, t.storage_offset() + offset)


def entry(plan, positions: Sequence[int], constants: Sequence[torch.Tensor],
          picks: Sequence[tuple[bool | str | None, object]], kind: type,
          poison: bool) -> Callable[[list], object] | None:
    """``fn(args)`` for ``plan``: the plan's inputs are ``args[p]`` for ``p`` in ``positions``,
    then ``constants``; it returns ``kind`` of ``args[k]`` (``(True, k)`` in ``picks``), the
    plan's result ``k`` (``(False, k)``), a view of an argument (``ARG_VIEW``) or None
    (``(None, 0)``: a backward graph's gradient of an input that needs none), or ``MISS`` when an
    input differs from the plan's (shape, dtype, device type, contiguity or the strides it was
    compiled for), so the caller takes its checked path. ``poison``: every buffer it allocates
    starts filled (``compiled.poison_value``), as in ``run``. None when a step has neither a
    positional form nor known results."""
    names: dict[str, str] = {}  # buffer name -> local variable
    scope: dict[str, object] = {"MISS": MISS, "reinterpret": reinterpret_tensor, "empty": plan.empty,
                                "Tensor": torch.Tensor,
                                "PLAIN": PLAIN_TENSORS}
    lines, checks = [], []
    on_device = device_flag(plan.device)

    def bind(value, prefix: str) -> str:
        key = f"{prefix}{len(scope)}"
        scope[key] = value
        return key

    def filled(fill) -> str:
        return f".fill_({bind(fill, 'f')})" if poison else ""

    for k, name in enumerate(plan.inputs):
        var = names[name] = f"i{k}"
        if k < len(positions):
            lines.append(f"{var} = args[{positions[k]}]")
            dtype = bind(plan.input_dtypes[k], "d")
            strides = plan.input_strides[k]
            layout = f"{var}.is_contiguous()" if strides is None else f"{var}.stride() == {strides!r}"
            checks.append(f"type({var}) in PLAIN and {var}.shape == {plan.input_shapes[k]!r} and "
                          f"{var}.dtype is {dtype} and {var}.{on_device} and {layout} and not {var}.is_neg()")
        else:
            lines.append(f"{var} = {bind(constants[k - len(positions)], 'c')}")
    if checks:
        lines += ["try:", "    fits = " + " and ".join(checks), "except AttributeError:  # not a tensor",
                  "    return MISS", "if not fits:", "    return MISS"]
    made: dict[str, tuple] = {}  # allocated buffer -> (sizes, strides)
    pending: dict[str, str] = {}  # allocated buffer -> its allocation, written before its first use
    for name, sizes, strides, dtype, fill in plan.allocations:
        var = names[name] = f"b{len(names)}"
        made[name] = (sizes, strides)
        pending[name] = f"{var} = empty({sizes!r}, {strides!r}, {bind(dtype, 'd')}){filled(fill)}"

    owned = set(pending)  # buffers held by a local of their own: allocations and extern results

    def allocate(used) -> None:
        lines.extend(pending.pop(n) for n in dict.fromkeys(used) if n in pending)
    if plan.views:
        lines.append(f"arena = empty(({plan.arena},), (1,), {bind(torch.uint8, 'd')})")
        typed = {dtype: f"a{j}" for j, dtype in enumerate(plan.arena_dtypes)}
        lines += [f"{v} = arena.view({bind(dtype, 'd')})" for dtype, v in typed.items()]
        for name, dtype, sizes, strides, offset, fill in plan.views:
            var = names[name] = f"b{len(names)}"
            made[name] = (sizes, strides)
            lines.append(f"{var} = reinterpret({typed[dtype]}, {sizes!r}, {strides!r}, {offset}){filled(fill)}")
    uses = [list(step.names) if hasattr(step, "names") else [name for name, _ in getattr(step, "refs", ())]
            for step in plan.steps]
    last_use = {name: k for k, used in enumerate(uses) for name in used}
    kept = {name for name, _ in plan.outputs} | set(plan.inputs)
    for k, step in enumerate(plan.steps):
        allocate(uses[k])
        made_here = []
        if hasattr(step, "names") and hasattr(step, "run"):
            lines.append(f"{bind(step.run, 's')}({', '.join(names[n] for n in step.names)})")
        elif hasattr(step, "outs"):  # an extern: an ATen op
            lines += _extern_call(step, names, bind)
            made_here = [out for out, *_ in step.outs]
            owned.update(made_here)
        else:
            return None
        done = [names[n] for n in dict.fromkeys(uses[k] + made_here)
                if last_use.get(n, k) == k and n in owned and n not in kept]
        if done:  # freed as soon as read for the last time, so that later allocations reuse them
            lines.append(f"del {', '.join(done)}")
    allocate(list(pending))  # outputs no step writes
    results = []
    for name, spec in plan.outputs:
        plain = spec is None or (spec[2] == 0 and made.get(name) == (spec[0], spec[1]))
        results.append(names[name] if plain else f"as_view({names[name]}, {spec!r})")
    scope["as_view"] = plan.as_view
    scope["arg_view"] = arg_view
    picked = ["None" if is_arg is None else f"arg_view(args, {k!r})" if is_arg == ARG_VIEW
              else f"args[{k}]" if is_arg else results[k] for is_arg, k in picks]
    lines.append(f"return {bind(kind, 'k')}(({', '.join(picked)}{',' if len(picked) == 1 else ''}))")
    source = "def entry(args):\n" + "".join(f"    {line}\n" for line in lines)
    exec(compile(source, f"<loopnest call plan {plan.name}>", "exec"), scope)  # noqa: S102
    fn = scope["entry"]
    fn.source = source
    return fn


def _extern_call(step, names: dict[str, str], bind: Callable[[object, str], str]) -> list[str]:
    """Lines running the extern ``step`` (a ``compiled.BoundExtern``) on the entry's locals:
    a direct call of its op where every buffer is a positional argument of its own (the usual
    ``op(a, b, ...)``), else the step itself on a dict of the buffers it reads. Each result is
    checked against the layout the plan expects (``BoundExtern.fitted`` when it differs)."""
    step_var = bind(step, "s")
    if step.flat:
        slots = {k: (name, spec) for k, name, spec in step.fetch}
        args = []
        for k, a in enumerate(step.args):
            if k not in slots:
                args.append(bind(a, "c"))
                continue
            name, spec = slots[k]
            args.append(names[name] if spec is None else f"reinterpret({names[name]}, {spec[0]!r}, {spec[1]!r}, {spec[2]})")
        if step.kwargs:
            args.append("**" + bind(step.kwargs, "c"))
        lines = [f"r = {bind(step.fn, 'x')}({', '.join(args)})", "if isinstance(r, Tensor):", "    r = (r,)"]
    else:
        reads = dict.fromkeys(name for name, _ in step.refs)
        lines = ["buffers = {" + ", ".join(f"{n!r}: {names[n]}" for n in reads) + "}", f"{step_var}(buffers)",
                 "r = [" + ", ".join(f"buffers[{out!r}]" for out, *_ in step.outs) + "]"]
    near = next((names[name] for name, _ in step.refs), "None")  # a tensor on the graph's device
    for k, (out, sizes, strides) in enumerate(step.outs):
        var = names[out] = f"b{len(names)}"
        lines += [f"{var} = r[{k}]", f"if not {var}.{step.on_device}:", f"    {var} = {step_var}.moved({var}, {near})",
                  f"if {var}.shape != {sizes!r} or {var}.stride() != {strides!r}:",
                  f"    {var} = {step_var}.fitted({out!r}, {var})"]
    return lines + ["del r"]
