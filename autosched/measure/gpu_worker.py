"""The GPU runner's child process: loads one cubin at a time, checks it, times it with CUDA events.

Speaks the CPU worker's protocol (JSON lines; arrays in the parent's .npz files), after a first
line saying which GPU it holds, or why it holds none. The CUDA driver is reached through
cuda-bindings (`pip install autosched[cuda]`), imported here only, so nothing else in autosched
needs it. A sticky CUDA error (an illegal address, say) leaves the context unusable: the worker
replies with the error and exits, and the parent starts a fresh one for the next candidate.

    python -m autosched.measure.gpu_worker PARENT_PID
"""
from __future__ import annotations

import json
import sys
import traceback

import numpy as np

from autosched.measure.lifetime import die_with_parent
from autosched.measure.worker import compare_outputs, load_data

#: errors after which the context is lost (CUDA driver API documentation, "sticky" errors)
STICKY = frozenset({"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
                    "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC",
                    "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ASSERT", "CUDA_ERROR_LAUNCH_TIMEOUT",
                    "CUDA_ERROR_ECC_UNCORRECTABLE"})
NO_GPU_HINT = "--emulate checks CUDA kernels on the CPU instead"


class CudaError(RuntimeError):
    def __init__(self, name: str, call: str):
        super().__init__(f"{call}: {name}")
        self.name, self.sticky = name, name in STICKY


class Gpu:
    """The first GPU's primary context, and the few driver calls a measurement needs."""

    def __init__(self):
        try:
            from cuda.bindings import driver
        except ImportError as e:
            raise RuntimeError(f"the GPU runner needs cuda-bindings (pip install 'autosched[cuda]'): {e}; "
                               f"{NO_GPU_HINT}") from None
        self.cu = driver
        try:
            self.call("cuInit", 0)
        except CudaError as e:
            raise RuntimeError(f"no usable NVIDIA GPU here ({e}); {NO_GPU_HINT}") from None
        except Exception as e:  # noqa: BLE001 - cuda-bindings raises its own types when libcuda is missing
            raise RuntimeError(f"no NVIDIA driver here ({type(e).__name__}: {e}); {NO_GPU_HINT}") from None
        self.device = self.call("cuDeviceGet", 0)
        self.name = self.call("cuDeviceGetName", 256, self.device).split(b"\0")[0].decode()
        attr = driver.CUdevice_attribute
        self.capability = (self.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                     self.device),
                           self.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                     self.device))
        self.context = self.call("cuDevicePrimaryCtxRetain", self.device)
        self.call("cuCtxSetCurrent", self.context)
        self.stream = self.call("cuStreamCreate", 0)
        self.loaded: tuple = (None, None, None)  # (cubin path, module, function)

    def call(self, name: str, *args):
        """A driver call; its results without the status, or CudaError naming the status."""
        err, *values = getattr(self.cu, name)(*args)
        if err != self.cu.CUresult.CUDA_SUCCESS:
            raise CudaError(self.cu.cuGetErrorName(err)[1].decode(), name)
        return values[0] if len(values) == 1 else tuple(values)

    def function(self, cubin: str, symbol: str, shared_bytes: int):
        """The kernel of `cubin`, loaded in place of the previous candidate's."""
        if self.loaded[0] != cubin:
            if self.loaded[1] is not None:
                self.call("cuModuleUnload", self.loaded[1])
            with open(cubin, "rb") as f:
                module = self.call("cuModuleLoadData", f.read())
            func = self.call("cuModuleGetFunction", module, symbol.encode())
            if shared_bytes > 48 * 1024:  # beyond the static limit: opt in, per kernel
                self.call("cuFuncSetAttribute", func,
                          self.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes)
            self.loaded = (cubin, module, func)
        return self.loaded[2]

    def to_device(self, a: np.ndarray):
        ptr = self.call("cuMemAlloc", max(1, a.nbytes))
        self.call("cuMemcpyHtoD", ptr, a, a.nbytes)
        return ptr

    def launch(self, func, geometry: dict, ptrs: list) -> None:
        grid, block = geometry["grid"], geometry["block"]
        self.call("cuLaunchKernel", func, *grid, *block, geometry["shared_bytes"], self.stream,
                  (tuple(ptrs), tuple(None for _ in ptrs)), 0)

    def seconds(self, func, geometry: dict, ptrs: list, number: int, flush) -> float:
        """Seconds per launch over `number` back-to-back launches, timed by CUDA events."""
        start, end = self.call("cuEventCreate", 0), self.call("cuEventCreate", 0)
        if flush is not None:
            self.call("cuMemsetD8Async", flush[0], 1, flush[1], self.stream)
        self.call("cuEventRecord", start, self.stream)
        for _ in range(number):
            self.launch(func, geometry, ptrs)
        self.call("cuEventRecord", end, self.stream)
        self.call("cuEventSynchronize", end)
        ms = self.call("cuEventElapsedTime", start, end)
        for ev in (start, end):
            self.call("cuEventDestroy", ev)
        return ms / 1e3 / number


def handle(gpu: Gpu, req: dict) -> dict:
    manifest = json.loads(open(req["manifest"]).read())
    geometry = manifest["geometry"]
    func = gpu.function(manifest["cubin"], manifest["symbol"], geometry["shared_bytes"])
    inputs, expected = load_data(req["data"])
    outputs = [np.full(e.shape, np.nan, dtype=e.dtype) for e in expected]
    ptrs: list = []
    flush = None
    try:
        for a in list(inputs) + outputs:
            ptrs.append(gpu.to_device(np.ascontiguousarray(a)))
        gpu.launch(func, geometry, ptrs)
        gpu.call("cuStreamSynchronize", gpu.stream)
        for host, ptr in zip(outputs, ptrs[len(inputs):]):
            gpu.call("cuMemcpyDtoH", host, ptr, host.nbytes)
        wrong = compare_outputs(outputs, expected, req["rtol"], req["atol"])
        if wrong is not None:
            return wrong
        if req["flush_bytes"] > 0:
            flush = (gpu.call("cuMemAlloc", req["flush_bytes"]), req["flush_bytes"])
        number = 1
        while True:  # calibrate: enough launches for one repeat to last min_repeat_ms
            t = gpu.seconds(func, geometry, ptrs, number, None) * number
            if t * 1e3 >= req["min_repeat_ms"] or number >= 1 << 20:
                break
            number = min(1 << 20, max(number * 2, int(number * 1.2 * req["min_repeat_ms"] / max(t * 1e3, 1e-3)) + 1))
        costs = []
        for _ in range(int(req["repeat"])):
            costs.append(gpu.seconds(func, geometry, ptrs, number, flush))
            if req["stop_above"] > 0 and costs[-1] > req["stop_above"]:
                break
        return {"costs": costs}
    finally:
        for ptr in ptrs + ([flush[0]] if flush else []):
            try:
                gpu.call("cuMemFree", ptr)
            except CudaError:
                pass  # a sticky error: the context and its memory go with the worker


def main() -> None:
    die_with_parent(int(sys.argv[1]))
    try:
        gpu = Gpu()
    except RuntimeError as e:
        sys.stdout.write(json.dumps({"error": str(e)}) + "\n")
        sys.stdout.flush()
        return
    sys.stdout.write(json.dumps({"device": gpu.name, "compute_capability": "{}.{}".format(*gpu.capability)}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        sticky = False
        try:
            reply = handle(gpu, json.loads(line))
        except CudaError as e:
            sticky = e.sticky
            reply = {"error": "RUNTIME_ERROR", "msg": f"{e}" + ("; the GPU worker restarts" if sticky else "")}
        except Exception as e:  # noqa: BLE001 - every failure becomes a result for the parent
            reply = {"error": "RUNTIME_ERROR", "msg": f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
        if sticky:
            return


if __name__ == "__main__":
    main()
