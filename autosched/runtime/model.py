"""Loading a built model (library + manifest + weights) and running it on numpy arrays."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

import numpy as np
from cffi import FFI

from autosched.errors import AutoschedError
from autosched.runtime.module import NUMPY_DTYPES, keep_freed_memory, pin_openmp
from autosched.target import CpuInfo, read_cpuinfo


class ModelError(AutoschedError):
    """A built model cannot be loaded or run with the given inputs."""


class Model:
    """A compiled model; `run` takes and returns arrays by the ONNX graph's value names."""

    def __init__(self, library: Path | str):
        self.library = Path(library)
        manifest = self.library.with_suffix(".json")
        if not self.library.exists() or not manifest.exists():
            raise ModelError(f"{self.library}: not a built model (expected the library and {manifest.name} beside it)")
        self.manifest = json.loads(manifest.read_text())
        _check_isa(self.library, self.manifest)
        self.inputs = self.manifest["inputs"]
        self.outputs = self.manifest["outputs"]
        self._ffi = FFI()
        self._ffi.cdef("int32_t autosched_model_init(const char*); void autosched_model_free(void);"
                       "int32_t autosched_model_run(void**, void**); void autosched_set_num_threads(int32_t);"
                       "const char* autosched_last_error(void);")
        pin_openmp()
        keep_freed_memory()
        self._lib = self._ffi.dlopen(str(self.library.resolve()))
        weights = self.library.with_name(self.manifest["weights"])
        status = self._lib.autosched_model_init(str(weights).encode())
        if status == 2:
            raise ModelError(f"{weights}: missing, unreadable or not {self.manifest['weights_bytes']} bytes")
        if status == 3:  # a CUDA build on a machine without a usable GPU, or out of device memory
            raise ModelError(f"{self.library}: CUDA error loading the model: "
                             f"{self._ffi.string(self._lib.autosched_last_error()).decode()} (no usable GPU here? "
                             "'autosched check --emulate' runs a cuda model's kernels on the CPU)")
        if status != 0:
            raise ModelError(f"{self.library}: out of memory loading the model")

    def set_num_threads(self, n: int) -> None:
        self._lib.autosched_set_num_threads(int(n))

    def _check(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        missing = [v["name"] for v in self.inputs if v["name"] not in feeds]
        unknown = sorted(set(feeds) - {v["name"] for v in self.inputs})
        if missing or unknown:
            raise ModelError(f"model inputs are {[v['name'] for v in self.inputs]}; "
                             f"missing {missing}, unknown {unknown}")
        arrays = []
        for v in self.inputs:
            a = np.ascontiguousarray(feeds[v["name"]])
            if list(a.shape) != v["shape"] and [d for d in a.shape if d != 1] == [d for d in v["shape"] if d != 1]:
                a = a.reshape(v["shape"])  # e.g. a 1-element array for a scalar input
            if a.dtype != NUMPY_DTYPES[v["dtype"]] or list(a.shape) != v["shape"]:
                raise ModelError(f"input {v['name']} must be {v['dtype']}{v['shape']}, got {a.dtype}{list(a.shape)}")
            arrays.append(a)
        return arrays

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        ins = self._check(feeds)
        outs = [np.empty(v["shape"], NUMPY_DTYPES[v["dtype"]]) for v in self.outputs]
        self.run_into(ins, outs)
        return {v["name"]: o for v, o in zip(self.outputs, outs)}

    def run_into(self, ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
        """Run with checked, preallocated arrays (what latency benchmarks call)."""
        in_ptrs = self._ffi.new("void*[]", [self._ffi.cast("void*", a.ctypes.data) for a in ins] or [self._ffi.NULL])
        out_ptrs = self._ffi.new("void*[]", [self._ffi.cast("void*", a.ctypes.data) for a in outs])
        if self._lib.autosched_model_run(in_ptrs, out_ptrs) != 0:
            try:  # the CUDA emulation says which kernel failed and why
                raise ModelError(f"{self.library}: {self._ffi.string(self._lib.autosched_last_error()).decode()}")
            except AttributeError:
                raise ModelError(f"{self.library}: a kernel could not allocate its temporary memory") from None

    def close(self) -> None:
        if self._lib is not None:
            self._lib.autosched_model_free()
            self._ffi.dlclose(self._lib)
            self._lib = None


def _check_isa(library: Path, manifest: Mapping, host: CpuInfo | None = None) -> None:
    """A library built for ISA extensions this CPU lacks dies of SIGILL at its first
    instruction: refuse it up front, naming what is missing."""
    needed = set(manifest.get("isa_flags", ()))
    have = (host or read_cpuinfo()).flags
    missing = sorted(needed - have)
    if missing:
        raise ModelError(f"{library}: built for {manifest.get('isa', 'another CPU')} (target "
                         f"{manifest.get('target')!r}); this CPU lacks {', '.join(missing)}. Rebuild it here, "
                         f"or for this CPU with e.g. --target 'llvm -mcpu=NAME'")


def load_model(library: Path | str) -> Model:
    return Model(library)
