"""The structural hash: a kernel's identity in the tuning database."""
from __future__ import annotations

import hashlib
from typing import Sequence

from .nodes import Buffer, Node
from .printer import Printer


def canonical_text(nodes: Sequence[Node], buffers: dict[str, Buffer], inputs: Sequence[str] = ()) -> str:
    """Text of ``nodes`` with buffers renamed in order of first use and integer sizes abstracted.

    Dtypes, ranks, ops and stride patterns (contiguous, transposed, broadcast) stay in the text;
    names and concrete sizes do not.
    """
    p = Printer(buffers, canonical=True, order=inputs)
    return "\n".join(p.node(n) for n in nodes)


def structural_hash(nodes: Sequence[Node], buffers: dict[str, Buffer], inputs: Sequence[str] = ()) -> str:
    """A stable hex digest of ``canonical_text`` (identical across processes and machines)."""
    return hashlib.sha256(canonical_text(nodes, buffers, inputs).encode()).hexdigest()[:20]
