"""The structural hash: a kernel's identity in the tuning database."""
from __future__ import annotations

import hashlib


def structural_digest(canonical_text: str) -> str:
    """A stable hex digest of a canonical IR text (identical across processes and machines).

    The text is the printer's canonical form: buffers renamed in order of first use, integer
    sizes abstracted; dtypes, ranks, ops and stride patterns stay.
    """
    return hashlib.sha256(canonical_text.encode()).hexdigest()[:20]
