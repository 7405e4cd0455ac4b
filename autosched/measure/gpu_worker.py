"""The GPU runner's child process: loads one cubin at a time, checks it, times it with CUDA events.

Speaks the CPU worker's protocol (JSON lines; arrays in the parent's .npz files), after a first
line saying which GPU it holds (and through which binding), or why it holds none. The CUDA
driver is reached through cuda-bindings or pycuda (`autosched.measure.cuda_driver`), imported
in this process only, so nothing else in autosched needs either. A sticky CUDA error (an illegal address, say) leaves the context unusable: the worker
replies with the error and exits, and the parent starts a fresh one for the next candidate.

    python -m autosched.measure.gpu_worker PARENT_PID
"""
from __future__ import annotations

import json
import sys
import traceback

import numpy as np

from autosched.measure.cuda_driver import CudaError, Driver, NoDriver, open_driver
from autosched.measure.lifetime import die_with_parent
from autosched.measure.worker import compare_outputs, load_data

#: what a reply to a candidate that lost the context ends with: the worker exits after sending it
RESTARTS = "; the GPU worker restarts"


class Gpu:
    """The first GPU, through whichever binding `open_driver` finds, and the candidate loaded on it."""

    def __init__(self, driver: Driver | None = None):
        try:
            self.driver = driver if driver is not None else open_driver()
        except NoDriver as e:
            raise RuntimeError(str(e)) from None
        self.name, self.capability = self.driver.name, self.driver.capability
        self.loaded: tuple = (None, None, None)  # (cubin path, module, function)

    def function(self, cubin: str, symbol: str, shared_bytes: int):
        """The kernel of `cubin`, loaded in place of the previous candidate's."""
        if self.loaded[0] != cubin:
            if self.loaded[1] is not None:
                self.driver.unload(self.loaded[1])
            with open(cubin, "rb") as f:
                module, func = self.driver.load(f.read(), symbol, shared_bytes)
            self.loaded = (cubin, module, func)
        return self.loaded[2]

    def to_device(self, a: np.ndarray):
        ptr = self.driver.alloc(a.nbytes)
        self.driver.to_device(ptr, a)
        return ptr

    def launch(self, func, geometry: dict, ptrs: list) -> None:
        self.driver.launch(func, tuple(geometry["grid"]), tuple(geometry["block"]), geometry["shared_bytes"], ptrs)

    def seconds(self, func, geometry: dict, ptrs: list, number: int, flush) -> float:
        """Seconds per launch over `number` back-to-back launches, timed by CUDA events."""
        if flush is not None:
            self.driver.memset_async(flush[0], 1, flush[1])
        start = self.driver.event()
        for _ in range(number):
            self.launch(func, geometry, ptrs)
        return self.driver.elapsed_ms(start, self.driver.event()) / 1e3 / number


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
        gpu.driver.synchronize()
        for host, ptr in zip(outputs, ptrs[len(inputs):]):
            gpu.driver.to_host(host, ptr)
        wrong = compare_outputs(outputs, expected, req["rtol"], req["atol"])
        if wrong is not None:
            return wrong
        if req["flush_bytes"] > 0:
            flush = (gpu.driver.alloc(req["flush_bytes"]), req["flush_bytes"])
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
                gpu.driver.free(ptr)
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
    sys.stdout.write(json.dumps({"device": gpu.name, "compute_capability": "{}.{}".format(*gpu.capability),
                                 "bindings": gpu.driver.bindings}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        sticky = False
        try:
            reply = handle(gpu, json.loads(line))
        except CudaError as e:
            sticky = e.sticky
            reply = {"error": "RUNTIME_ERROR", "msg": f"{e}" + (RESTARTS if sticky else "")}
        except Exception as e:  # noqa: BLE001 - every failure becomes a result for the parent
            reply = {"error": "RUNTIME_ERROR", "msg": f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
        if sticky:
            return


if __name__ == "__main__":
    main()
