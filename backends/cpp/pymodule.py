"""A graph's kernels as a CPython extension module, so a launch is one fast C call.

Through ctypes a launch builds a pointer array and converts three arguments per call, about
2-3 µs on a 2-core Zen 4 machine, which the host time of small graphs shows (a tiny softmax:
6 µs for the launch, 4.7 of them in the ctypes call). The module defines, for each kernel, a
``METH_FASTCALL`` function taking the buffers' data pointers and the symbol values as Python
ints; it calls the kernel's ``extern "C"`` entry with the GIL released (as ctypes does) and
returns None, or the kernel's error slot as a tuple when it recorded an error (``checks.py``).
Every library is the module ``ln_kernels`` of its own file (a module is keyed by file and name,
so libraries never clash). Without CPython's headers the backend launches through ctypes.
"""
from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

from ...scheduler.kernel import Kernel, signature

MODULE = "ln_kernels"
SLOT = 4  # int64 entries of a kernel's error slot (checks.ErrorSlot)


@functools.lru_cache(maxsize=None)
def include_dir() -> str | None:
    """CPython's header directory, if it holds Python.h (None: launch through ctypes)."""
    path = sysconfig.get_paths().get("include")
    return path if path and os.path.exists(os.path.join(path, "Python.h")) else None


def abi_tag() -> str:
    """What a built module depends on beside its source and flags: the interpreter's ABI."""
    return sys.implementation.cache_tag or sys.version


def wrapper_source(kernels: list[Kernel], symbol) -> str:
    """The module's C++: a FASTCALL entry per kernel (``symbol(kernel)``: its C function) and
    the module's init function."""
    parts = ["#define PY_SSIZE_T_CLEAN", "#include <Python.h>"]
    methods = []
    for n, kernel in enumerate(kernels):
        sig = signature(kernel)
        nb, ns = len(sig.buffers), len(sig.symbols)
        parts.append(f"""
static PyObject* ln_py_{n}(PyObject*, PyObject* const* args, Py_ssize_t nargs) {{
  if (nargs != {nb + ns}) {{
    PyErr_Format(PyExc_TypeError, "{symbol(kernel)} takes {nb} buffers and {ns} sizes, got %zd arguments", nargs);
    return NULL;
  }}
  void* bufs[{max(nb, 1)}];
  int64_t syms[{max(ns, 1)}];
  int64_t err[{SLOT}] = {{0}};
  for (Py_ssize_t i = 0; i < {nb}; ++i) bufs[i] = PyLong_AsVoidPtr(args[i]);
  for (Py_ssize_t i = 0; i < {ns}; ++i) syms[i] = PyLong_AsLongLong(args[{nb} + i]);
  if (PyErr_Occurred()) return NULL;
  Py_BEGIN_ALLOW_THREADS
  {symbol(kernel)}(bufs, syms, err);
  Py_END_ALLOW_THREADS
  if (!err[0]) Py_RETURN_NONE;
  PyObject* slot = PyTuple_New({SLOT});
  for (int k = 0; slot && k < {SLOT}; ++k) PyTuple_SET_ITEM(slot, k, PyLong_FromLongLong(err[k]));
  return slot;
}}""")
        methods.append(f'  {{"{symbol(kernel)}", (PyCFunction)(void (*)(void))ln_py_{n}, METH_FASTCALL, NULL}},')
    parts.append("static PyMethodDef ln_methods[] = {\n" + "\n".join(methods) + "\n  {NULL, NULL, 0, NULL}\n};")
    parts.append(f'static struct PyModuleDef ln_module = {{PyModuleDef_HEAD_INIT, "{MODULE}", NULL, -1, ln_methods}};')
    parts.append(f'extern "C" PyMODINIT_FUNC PyInit_{MODULE}(void) {{ return PyModule_Create(&ln_module); }}')
    return "\n".join(parts) + "\n"


@functools.lru_cache(maxsize=None)
def load_module(path: Path) -> ModuleType:
    """The extension module built at ``path`` (loaded once per process; not in ``sys.modules``)."""
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
    spec = importlib.util.spec_from_file_location(MODULE, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
