"""Loading a built model (library + manifest + weights) and running it on numpy arrays."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from cffi import FFI

from autosched.errors import AutoschedError
from autosched.runtime.module import NUMPY_DTYPES, keep_freed_memory
from autosched.target import CpuInfo, read_cpuinfo

#: 2: the manifest holds the size and SHA-256 of the library and of the weights
MANIFEST_FORMAT = 2

_REQUIRED = ("weights", "weights_bytes", "inputs", "outputs")


class ModelError(AutoschedError):
    """A built model cannot be loaded or run with the given inputs."""


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks (weights files reach gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class KernelCall:
    """One kernel call of a built model and its median time in the model."""

    op: str        # the anchor op of its fused group
    group: str     # the fused group's name (the anchor node's)
    task: int      # index of its task in the manifest's "tasks"
    seconds: float


class Model:
    """A compiled model; `run` takes and returns arrays by the ONNX graph's value names."""

    def __init__(self, library: Path | str, verify: bool = True):
        self.library = Path(library)
        manifest = self.library.with_suffix(".json")
        if not self.library.exists() or not manifest.exists():
            raise ModelError(f"{self.library}: not a built model (expected the library and {manifest.name} beside it)")
        self.manifest = _read_manifest(manifest)
        _check_files(self.library, self.manifest, verify)
        _check_isa(self.library, self.manifest)
        self.inputs = self.manifest["inputs"]
        self.outputs = self.manifest["outputs"]
        self._cached_pointers: tuple[tuple, tuple, tuple] | None = None
        self._ffi = FFI()
        self._ffi.cdef("int32_t autosched_model_init(const char*); void autosched_model_free(void);"
                       "int32_t autosched_model_run(void**, void**); void autosched_set_num_threads(int32_t);"
                       "const char* autosched_last_error(void); int32_t autosched_model_profile(void**, void**, double*);")
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

    def _pointers(self, ins: list[np.ndarray], outs: list[np.ndarray]):
        """The C arrays of the buffers' addresses, kept for the same arrays run after run: made
        anew they cost 12 us a call (cffi objects and `ctypes.data` per array), more than a
        small model's kernels. The arrays are held with them, so their ids name them while
        cached (and no `resize` can move their data)."""
        key = (*map(id, ins), None, *map(id, outs))
        if self._cached_pointers is None or self._cached_pointers[0] != key:
            pointers = (self._ffi.new("void*[]", [self._ffi.cast("void*", a.ctypes.data) for a in ins] or [self._ffi.NULL]),
                        self._ffi.new("void*[]", [self._ffi.cast("void*", a.ctypes.data) for a in outs]))
            self._cached_pointers = (key, (list(ins), list(outs)), pointers)
        return self._cached_pointers[2]

    def run_into(self, ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
        """Run with checked, preallocated arrays (what latency benchmarks call)."""
        if self._lib.autosched_model_run(*self._pointers(ins, outs)) != 0:
            try:  # the CUDA emulation says which kernel failed and why
                raise ModelError(f"{self.library}: {self._ffi.string(self._lib.autosched_last_error()).decode()}")
            except AttributeError:
                raise ModelError(f"{self.library}: a kernel could not allocate its temporary memory") from None

    def profile(self, feeds: Mapping[str, np.ndarray], runs: int = 10) -> list[KernelCall]:
        """Each kernel call's median seconds over `runs` runs of the model, timed inside it (after
        one untimed run): where a model's time goes, kernel by kernel, in the state the model
        leaves each kernel's inputs and weights."""
        calls = self.manifest.get("calls")
        try:
            profile = self._lib.autosched_model_profile
        except AttributeError:
            profile = None
        if calls is None or profile is None:
            raise ModelError(f"{self.library}: built without a per-kernel profile (by an older autosched: rebuild it)")
        ins = self._check(feeds)
        outs = [np.empty(v["shape"], NUMPY_DTYPES[v["dtype"]]) for v in self.outputs]
        self.run_into(ins, outs)
        seconds = np.empty((runs, max(len(calls), 1)), np.float64)
        in_ptrs, out_ptrs = self._pointers(ins, outs)
        for r in range(runs):
            status = profile(in_ptrs, out_ptrs, self._ffi.cast("double*", seconds[r].ctypes.data))
            if status == 3:  # a CUDA build's error, in the driver's words
                raise ModelError(f"{self.library}: {self._ffi.string(self._lib.autosched_last_error()).decode()}")
            if status != 0:
                raise ModelError(f"{self.library}: a kernel could not allocate its temporary memory")
        medians = np.median(seconds, axis=0)
        return [KernelCall(c["op"], c["group"], c["task"], float(t)) for c, t in zip(calls, medians)]

    def close(self) -> None:
        if self._lib is not None:
            self._lib.autosched_model_free()
            self._ffi.dlclose(self._lib)
            self._lib = None


def _read_manifest(path: Path) -> dict:
    """The manifest, or one line saying it is not one (a truncated copy is the usual cause)."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelError(f"{path}: truncated or not a model manifest ({e}); rebuild the model") from None
    missing = [k for k in _REQUIRED if not isinstance(manifest, dict) or k not in manifest]
    if missing:
        raise ModelError(f"{path}: not a model manifest (no {', '.join(missing)}); rebuild the model")
    return manifest


def _check_files(library: Path, manifest: Mapping, verify: bool) -> None:
    """The library and weights are the ones the build wrote. A truncated library must be caught
    here: mapping it dies of SIGBUS. Sizes are always compared (free); `verify` also compares
    SHA-256 digests, which read every byte (about a second per GB of weights)."""
    if "library_sha256" not in manifest:
        if verify:
            raise ModelError(f"{library.with_suffix('.json')}: no checksums (built by an older autosched); "
                             "rebuild the model, or load it unchecked (verify=False, 'autosched run --no-verify')")
        return
    weights = library.with_name(manifest["weights"])
    for path, size, digest in ((library, manifest["library_bytes"], manifest["library_sha256"]),
                               (weights, manifest["weights_bytes"], manifest["weights_sha256"])):
        try:
            actual = path.stat().st_size
            if actual != size:
                raise ModelError(f"{path}: {actual} bytes where the build wrote {size} (truncated or replaced); "
                                 "rebuild the model")
            if verify and file_sha256(path) != digest:
                raise ModelError(f"{path}: damaged (its SHA-256 is not the one the build recorded); "
                                 "rebuild the model")
        except OSError as e:
            raise ModelError(f"{path}: cannot read the built model's file: {e.strerror}") from None


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


def load_model(library: Path | str, verify: bool = True) -> Model:
    """Load a built model, its library and weights checked against the manifest's SHA-256 digests
    first; `verify=False` compares only their sizes (for weights so large hashing them at every
    load costs too much)."""
    return Model(library, verify)
