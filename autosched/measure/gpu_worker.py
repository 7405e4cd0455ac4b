"""The GPU runner's child process: loads one cubin at a time, checks it, times it with CUDA events.

A repeat is `number` launches back to back. Where the binding can (cuda-bindings), they are
captured once as a CUDA graph and each repeat replays it with one call, so no Python runs
between launches: a launch from Python costs a few microseconds, as long as a small kernel, and
timed that way the GPU waits on the interpreter. With a flush (cold or flushed caches), every
launch follows a write of twice the GPU's L2 and is timed alone by a pair of events around it,
recorded inside the graph, so the flush is not in the time; a flush per repeat only left all but
the first launch warm. In cold caches the kernel's activations (its inputs other than weights)
are then copied to a scratch buffer, which reads them back into the L2 as the previous kernel
of a model leaves them, while its weights stay cold.

Speaks the CPU worker's protocol (JSON lines; arrays in the parent's .npz files), after a first
line saying which GPU it holds (and through which binding), or why it holds none. The CUDA
driver is reached through cuda-bindings or pycuda (`autosched.measure.cuda_driver`), imported
in this process only, so nothing else in autosched needs either. A sticky CUDA error (an illegal address, say) leaves the context unusable: the worker
replies with the error and exits, and the parent starts a fresh one for the next candidate.

    python -m autosched.measure.gpu_worker PARENT_PID
"""
from __future__ import annotations

import json
import math
import sys
import traceback

import numpy as np

from autosched.measure.cuda_driver import CudaError, Driver, NoDriver, open_driver
from autosched.measure.lifetime import die_with_parent
from autosched.measure.worker import activations, compare_outputs, load_data

#: what a reply to a candidate that lost the context ends with: the worker exits after sending it
RESTARTS = "; the GPU worker restarts"
#: launches in one captured graph at most (instantiating a graph takes time per node)
GRAPH_LAUNCHES = 1 << 10
#: flushed launches per repeat at most: each follows a write of twice the L2
FLUSHED_LAUNCHES = 32


class Gpu:
    """The first GPU, through whichever binding `open_driver` finds, and the candidate loaded on it."""

    def __init__(self, driver: Driver | None = None):
        try:
            self.driver = driver if driver is not None else open_driver()
        except NoDriver as e:
            raise RuntimeError(str(e)) from None
        self.name, self.capability = self.driver.name, self.driver.capability
        self.loaded: tuple = (None, None, None)  # (cubin path, module, function)
        self.graphs = True  # until a capture fails

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

    def repeats(self, func, geometry: dict, ptrs: list, number: int, flush) -> Repeats:
        """Timed repeats of `number` launches, each after a flush if `flush` is (pointer, bytes,
        [(activation pointer, bytes) to read back after it])."""
        if self.driver.graphs and self.graphs:
            try:
                return Repeats(self, func, geometry, ptrs, number, flush, graph=True)
            except CudaError as e:
                if e.sticky:
                    raise
                self.graphs = False  # this driver captures no graphs: say so once, then launch from Python
                print(f"autosched GPU worker: capturing a CUDA graph failed ({e}); timing launches from a loop",
                      file=sys.stderr, flush=True)
        return Repeats(self, func, geometry, ptrs, number, flush, graph=False)


class Repeats:
    """One candidate's timed repeats; a captured graph is built once and replayed by each."""

    def __init__(self, gpu: Gpu, func, geometry: dict, ptrs: list, number: int, flush, graph: bool):
        self.gpu, self.func, self.geometry, self.ptrs, self.number, self.flush = gpu, func, geometry, ptrs, number, flush
        self.graph = None
        self.pairs: list = []
        if graph:
            gpu.driver.begin_capture()
            try:
                self.pairs = self._enqueue()
            except CudaError:
                gpu.driver.free_graph(gpu.driver.end_capture())  # leave capture mode, keep no half graph
                raise
            self.graph = gpu.driver.end_capture()

    def _enqueue(self) -> list:
        """The launches on the stream (into the graph while capturing); the events around each flushed one."""
        d, pairs = self.gpu.driver, []
        for _ in range(self.number):
            if self.flush is not None:
                scratch, nbytes, warm = self.flush
                d.memset_async(scratch, 1, nbytes)
                for ptr, size in warm:  # scratch is twice the L2: room for any activation that fits it
                    d.copy_async(scratch, ptr, min(size, nbytes))
                start = d.event()
            self.gpu.launch(self.func, self.geometry, self.ptrs)
            if self.flush is not None:
                pairs.append((start, d.event()))
        return pairs

    def _run(self) -> list:
        if self.graph is None:
            return self._enqueue()
        self.gpu.driver.launch_graph(self.graph)
        return self.pairs

    def seconds(self, replays: int = 1) -> float:
        """Seconds per launch over one repeat (`replays` runs of the launches, when unflushed)."""
        d = self.gpu.driver
        if self.flush is None:
            start = d.event()
            for _ in range(replays):
                self._run()
            return d.elapsed_ms(start, d.event()) / 1e3 / (self.number * replays)
        pairs = self._run()
        return sum(d.elapsed_ms(a, b, release=self.graph is None) for a, b in pairs) / 1e3 / self.number

    def close(self) -> None:
        d = self.gpu.driver
        if self.graph is not None:
            d.free_graph(self.graph)
            for pair in self.pairs:
                for ev in pair:
                    d.destroy_event(ev)


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
        wrong = compare_outputs(outputs, expected, req["rtol"], req["atol"], req.get("outliers", 0.0))
        if wrong is not None:
            return wrong
        if req["flush_bytes"] > 0:
            warm = [(ptrs[k], inputs[k].nbytes) for k in activations(len(inputs), req.get("weights"))]
            flush = (gpu.driver.alloc(req["flush_bytes"]), req["flush_bytes"], warm)
        number = 1
        while True:  # calibrate from a launch loop: enough launches for one repeat to last min_repeat_ms
            t = Repeats(gpu, func, geometry, ptrs, number, None, graph=False).seconds() * number
            if t * 1e3 >= req["min_repeat_ms"] or number >= GRAPH_LAUNCHES:
                break
            number = min(GRAPH_LAUNCHES, max(number * 2, int(number * 1.2 * req["min_repeat_ms"] / max(t * 1e3, 1e-3)) + 1))
        repeats = gpu.repeats(func, geometry, ptrs, min(number, FLUSHED_LAUNCHES) if flush else number, flush)
        try:
            replays = 1
            if flush is None:  # launches from Python overstated short kernels: replay until a repeat is long enough
                t = repeats.seconds() * number
                replays = max(1, min(1 << 12, int(math.ceil(req["min_repeat_ms"] / max(t * 1e3, 1e-6)))))
            costs = []
            for _ in range(int(req["repeat"])):
                costs.append(repeats.seconds(replays))
                if req["stop_above"] > 0 and costs[-1] > req["stop_above"]:
                    break
        finally:
            repeats.close()
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
                                 "bindings": gpu.driver.bindings, "l2_bytes": gpu.driver.l2_bytes,
                                 "timing": "cuda graph" if gpu.driver.graphs else "launch loop"}) + "\n")
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
