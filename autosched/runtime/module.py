"""Calling compiled kernels through cffi in ABI mode (dlopen): no second compile per kernel."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
from pathlib import Path
from typing import Sequence

import numpy as np
from cffi import FFI

from autosched.codegen.c import C_TYPES
from autosched.lower.ir import Buffer

_NP = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "int32": np.int32,
       "int64": np.int64, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}


@functools.lru_cache(maxsize=None)
def _pin_openmp():
    """Keep the OpenMP runtime loaded for the life of the process.

    A kernel library pulls in libgomp; when the last kernel is unloaded libgomp would be
    unloaded with it while its idle worker threads still run its code, and the process dies.
    """
    name = ctypes.util.find_library("gomp") or "libgomp.so.1"
    return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)


class Kernel:
    """One compiled function: checks its arguments, then calls straight into C."""

    def __init__(self, path: Path, name: str, params: Sequence[Buffer], source: str):
        self.path, self.name, self.params, self.source = Path(path), name, list(params), source
        ctypes = tuple(C_TYPES[b.dtype] for b in self.params)
        # one FFI per kernel: kernels of the same name may differ in signature
        self._ffi = FFI()
        self._ffi.cdef(f"int32_t {name}({', '.join(t + '*' for t in ctypes)});\n"
                       "void autosched_set_num_threads(int32_t);")
        _pin_openmp()
        self._lib = self._ffi.dlopen(str(self.path))
        self._fn = getattr(self._lib, name)
        self._ptr_types = [f"{t}*" for t in ctypes]

    def __call__(self, *arrays: np.ndarray) -> None:
        self.run(self.pointers(arrays))

    def pointers(self, arrays: Sequence[np.ndarray]) -> list:
        """cffi pointers for `arrays` after checking each against its parameter."""
        if len(arrays) != len(self.params):
            raise TypeError(f"{self.name} takes {len(self.params)} arrays "
                            f"({', '.join(b.name for b in self.params)}), got {len(arrays)}")
        out = []
        for a, b, pt in zip(arrays, self.params, self._ptr_types):
            if not isinstance(a, np.ndarray) or a.dtype != _NP[b.dtype] or tuple(a.shape) != tuple(b.shape):
                got = f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray) else type(a).__name__
                raise TypeError(f"{self.name}: argument {b.name} must be {b.dtype}{list(b.shape)}, got {got}")
            if not a.flags.c_contiguous:
                raise TypeError(f"{self.name}: argument {b.name} must be C-contiguous")
            out.append(self._ffi.cast(pt, a.ctypes.data))
        return out

    def run(self, pointers: list) -> None:
        """Call with pre-checked pointers (what timing loops use)."""
        if self._fn(*pointers) != 0:
            raise MemoryError(f"{self.name}: a temporary buffer could not be allocated")

    def set_num_threads(self, n: int) -> None:
        self._lib.autosched_set_num_threads(int(n))

    def empty_args(self) -> list[np.ndarray]:
        return [np.zeros(b.shape, dtype=_NP[b.dtype]) for b in self.params]


def load_kernel(path: Path, name: str, params: Sequence[Buffer], source: str = "") -> Kernel:
    return Kernel(path, name, params, source)
