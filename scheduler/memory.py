"""Memory planning: intermediates whose last reader has run hand their memory to later ones.

Buffers are visited in step order; a buffer produced by step k takes the smallest free slot
that is large enough (sizes compared exactly when symbolic), else a new slot. A slot frees
after the last step that reads its buffer. Graph outputs, inputs and extern results (ATen
allocates those) are never planned, so outputs never alias inputs or each other.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.index import Index
from ..ir.nodes import Buffer, Extern
from .fusion import node_reads
from .kernel import Kernel


@dataclass
class MemoryPlan:
    """Slots (sizes in bytes) and which slot each planned intermediate lives in."""

    slots: list[Index] = field(default_factory=list)
    slot_of: dict[str, int] = field(default_factory=dict)
    buffer_bytes: dict[str, Index] = field(default_factory=dict)

    @property
    def bytes_with_reuse(self) -> Index:
        """Bytes the planned intermediates occupy with slot reuse."""
        return sum(self.slots, Index.of(0))

    @property
    def bytes_without_reuse(self) -> Index:
        """Bytes they would occupy with one allocation each."""
        return sum(self.buffer_bytes.values(), Index.of(0))


def plan_memory(steps: list, intermediates: list[str], buffers: dict[str, Buffer]) -> MemoryPlan:
    """Assign the intermediates stored by kernels to reusable slots."""
    extern_outs = {o for s in steps if isinstance(s, Extern) for o in s.outs}
    planned = [b for b in intermediates if b not in extern_outs and buffers[b].layout.is_contiguous()]
    last_use = {b: _last_reader(b, steps) for b in planned}
    plan = MemoryPlan()
    free: list[int] = []
    live: dict[str, int] = {}
    for k, step in enumerate(steps):
        for b in [b for b, last in last_use.items() if b in live and last < k]:
            free.append(live.pop(b))
        for b in _written(step):
            if b not in last_use:
                continue
            size = buffers[b].nbytes
            plan.buffer_bytes[b] = size
            slot = _best_fit(free, plan.slots, size)
            if slot is None:
                plan.slots.append(size)
                slot = len(plan.slots) - 1
            else:
                free.remove(slot)
            plan.slot_of[b] = slot
            live[b] = slot
    return plan


def _written(step) -> list[str]:
    return list(step.outputs) if isinstance(step, Kernel) else list(step.outs)


def _reads(step) -> set[str]:
    return set(step.inputs) if isinstance(step, Kernel) else node_reads(step)


def _last_reader(b: str, steps: list) -> int:
    return max((k for k, step in enumerate(steps) if b in _reads(step) or b in _written(step)), default=-1)


def _best_fit(free: list[int], slots: list[Index], size: Index) -> int | None:
    """The smallest free slot that holds ``size`` bytes (exact match only for symbolic sizes)."""
    best, best_size = None, None
    want = size.as_int()
    for s in free:
        have = slots[s].as_int()
        if want is None or have is None:
            fits = slots[s] == size
        else:
            fits = have >= want
        if fits and (best is None or (have is not None and best_size is not None and have < best_size)):
            best, best_size = s, have
    return best
