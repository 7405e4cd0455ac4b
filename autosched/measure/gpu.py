"""Running CUDA candidates on this machine's GPU: the local runner's design with a GPU worker.

Candidates run one at a time in a child process (`gpu_worker`) that holds the GPU's context,
checks each kernel's output against the task's reference and times it with CUDA events; a
kernel that hangs, crashes or leaves a sticky CUDA error costs one trial and a fresh worker.
The worker's first line names the GPU, or says why there is none: without a driver or a GPU
the runner refuses to start, with one message, instead of failing every trial.
"""
from __future__ import annotations

import json
import select
import subprocess

from autosched.errors import AutoschedError
from autosched.measure.gpu_worker import RESTARTS
from autosched.measure.local import LocalRunner, RunnerOptions
from autosched.measure.record import BuildResult, MeasureInput, MeasureResult
from autosched.target import Target


class GpuUnavailableError(AutoschedError):
    """No CUDA driver, no GPU, or no cuda-bindings where the GPU runner was asked to run."""


class GpuRunner(LocalRunner):
    """Times built cubins (NvccBuilder's manifests) on the first GPU, one at a time."""

    WORKER = "autosched.measure.gpu_worker"
    ON_HOST = False
    INTERLEAVED = False  # the GPU worker times one candidate per request; its clock is the GPU's

    def __init__(self, options: RunnerOptions = RunnerOptions(), start_timeout: float = 60.0):
        super().__init__(options)
        self.start_timeout = start_timeout
        self.device: dict = {}
        try:
            self._worker()  # fail here, once, where no GPU can be used
        except GpuUnavailableError:
            self.close()
            raise

    def _worker(self) -> subprocess.Popen[str]:
        fresh = self._proc is None or self._proc.poll() is not None
        proc = super()._worker()
        if fresh:
            stdout = proc.stdout
            if stdout is None:  # LocalRunner._worker always opens it
                raise RuntimeError("the GPU worker has no stdout pipe")
            ready, _, _ = select.select([stdout], [], [], self.start_timeout)
            line = stdout.readline() if ready else ""
            hello = json.loads(line) if line.strip() else {"error": "the GPU worker did not start"}
            if "error" in hello:
                self._kill()
                raise GpuUnavailableError(hello["error"])
            self.device = hello
        return proc

    def _run_one(self, inp: MeasureInput, build: BuildResult) -> MeasureResult:
        result = super()._run_one(inp, build)
        if result.error_msg.endswith(RESTARTS):  # the worker is exiting: the next candidate gets a fresh one
            self._kill()
        return result

    def cache_bytes(self) -> int | None:
        return int(self.device["l2_bytes"])

    def flush_bytes(self) -> int:
        """Twice the GPU's L2 (the worker's cuDeviceGetAttribute), not the host's last-level cache."""
        o = self.options
        return 0 if o.caches == "warm" else o.flush_bytes or 2 * int(self.device["l2_bytes"])

    def measured_target(self, target: Target) -> Target:
        """The cuda target named after the GPU the worker holds (its cuDeviceGetName)."""
        return target.on_gpu(self.device["device"])


__all__ = ["GpuRunner", "GpuUnavailableError"]
