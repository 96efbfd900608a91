"""Scalar types of the IR, their torch equivalents and PyTorch's type promotion."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch


class Kind(Enum):
    """Numeric family of a dtype."""

    BOOL = "bool"
    INT = "int"
    UINT = "uint"
    FLOAT = "float"


@dataclass(frozen=True)
class DType:
    """An IR scalar type. Instances are singletons: compare with ``is`` or ``==``."""

    name: str
    kind: Kind
    itemsize: int

    @property
    def is_float(self) -> bool:
        return self.kind is Kind.FLOAT

    @property
    def is_int(self) -> bool:
        return self.kind in (Kind.INT, Kind.UINT)

    @property
    def is_bool(self) -> bool:
        return self.kind is Kind.BOOL

    @property
    def is_low_precision(self) -> bool:
        """float16/bfloat16: loaded and computed in float32, stored back narrow."""
        return self.is_float and self.itemsize == 2

    @property
    def torch(self) -> torch.dtype:
        return _TO_TORCH[self]

    def __repr__(self) -> str:
        return f"ln.{self.name}"


float16 = DType("float16", Kind.FLOAT, 2)
bfloat16 = DType("bfloat16", Kind.FLOAT, 2)
float32 = DType("float32", Kind.FLOAT, 4)
float64 = DType("float64", Kind.FLOAT, 8)
int8 = DType("int8", Kind.INT, 1)
int16 = DType("int16", Kind.INT, 2)
int32 = DType("int32", Kind.INT, 4)
int64 = DType("int64", Kind.INT, 8)
uint8 = DType("uint8", Kind.UINT, 1)
bool_ = DType("bool", Kind.BOOL, 1)

ALL_DTYPES = (float16, bfloat16, float32, float64, int8, int16, int32, int64, uint8, bool_)
BY_NAME = {d.name: d for d in ALL_DTYPES}

_TO_TORCH = {d: getattr(torch, d.name) for d in ALL_DTYPES}  # the names are torch's
_FROM_TORCH = {t: d for d, t in _TO_TORCH.items()}


def to_dtype(dtype: DType | torch.dtype | str) -> DType:
    """Normalize an IR dtype, a torch dtype or a dtype name to an IR dtype."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, torch.dtype) and dtype in _FROM_TORCH:
        return _FROM_TORCH[dtype]
    if isinstance(dtype, str) and dtype in BY_NAME:
        return BY_NAME[dtype]
    raise TypeError(f"unsupported dtype {dtype!r}; loopnest supports {', '.join(BY_NAME)}")


def promote(*dtypes: DType) -> DType:
    """PyTorch's type promotion between tensors of the given dtypes."""
    result = dtypes[0].torch
    for d in dtypes[1:]:
        result = torch.promote_types(result, d.torch)
    return _FROM_TORCH[result]


def scalar_dtype(value) -> DType:
    """The category dtype of a Python scalar in a tensor-scalar op (bool < int64 < float32)."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return int64
    if isinstance(value, float):
        return float32
    raise TypeError(f"unsupported scalar {value!r} of type {type(value).__name__}")


def promote_with_scalar(tensor_dtype: DType, value) -> DType:
    """Result dtype of ``tensor op scalar``: the scalar only raises the category, as in PyTorch."""
    order = {Kind.BOOL: 0, Kind.UINT: 1, Kind.INT: 1, Kind.FLOAT: 2}
    sdt = scalar_dtype(value)
    if order[sdt.kind] <= order[tensor_dtype.kind]:
        return tensor_dtype
    if sdt.is_float:
        return _FROM_TORCH[torch.get_default_dtype()]
    return int64


def compute_dtype(dtype: DType) -> DType:
    """The dtype arithmetic is done in: float32 for float16/bfloat16, else the dtype itself."""
    return float32 if dtype.is_low_precision else dtype
