"""Tensors of dtypes loopnest has no kernels for (complex, uint16/32/64), carried through a
graph as a view of a dtype it has: a complex tensor as its real view (a trailing dimension of 2:
real, imaginary parts), an unsigned one as the signed integer of the same width.

Every op that reads or produces such a tensor is called through ATen (an Extern, with the reason
``explain`` shows); kernels never compute on the carried values, they only hold them between ATen
calls, so the bit reinterpretation is exact. Inductor likewise falls back to ATen for complex ops.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import torch

from ..ir import dtypes as dt
from ..ir.dtypes import DType
from ..ir.index import Index


@dataclass(frozen=True)
class Carrier:
    """How tensors of ``dtype`` are held in loopnest buffers of ``ir_dtype``."""

    dtype: torch.dtype
    ir_dtype: DType
    pairs: bool  # complex: (real, imaginary) pairs in a trailing dimension of 2
    conj: bool = False  # traced with the lazy conjugate bit: the buffer holds the unconjugated pairs

    def to_ir(self, t: torch.Tensor) -> torch.Tensor:
        """The buffer view of ``t`` (no copy unless ``t`` is a lazily conjugated/negated view that
        must be resolved)."""
        if not self.pairs:
            return t.view(self.ir_dtype.torch)
        if self.conj:  # ATen graphs read the stored pairs of a conjugate view (view_as_real + _neg_view)
            t = t.conj() if t.is_conj() else t.conj().resolve_conj()
        return torch.view_as_real(t.resolve_conj().resolve_neg())

    def from_ir(self, t: torch.Tensor) -> torch.Tensor:
        """The ``dtype`` view of buffer ``t`` (conjugate again when traced so)."""
        if not self.pairs:
            return t.view(self.dtype)
        if t.stride(-1) != 1 or t.storage_offset() % 2 or any(s % 2 for s in t.stride()[:-1]):
            t = t.contiguous()  # view_as_complex needs whole (real, imaginary) pairs
        z = torch.view_as_complex(t)
        return z.conj() if self.conj else z

    def shape(self, shape: Sequence[Index]) -> tuple[Index, ...]:
        """The buffer shape holding a tensor of ``shape``."""
        return tuple(shape) + ((Index.of(2),) if self.pairs else ())

    def strides(self, strides: Sequence[Index]) -> tuple[Index, ...]:
        """The buffer strides (in elements of ``ir_dtype``) of a tensor with ``strides``."""
        if not self.pairs:
            return tuple(strides)
        return tuple(s * 2 for s in strides) + (Index.of(1),)

    @property
    def reason(self) -> str:
        """Why ops on these tensors are called through ATen, for ``explain``."""
        return (f"{str(self.dtype).removeprefix('torch.')} tensors: called through ATen "
                f"(loopnest kernels have no {'complex' if self.pairs else 'unsigned 16/32/64-bit'} dtypes)")


CARRIERS = {c.dtype: c for c in (
    Carrier(torch.complex32, dt.float16, True),
    Carrier(torch.complex64, dt.float32, True),
    Carrier(torch.complex128, dt.float64, True),
    Carrier(torch.uint16, dt.int16, False),
    Carrier(torch.uint32, dt.int32, False),
    Carrier(torch.uint64, dt.int64, False),
)}


def carrier_of(value) -> Carrier | None:
    """The carrier of a (traced) tensor's dtype; None for other values and loopnest's own dtypes."""
    carrier = CARRIERS.get(value.dtype) if isinstance(value, torch.Tensor) else None
    return replace(carrier, conj=True) if carrier is not None and value.is_conj() else carrier
