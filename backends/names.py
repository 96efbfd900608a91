"""User names in generated code: mangled into a namespace of their own, never taken raw.

Placeholder, size and graph names are chosen by users and may be anything: a C++ or Python
keyword (``int``, ``lambda``), a libm or module name (``expf``, ``std``, ``tl``), a name of the
generator's own temporaries (``t1``, ``acc0``), another user name of a different kind (a
placeholder named like a size), or no identifier at all (``x.y``, ``1st``). ``mangle`` maps each
kind of name into identifiers that begin with the kind's prefix, one to one, so no two names
meet and no user name meets anything a generator writes.
"""
from __future__ import annotations

import functools

BUFFER = "b_"   # tensors (placeholders, intermediates, outputs)
SYMBOL = "s_"   # symbolic sizes
KERNEL = "k_"   # generated functions


@functools.lru_cache(maxsize=4096)
def escape(name: str) -> str:
    """``name`` spelled with ``[A-Za-z0-9_]`` only, one to one: letters and digits stay, ``_``
    doubles and any other character becomes ``_<hex code>_``."""
    out = []
    for ch in name:
        if ch.isascii() and ch.isalnum():
            out.append(ch)
        elif ch == "_":
            out.append("__")
        else:
            out.append(f"_{ord(ch):x}_")
    return "".join(out)


def mangle(prefix: str, name: str) -> str:
    """The identifier of user name ``name`` of the kind ``prefix`` (``BUFFER``, ``SYMBOL``,
    ``KERNEL``). Generators must name their own temporaries outside these prefixes."""
    return prefix + escape(name)
