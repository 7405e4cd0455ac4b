"""Test doubles of the two CUDA driver bindings (cuda-bindings and pycuda) over one simulated GPU:
the GPU is the only thing faked, so the GPU worker, its driver layer and the runner run as they
would on a machine with one (this machine has none).

The simulated H100 keeps allocations as bytes, loads any cubin, and "runs" a kernel by writing
the outputs the worker's request expects (the task's reference, which `serve` hands it), so what
is tested is everything around the kernel, not its arithmetic. A kernel whose symbol contains
`illegal_address` faults as a wild store does on a GPU: the error is sticky, every later call of
the context fails. A launch lasts a time derived from the cubin's bytes, so configs differ, and a
memset (the worker's L2 flush) lasts FLUSH_MS. The cuda-bindings double captures a stream into a
graph as the driver does: captured work is kept, not run, and each replay runs it again.

    python -m tests.fake_cuda PARENT_PID     # the GPU worker on the fake H100, through the
                                             # binding FAKE_CUDA_BINDINGS names (default cuda-bindings)
"""
import enum
import hashlib
import os
import sys
import types

import numpy as np

from autosched.measure import gpu_worker
from autosched.measure.gpu import GpuRunner
from autosched.measure.worker import load_data

H100 = "NVIDIA H100 80GB HBM3"
ILLEGAL_ADDRESS = "CUDA_ERROR_ILLEGAL_ADDRESS"
L2_BYTES = 50 << 20
FLUSH_MS = 0.5


class Device:
    """The simulated GPU: memory, modules, a stream whose launches finish at once, a sticky error."""

    def __init__(self, present: bool = True) -> None:
        self.present = present
        self.memory: dict[int, bytearray] = {}
        self.next_ptr = 0x7F0000000000
        self.modules: dict[int, bytes] = {}
        self.error: str | None = None  # sticky: set by a faulting kernel, failing every later call
        self.expected: list[np.ndarray] = []  # what the running request's kernel must write
        self.clock_ms = 0.0
        self.launches = 0  # kernels run, captured ones at each replay
        self.copied: list[tuple[int, int]] = []  # (source, bytes) of each device-to-device copy run
        self.captured: list | None = None  # the work of the graph being captured

    def enqueue(self, work) -> None:
        """Run `work` now, or keep it in the graph being captured."""
        self.check()
        if self.captured is not None:
            self.captured.append(work)
        else:
            work()

    def memset(self, ptr: int, value: int, nbytes: int) -> None:
        self.write(ptr, bytes([value]) * nbytes)
        self.clock_ms += FLUSH_MS

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        self.write(dst, self.read(src, nbytes))
        self.clock_ms += FLUSH_MS / 10
        self.copied.append((src, nbytes))

    def check(self) -> None:
        if self.error is not None:
            raise DeviceError(self.error)

    def alloc(self, nbytes: int) -> int:
        self.check()
        ptr, self.next_ptr = self.next_ptr, self.next_ptr + ((nbytes + 255) // 256) * 256
        self.memory[ptr] = bytearray(nbytes)
        return ptr

    def write(self, ptr: int, data: bytes) -> None:
        self.check()
        self.memory[ptr][:len(data)] = data

    def read(self, ptr: int, nbytes: int) -> bytes:
        self.check()
        return bytes(self.memory[ptr][:nbytes])

    def launch(self, cubin: bytes, symbol: str, ptrs: list[int]) -> None:
        self.check()
        if "illegal_address" in symbol:
            self.error = ILLEGAL_ADDRESS
            return
        for ptr, out in zip(ptrs[len(ptrs) - len(self.expected):], self.expected):
            self.memory[ptr][:out.nbytes] = np.ascontiguousarray(out).tobytes()
        self.clock_ms += kernel_ms(cubin)
        self.launches += 1


def kernel_ms(cubin: bytes) -> float:
    """How long the simulated GPU runs a cubin's kernel."""
    return 1e-3 * (1 + int(hashlib.sha256(cubin).hexdigest()[:6], 16) % 1000)


class DeviceError(Exception):
    """A driver call the device refused: the binding doubles turn it into their own error form."""


# --- cuda-bindings ---------------------------------------------------------------------------------
class CUresult(enum.Enum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_ILLEGAL_ADDRESS = 700


class CudaBindingsDouble:
    """`cuda.bindings.driver` over a Device: each call returns (status, values...)."""

    CUresult = CUresult

    class CUdevice_attribute(enum.Enum):
        CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76

    class CUstreamCaptureMode(enum.Enum):
        CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1

    class CUevent_record_flags(enum.Enum):
        CU_EVENT_RECORD_EXTERNAL = 1

    class CUfunction_attribute(enum.Enum):
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

    def __init__(self, device: Device) -> None:
        self.device = device
        self.events: dict[int, float] = {}
        self.graphs: dict[int, list] = {}
        self.graph_launches = 0
        self.next_event = 0

    def _call(self, fn, *args):
        try:
            out = fn(*args)
        except DeviceError as e:
            return (CUresult[str(e)],)
        return (CUresult.CUDA_SUCCESS, *(out if isinstance(out, tuple) else (out,) if out is not None else ()))

    def cuGetErrorName(self, err):
        return (CUresult.CUDA_SUCCESS, err.name.encode())

    def cuInit(self, flags):
        return (CUresult.CUDA_SUCCESS,) if self.device.present else (CUresult.CUDA_ERROR_NO_DEVICE,)

    def cuDeviceGet(self, ordinal):
        return (CUresult.CUDA_SUCCESS, ordinal)

    def cuDeviceGetName(self, length, device):
        return (CUresult.CUDA_SUCCESS, H100.encode().ljust(length, b"\0"))

    def cuDeviceGetAttribute(self, attribute, device):
        values = {self.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9,
                  self.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0,
                  self.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: L2_BYTES}
        return (CUresult.CUDA_SUCCESS, values[attribute])

    def cuDevicePrimaryCtxRetain(self, device):
        return (CUresult.CUDA_SUCCESS, "context")

    def cuCtxSetCurrent(self, context):
        return (CUresult.CUDA_SUCCESS,)

    def cuStreamCreate(self, flags):
        return (CUresult.CUDA_SUCCESS, "stream")

    def cuModuleLoadData(self, cubin):
        def load():
            self.device.check()
            handle = len(self.device.modules) + 1
            self.device.modules[handle] = bytes(cubin)
            return handle
        return self._call(load)

    def cuModuleGetFunction(self, module, symbol):
        return self._call(lambda: (module, symbol.decode()))

    def cuFuncSetAttribute(self, func, attribute, value):
        return self._call(self.device.check)

    def cuModuleUnload(self, module):
        return self._call(lambda: self.device.modules.pop(module) and None)

    def cuMemAlloc(self, nbytes):
        return self._call(self.device.alloc, nbytes)

    def cuMemFree(self, ptr):
        return self._call(lambda: self.device.check() or self.device.memory.pop(ptr) and None)

    def cuMemcpyHtoD(self, ptr, array, nbytes):
        return self._call(self.device.write, ptr, np.ascontiguousarray(array).tobytes()[:nbytes])

    def cuMemcpyDtoH(self, array, ptr, nbytes):
        def copy():
            array.reshape(-1).view(np.uint8)[:] = np.frombuffer(self.device.read(ptr, nbytes), np.uint8)
        return self._call(copy)

    def cuMemsetD8Async(self, ptr, value, nbytes, stream):
        return self._call(self.device.enqueue, lambda: self.device.memset(ptr, value, nbytes))

    def cuMemcpyDtoDAsync(self, dst, src, nbytes, stream):
        return self._call(self.device.enqueue, lambda: self.device.copy(dst, src, nbytes))

    def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        module, symbol = func
        cubin, ptrs = self.device.modules[module], list(params[0])
        return self._call(self.device.enqueue, lambda: self.device.launch(cubin, symbol, ptrs))

    def cuStreamSynchronize(self, stream):
        return self._call(self.device.check)

    def cuEventCreate(self, flags):
        def create():
            self.next_event += 1
            self.events[self.next_event] = float("nan")  # not recorded yet
            return self.next_event
        return self._call(create)

    def cuEventRecord(self, event, stream):
        if self.device.captured is not None:
            raise AssertionError("a plain event record while capturing joins streams; time with external ones")
        return self._call(lambda: self.events.__setitem__(event, self.device.clock_ms))

    def cuEventRecordWithFlags(self, event, stream, flags):
        assert flags is self.CUevent_record_flags.CU_EVENT_RECORD_EXTERNAL
        return self._call(self.device.enqueue, lambda: self.events.__setitem__(event, self.device.clock_ms))

    def cuStreamBeginCapture(self, stream, mode):
        def begin():
            assert self.device.captured is None, "the stream is already being captured"
            self.device.captured = []
        return self._call(begin)

    def cuStreamEndCapture(self, stream):
        def end():
            handle = len(self.graphs) + 1
            self.graphs[handle], self.device.captured = self.device.captured, None
            return handle
        return self._call(end)

    def cuGraphInstantiate(self, graph, flags):
        return self._call(lambda: -graph)

    def cuGraphLaunch(self, graph_exec, stream):
        def replay():
            self.graph_launches += 1
            for work in self.graphs[-graph_exec]:
                self.device.enqueue(work)
        return self._call(replay)

    def cuGraphExecDestroy(self, graph_exec):
        return self._call(self.device.check)

    def cuGraphDestroy(self, graph):
        return self._call(lambda: self.graphs.pop(graph) and None)

    def cuEventSynchronize(self, event):
        return self._call(self.device.check)

    def cuEventElapsedTime(self, start, end):
        return self._call(lambda: self.events[end] - self.events[start])

    def cuEventDestroy(self, event):
        return self._call(lambda: self.events.pop(event) and None)


def cuda_bindings_modules(driver) -> dict[str, types.ModuleType]:
    """The sys.modules entries that make `from cuda.bindings import driver` find `driver`,
    whether cuda-bindings is installed or not."""
    package = types.ModuleType("cuda.bindings")
    package.driver = driver
    return {"cuda": types.ModuleType("cuda"), "cuda.bindings": package}


# --- pycuda ----------------------------------------------------------------------------------------
def pycuda_modules(device: Device) -> dict[str, types.ModuleType]:
    """The sys.modules entries of a `pycuda.driver` over `device`: objects with methods, errors
    as exceptions whose text is cuGetErrorString's description, as pycuda's are."""
    drv = types.ModuleType("pycuda.driver")

    class Error(Exception):
        pass

    class LogicError(Error):
        pass

    class LaunchError(Error):
        pass

    class RuntimeError_(Error):
        pass

    class MemoryError_(Error):
        pass

    descriptions = {ILLEGAL_ADDRESS: "an illegal memory access was encountered"}

    def guarded(call: str, fn, *args):
        try:
            return fn(*args)
        except DeviceError as e:
            raise RuntimeError_(f"{call} failed: {descriptions[str(e)]}") from None

    class DeviceAllocation:
        def __init__(self, nbytes: int) -> None:
            self.ptr = guarded("cuMemAlloc", device.alloc, nbytes)

        def free(self) -> None:
            guarded("cuMemFree", device.check)

        def __int__(self) -> int:
            return self.ptr

    class Function:
        def __init__(self, cubin: bytes, symbol: str) -> None:
            self.cubin, self.symbol = cubin, symbol

        def set_attribute(self, attribute, value) -> None:
            guarded("cuFuncSetAttribute", device.check)

        def __call__(self, *args, grid, block, shared=0, stream=None) -> None:
            if not all(isinstance(a, DeviceAllocation) for a in args):
                raise TypeError("pass device allocations")
            guarded("cuLaunchKernel", device.launch, self.cubin, self.symbol, [a.ptr for a in args])

    class Module:
        def __init__(self, cubin: bytes) -> None:
            guarded("cuModuleLoadData", device.check)
            self.cubin = cubin

        def get_function(self, symbol: str) -> Function:
            return Function(self.cubin, symbol)

    class Stream:
        def synchronize(self) -> None:
            guarded("cuStreamSynchronize", device.check)

    class Event:
        def record(self, stream=None) -> "Event":
            guarded("cuEventRecord", device.check)
            self.at = device.clock_ms
            return self

        def synchronize(self) -> "Event":
            guarded("cuEventSynchronize", device.check)
            return self

        def time_till(self, end: "Event") -> float:
            return end.at - self.at

    class Context:
        def push(self) -> None:
            pass

    class DeviceHandle:
        def __init__(self, ordinal: int) -> None:
            if not device.present:
                raise LogicError("cuDeviceGet failed: invalid device ordinal")

        def name(self) -> str:
            return H100

        def compute_capability(self) -> tuple[int, int]:
            return (9, 0)

        def get_attribute(self, attribute: str) -> int:
            return {"L2_CACHE_SIZE": L2_BYTES}[attribute]

        def retain_primary_context(self) -> Context:
            return Context()

    def init() -> None:
        if not device.present:
            raise RuntimeError_("cuInit failed: no CUDA-capable device is detected")

    def memcpy_htod(dest: DeviceAllocation, src: np.ndarray) -> None:
        guarded("cuMemcpyHtoD", device.write, dest.ptr, np.ascontiguousarray(src).tobytes())

    def memcpy_dtoh(dest: np.ndarray, src: DeviceAllocation) -> None:
        data = guarded("cuMemcpyDtoH", device.read, src.ptr, dest.nbytes)
        dest.reshape(-1).view(np.uint8)[:] = np.frombuffer(data, np.uint8)

    def memcpy_dtod_async(dest: DeviceAllocation, src: DeviceAllocation, nbytes: int, stream=None) -> None:
        guarded("cuMemcpyDtoDAsync", device.copy, dest.ptr, src.ptr, nbytes)

    def memset_d8_async(dest: DeviceAllocation, value: int, nbytes: int, stream=None) -> None:
        guarded("cuMemsetD8Async", device.memset, dest.ptr, value, nbytes)

    drv.__dict__.update(
        Error=Error, LogicError=LogicError, LaunchError=LaunchError, RuntimeError=RuntimeError_,
        MemoryError=MemoryError_, init=init, Device=DeviceHandle, Stream=Stream, Event=Event,
        mem_alloc=DeviceAllocation, memcpy_htod=memcpy_htod, memcpy_dtoh=memcpy_dtoh,
        memset_d8_async=memset_d8_async, memcpy_dtod_async=memcpy_dtod_async, module_from_buffer=Module,
        function_attribute=types.SimpleNamespace(MAX_DYNAMIC_SHARED_SIZE_BYTES=8),
        device_attribute=types.SimpleNamespace(L2_CACHE_SIZE="L2_CACHE_SIZE"))
    package = types.ModuleType("pycuda")
    package.driver = drv
    return {"pycuda": package, "pycuda.driver": drv}


def binding_modules(bindings: str, device: Device) -> dict[str, types.ModuleType]:
    """sys.modules entries that make `bindings` ("cuda-bindings" or "pycuda") reach `device`."""
    if bindings == "pycuda":
        return pycuda_modules(device)
    return cuda_bindings_modules(CudaBindingsDouble(device))


class FakeH100Runner(GpuRunner):
    """The GPU runner whose worker is the real one on the simulated H100 (`serve`), through the
    binding the FAKE_CUDA_BINDINGS environment variable names."""

    WORKER = "tests.fake_cuda"


def serve(bindings: str) -> None:
    """The real GPU worker on the fake H100 through `bindings`: each request's expected outputs
    are handed to the device before the worker handles it (the kernel "computes" them)."""
    device = Device()
    sys.modules.update(binding_modules(bindings, device))
    os.environ["AUTOSCHED_CUDA_BINDINGS"] = bindings
    handle = gpu_worker.handle

    def handing_expected(gpu, req):
        device.expected = load_data(req["data"])[1]
        return handle(gpu, req)

    gpu_worker.handle = handing_expected
    gpu_worker.main()


if __name__ == "__main__":
    serve(os.environ.get("FAKE_CUDA_BINDINGS", "cuda-bindings"))
