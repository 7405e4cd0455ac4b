"""The CUDA driver calls a GPU measurement makes, through cuda-bindings or pycuda.

The GPU worker loads a cubin, copies arrays, launches a kernel and times it with events: a dozen
driver calls, which two Python bindings offer. cuda-bindings can also capture the timed launches
as a CUDA graph, replayed by one call, so no Python runs between them; pycuda wraps no graph API,
and there the worker launches from a Python loop (`graphs` says which). cuda-bindings (NVIDIA's, `pip install
'autosched[cuda]'`) installs as wheels; pycuda (`autosched[pycuda]`, the design's original
choice) builds from source against the CUDA toolkit (see the README). Whichever is installed
serves, behind `Driver`: cuda-bindings first, pycuda otherwise, or the one AUTOSCHED_CUDA_BINDINGS
names ("cuda-bindings" or "pycuda").

Errors come back as `CudaError` carrying the driver's error name (CUDA_ERROR_ILLEGAL_ADDRESS),
so a sticky error, after which the context is lost, is recognised the same under both: pycuda
reports the error's description ("an illegal memory access was encountered"), mapped back to
its name here.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

#: errors after which the context is lost (CUDA driver API documentation, "sticky" errors)
STICKY = frozenset({"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
                    "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC",
                    "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ASSERT", "CUDA_ERROR_LAUNCH_TIMEOUT",
                    "CUDA_ERROR_ECC_UNCORRECTABLE"})
#: cuGetErrorString's descriptions (what pycuda's exceptions say) of the sticky errors and a few others
DESCRIPTIONS = {
    "an illegal memory access was encountered": "CUDA_ERROR_ILLEGAL_ADDRESS",
    "unspecified launch failure": "CUDA_ERROR_LAUNCH_FAILED",
    "an illegal instruction was encountered": "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "misaligned address": "CUDA_ERROR_MISALIGNED_ADDRESS",
    "operation not supported on global/shared address space": "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    "invalid program counter": "CUDA_ERROR_INVALID_PC",
    "hardware stack error": "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "device-side assert triggered": "CUDA_ERROR_ASSERT",
    "the launch timed out and was terminated": "CUDA_ERROR_LAUNCH_TIMEOUT",
    "uncorrectable ECC error encountered": "CUDA_ERROR_ECC_UNCORRECTABLE",
    "out of memory": "CUDA_ERROR_OUT_OF_MEMORY",
    "no CUDA-capable device is detected": "CUDA_ERROR_NO_DEVICE",
    "invalid argument": "CUDA_ERROR_INVALID_VALUE",
}
NO_GPU_HINT = "--emulate checks CUDA kernels on the CPU instead"
BINDINGS = ("cuda-bindings", "pycuda")


class CudaError(RuntimeError):
    """A driver call failed; `name` is the driver's error name, `sticky` whether the context is lost."""

    def __init__(self, name: str, call: str):
        super().__init__(f"{call}: {name}")
        self.name, self.sticky = name, name in STICKY


class NoDriver(RuntimeError):
    """No binding, no driver or no GPU: the message says which and what to do."""


class Driver(ABC):
    """The first GPU's primary context and the calls a measurement makes on it."""

    bindings: str
    name: str  # the GPU's model, as cuDeviceGetName says
    capability: tuple[int, int]
    l2_bytes: int  # the GPU's L2 cache, which a flush before a cold launch must overwrite
    #: whether the stream can be captured into a CUDA graph (`begin_capture`)
    graphs: bool = False

    @abstractmethod
    def load(self, cubin: bytes, symbol: str, shared_bytes: int) -> tuple[Any, Any]:
        """(module, function) of `symbol` in `cubin`, allowed `shared_bytes` of dynamic shared memory."""

    @abstractmethod
    def unload(self, module: Any) -> None: ...

    @abstractmethod
    def alloc(self, nbytes: int) -> Any: ...

    @abstractmethod
    def free(self, ptr: Any) -> None: ...

    @abstractmethod
    def to_device(self, ptr: Any, a: np.ndarray) -> None: ...

    @abstractmethod
    def to_host(self, a: np.ndarray, ptr: Any) -> None: ...

    @abstractmethod
    def memset_async(self, ptr: Any, value: int, nbytes: int) -> None: ...

    @abstractmethod
    def copy_async(self, dst: Any, src: Any, nbytes: int) -> None:
        """Device to device, on the stream (a read of `src` that leaves it in the L2)."""

    @abstractmethod
    def launch(self, func: Any, grid: tuple[int, int, int], block: tuple[int, int, int], shared_bytes: int,
               ptrs: list) -> None:
        """Enqueue the kernel on the worker's stream, its parameters the device pointers `ptrs`."""

    @abstractmethod
    def synchronize(self) -> None: ...

    @abstractmethod
    def event(self) -> Any:
        """A fresh event, recorded on the stream now: while the stream is captured, as a node of
        the graph, recorded again by each replay."""

    @abstractmethod
    def elapsed_ms(self, start: Any, end: Any, release: bool = True) -> float:
        """Milliseconds between two recorded events, once `end` has completed; both are released
        unless a graph records them again."""

    @abstractmethod
    def destroy_event(self, event: Any) -> None: ...

    def begin_capture(self) -> None:
        """From now on, what is enqueued on the stream is captured, not run (only where `graphs`)."""
        raise NotImplementedError(f"{self.bindings} cannot capture CUDA graphs")

    def end_capture(self) -> Any:
        """The captured work as an executable graph, for `launch_graph`."""
        raise NotImplementedError(f"{self.bindings} cannot capture CUDA graphs")

    def launch_graph(self, graph: Any) -> None:
        raise NotImplementedError(f"{self.bindings} cannot capture CUDA graphs")

    def free_graph(self, graph: Any) -> None:
        raise NotImplementedError(f"{self.bindings} cannot capture CUDA graphs")


class CudaBindingsDriver(Driver):
    """Through NVIDIA's cuda-bindings: each call returns (status, values...)."""

    bindings = "cuda-bindings"
    graphs = True

    def __init__(self, driver: Any) -> None:
        self.cu = driver
        try:
            self.call("cuInit", 0)
        except CudaError as e:
            raise NoDriver(f"no usable NVIDIA GPU here ({e}); {NO_GPU_HINT}") from None
        except Exception as e:  # noqa: BLE001 - cuda-bindings raises its own types when libcuda is missing
            raise NoDriver(f"no NVIDIA driver here ({type(e).__name__}: {e}); {NO_GPU_HINT}") from None
        device = self.call("cuDeviceGet", 0)
        self.name = self.call("cuDeviceGetName", 256, device).split(b"\0")[0].decode()
        attr = driver.CUdevice_attribute
        self.capability = (self.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
                           self.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device))
        self.l2_bytes = self.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device)
        self.capturing = False
        self.context = self.call("cuDevicePrimaryCtxRetain", device)
        self.call("cuCtxSetCurrent", self.context)
        self.stream = self.call("cuStreamCreate", 0)

    def call(self, name: str, *args: Any) -> Any:
        """A driver call; its results without the status, or CudaError naming the status."""
        err, *values = getattr(self.cu, name)(*args)
        if err != self.cu.CUresult.CUDA_SUCCESS:
            raise CudaError(self.cu.cuGetErrorName(err)[1].decode(), name)
        return values[0] if len(values) == 1 else tuple(values)

    def load(self, cubin: bytes, symbol: str, shared_bytes: int) -> tuple[Any, Any]:
        module = self.call("cuModuleLoadData", cubin)
        func = self.call("cuModuleGetFunction", module, symbol.encode())
        if shared_bytes > 48 * 1024:  # beyond the static limit: opt in, per kernel
            self.call("cuFuncSetAttribute", func,
                      self.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes)
        return module, func

    def unload(self, module: Any) -> None:
        self.call("cuModuleUnload", module)

    def alloc(self, nbytes: int) -> Any:
        return self.call("cuMemAlloc", max(1, nbytes))

    def free(self, ptr: Any) -> None:
        self.call("cuMemFree", ptr)

    def to_device(self, ptr: Any, a: np.ndarray) -> None:
        self.call("cuMemcpyHtoD", ptr, a, a.nbytes)

    def to_host(self, a: np.ndarray, ptr: Any) -> None:
        self.call("cuMemcpyDtoH", a, ptr, a.nbytes)

    def memset_async(self, ptr: Any, value: int, nbytes: int) -> None:
        self.call("cuMemsetD8Async", ptr, value, nbytes, self.stream)

    def copy_async(self, dst: Any, src: Any, nbytes: int) -> None:
        self.call("cuMemcpyDtoDAsync", dst, src, nbytes, self.stream)

    def launch(self, func: Any, grid: tuple[int, int, int], block: tuple[int, int, int], shared_bytes: int,
               ptrs: list) -> None:
        self.call("cuLaunchKernel", func, *grid, *block, shared_bytes, self.stream,
                  (tuple(ptrs), tuple(None for _ in ptrs)), 0)

    def synchronize(self) -> None:
        self.call("cuStreamSynchronize", self.stream)

    def event(self) -> Any:
        ev = self.call("cuEventCreate", 0)
        if self.capturing:  # an event record node, not a dependency between captured streams
            self.call("cuEventRecordWithFlags", ev, self.stream, self.cu.CUevent_record_flags.CU_EVENT_RECORD_EXTERNAL)
        else:
            self.call("cuEventRecord", ev, self.stream)
        return ev

    def elapsed_ms(self, start: Any, end: Any, release: bool = True) -> float:
        self.call("cuEventSynchronize", end)
        ms = self.call("cuEventElapsedTime", start, end)
        for ev in (start, end) if release else ():
            self.destroy_event(ev)
        return float(ms)

    def destroy_event(self, event: Any) -> None:
        self.call("cuEventDestroy", event)

    def begin_capture(self) -> None:
        self.call("cuStreamBeginCapture", self.stream, self.cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        self.capturing = True

    def end_capture(self) -> Any:
        self.capturing = False
        graph = self.call("cuStreamEndCapture", self.stream)
        try:
            return graph, self.call("cuGraphInstantiate", graph, 0)
        except CudaError:
            self.call("cuGraphDestroy", graph)
            raise

    def launch_graph(self, graph: Any) -> None:
        self.call("cuGraphLaunch", graph[1], self.stream)

    def free_graph(self, graph: Any) -> None:
        self.call("cuGraphExecDestroy", graph[1])
        self.call("cuGraphDestroy", graph[0])


class PyCudaDriver(Driver):
    """Through pycuda: objects with methods, errors as exceptions whose text is cuGetErrorString's."""

    bindings = "pycuda"

    def __init__(self, cuda: Any) -> None:
        self.cu = cuda
        try:
            cuda.init()
            device = cuda.Device(0)
        except cuda.Error as e:
            raise NoDriver(f"no usable NVIDIA GPU here ({self._error(e, 'cuInit')}); {NO_GPU_HINT}") from None
        self.name = device.name()
        self.capability = tuple(device.compute_capability())
        self.l2_bytes = device.get_attribute(cuda.device_attribute.L2_CACHE_SIZE)
        self.context = device.retain_primary_context()
        self.context.push()
        self.stream = cuda.Stream()

    def _error(self, e: Exception, call: str) -> CudaError:
        text = str(e)
        description = text.split(":", 1)[1].strip() if ":" in text else text.strip()
        name = DESCRIPTIONS.get(description)
        if name is None:  # a launch error pycuda does not describe: the context is as good as lost
            name = "CUDA_ERROR_LAUNCH_FAILED" if isinstance(e, self.cu.LaunchError) else f"CUDA_ERROR ({text})"
        return CudaError(name, call)

    def _do(self, call: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except self.cu.Error as e:
            raise self._error(e, call) from None

    def load(self, cubin: bytes, symbol: str, shared_bytes: int) -> tuple[Any, Any]:
        module = self._do("cuModuleLoadData", self.cu.module_from_buffer, cubin)
        func = self._do("cuModuleGetFunction", module.get_function, symbol)
        if shared_bytes > 48 * 1024:
            self._do("cuFuncSetAttribute", func.set_attribute,
                     self.cu.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes)
        return module, func

    def unload(self, module: Any) -> None:
        del module  # pycuda unloads a module when its object goes

    def alloc(self, nbytes: int) -> Any:
        return self._do("cuMemAlloc", self.cu.mem_alloc, max(1, nbytes))

    def free(self, ptr: Any) -> None:
        self._do("cuMemFree", ptr.free)

    def to_device(self, ptr: Any, a: np.ndarray) -> None:
        self._do("cuMemcpyHtoD", self.cu.memcpy_htod, ptr, a)

    def to_host(self, a: np.ndarray, ptr: Any) -> None:
        self._do("cuMemcpyDtoH", self.cu.memcpy_dtoh, a, ptr)

    def memset_async(self, ptr: Any, value: int, nbytes: int) -> None:
        self._do("cuMemsetD8Async", self.cu.memset_d8_async, ptr, value, nbytes, self.stream)

    def copy_async(self, dst: Any, src: Any, nbytes: int) -> None:
        self._do("cuMemcpyDtoDAsync", self.cu.memcpy_dtod_async, dst, src, nbytes, self.stream)

    def launch(self, func: Any, grid: tuple[int, int, int], block: tuple[int, int, int], shared_bytes: int,
               ptrs: list) -> None:
        self._do("cuLaunchKernel", func, *ptrs, grid=tuple(grid), block=tuple(block), shared=shared_bytes,
                 stream=self.stream)

    def synchronize(self) -> None:
        self._do("cuStreamSynchronize", self.stream.synchronize)

    def event(self) -> Any:
        ev = self.cu.Event()
        self._do("cuEventRecord", ev.record, self.stream)
        return ev

    def elapsed_ms(self, start: Any, end: Any, release: bool = True) -> float:
        self._do("cuEventSynchronize", end.synchronize)
        return float(self._do("cuEventElapsedTime", start.time_till, end))

    def destroy_event(self, event: Any) -> None:
        del event  # pycuda destroys an event when its object goes


def _import(bindings: str) -> Any:
    """The binding's driver module; ImportError when it is not installed, NoDriver when it is
    but cannot load the driver library (pycuda links libcuda.so.1 when imported)."""
    if bindings == "cuda-bindings":
        from cuda.bindings import driver
        return driver
    try:
        import pycuda.driver as cuda
    except ImportError as e:
        if "libcuda" in str(e):
            raise NoDriver(f"pycuda is installed but the NVIDIA driver (libcuda.so.1) is not: no usable NVIDIA GPU "
                           f"here; {NO_GPU_HINT}") from None
        raise
    return cuda


def open_driver(bindings: str | None = None) -> Driver:
    """The first GPU through `bindings` (default: AUTOSCHED_CUDA_BINDINGS, else whichever of
    cuda-bindings and pycuda imports first); NoDriver with one line saying what is missing."""
    choice = bindings or os.environ.get("AUTOSCHED_CUDA_BINDINGS") or None
    if choice is not None and choice not in BINDINGS:
        raise NoDriver(f"AUTOSCHED_CUDA_BINDINGS={choice!r}: expected one of {', '.join(BINDINGS)}")
    missing = []
    for name in [choice] if choice else list(BINDINGS):
        try:
            module = _import(name)
        except ImportError as e:
            missing.append(f"{name}: {e}")
            continue
        return CudaBindingsDriver(module) if name == "cuda-bindings" else PyCudaDriver(module)
    raise NoDriver(f"the GPU runner needs cuda-bindings (pip install 'autosched[cuda]') or pycuda (pip install "
                   f"'autosched[pycuda]', built against the CUDA toolkit: see the README) ({'; '.join(missing)}); "
                   f"{NO_GPU_HINT}")


__all__ = ["BINDINGS", "STICKY", "CudaBindingsDriver", "CudaError", "Driver", "NoDriver", "PyCudaDriver",
           "open_driver"]
