"""Calling compiled kernels through cffi in ABI mode (dlopen): no second compile per kernel."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from cffi import FFI

from autosched.codegen.cstyle import C_TYPES
from autosched.lower.ir import Buffer

NUMPY_DTYPES = {d: np.dtype(d) for d in C_TYPES}


#: glibc's mallopt parameters, and the values kernels want: scratch buffers (packed operands,
#: Winograd's transformed tiles) up to 32 MiB (glibc's largest mmap threshold) come from the
#: heap and stay there after `free`, instead of being mapped and unmapped on every call
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_BYTES = 32 << 20
_TRIM_THRESHOLD_BYTES = 256 << 20


@functools.cache
def keep_freed_memory() -> bool:
    """Make the kernels' per-call scratch allocations cheap for the life of the process.

    Kernels allocate intermediate buffers with aligned_alloc and free them before returning.
    With glibc's defaults a buffer of a few MiB is mmapped and unmapped every call, so every
    call page-faults its scratch in again: a Winograd F(2×2,3×3) kernel on ResNet's 56×56×64
    layer ran 3.6 ms instead of 1.1 ms (1 thread). Fixed thresholds keep freed blocks in the
    heap for the next call (the process's RSS keeps its high-water mark, as an arena would).
    Without glibc (no mallopt) nothing changes."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD,
                                                                                    _TRIM_THRESHOLD_BYTES))


class KernelError(RuntimeError):
    """A kernel reported an error while running (the CUDA emulation's checks)."""


class Kernel:
    """One compiled function: checks its arguments, then calls straight into C."""

    def __init__(self, path: Path, name: str, params: Sequence[Buffer], source: str):
        self.path, self.name, self.params, self.source = Path(path), name, list(params), source
        ctypes = tuple(C_TYPES[b.dtype] for b in self.params)
        # one FFI per kernel: kernels of the same name may differ in signature
        self._ffi = FFI()
        ptrs = ", ".join(t + "*" for t in ctypes)
        self._ffi.cdef(f"int32_t {name}({ptrs});\n"
                       f"int32_t {name}_time({ptrs}, int32_t, double, int64_t, const int64_t*, double, double*);\n"
                       "void autosched_set_num_threads(int32_t);\n"
                       "const char* autosched_last_error(void);")
        keep_freed_memory()
        self._lib = self._ffi.dlopen(str(self.path))
        self._fn = getattr(self._lib, name)
        self._time = getattr(self._lib, name + "_time")
        self._ptr_types = [f"{t}*" for t in ctypes]

    def __call__(self, *arrays: np.ndarray) -> None:
        self.run(self.bind(arrays))

    def bind(self, arrays: Sequence[np.ndarray]) -> BoundArgs:
        """Checked arguments as C pointers, for calling many times (what timing loops use)."""
        return BoundArgs(tuple(arrays), self._pointers(arrays))

    def _pointers(self, arrays: Sequence[np.ndarray]) -> list:
        if len(arrays) != len(self.params):
            raise TypeError(f"{self.name} takes {len(self.params)} arrays "
                            f"({', '.join(b.name for b in self.params)}), got {len(arrays)}")
        out = []
        for a, b, pt in zip(arrays, self.params, self._ptr_types):
            if not isinstance(a, np.ndarray) or a.dtype != NUMPY_DTYPES[b.dtype] or tuple(a.shape) != tuple(b.shape):
                got = f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray) else type(a).__name__
                raise TypeError(f"{self.name}: argument {b.name} must be {b.dtype}{list(b.shape)}, got {got}")
            if not a.flags.c_contiguous:
                raise TypeError(f"{self.name}: argument {b.name} must be C-contiguous")
            out.append(self._ffi.cast(pt, a.ctypes.data))
        return out

    def run(self, args: BoundArgs) -> None:
        if self._fn(*args.pointers) != 0:
            self._fail()

    def _fail(self):
        """Raise the kernel's own error: a message where the library has one (the CUDA emulation's
        out-of-bounds and barrier reports), else the C back end's only failure."""
        try:
            message = self._ffi.string(self._lib.autosched_last_error()).decode()
        except AttributeError:
            raise MemoryError(f"{self.name}: a temporary buffer could not be allocated") from None
        raise KernelError(message)

    def time(self, args: BoundArgs, repeat: int = 3, min_repeat_ms: float = 50.0, flush_bytes: int = 0,
             stop_above: float = 0.0, warm: Sequence[int] = ()) -> list[float]:
        """Seconds per call, one figure per repeat, timed in C (see the generated `_time` function).
        `warm`: the arguments read back into cache after each flush (a model's activations)."""
        costs = self._ffi.new("double[]", max(1, repeat))
        warm_bytes = self._ffi.NULL
        if warm:
            warm_bytes = self._ffi.new("int64_t[]", [a.nbytes if k in warm else 0 for k, a in enumerate(args.arrays)])
        done = self._time(*args.pointers, int(repeat), float(min_repeat_ms), int(flush_bytes), warm_bytes,
                          float(stop_above), costs)
        if done < 0:
            self._fail()
        return [costs[i] for i in range(done)]

    def set_num_threads(self, n: int) -> None:
        self._lib.autosched_set_num_threads(int(n))

    def empty_args(self) -> list[np.ndarray]:
        return [np.zeros(b.shape, dtype=NUMPY_DTYPES[b.dtype]) for b in self.params]


@dataclass(frozen=True)
class BoundArgs:
    """Pointers into arrays, holding the arrays so the memory outlives every call."""
    arrays: tuple
    pointers: list


def load_kernel(path: Path, name: str, params: Sequence[Buffer], source: str = "") -> Kernel:
    return Kernel(path, name, params, source)
