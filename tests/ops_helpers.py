"""Helpers of the operator tests: build an op with a schedule, run it on numpy arrays."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from autosched.compile.kernel import build_kernel
from autosched.target import Target
from autosched.te import Tensor

RNG = np.random.default_rng(0)


def rand(*shape: int, dtype: str = "float32", low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return RNG.uniform(low, high, size=shape).astype(dtype)


def run(out: Tensor, inputs: Sequence[Tensor], arrays: Sequence[np.ndarray], schedule: Callable, target: Target,
        vector_lanes: int | None = None) -> np.ndarray:
    """out computed by the kernel that `schedule` gives for `target` (at its vector width
    unless `vector_lanes` says otherwise), from `arrays` bound to `inputs`."""
    lanes = vector_lanes or target.capabilities.lanes(np.dtype(out.dtype).itemsize)
    sched = schedule(out, vector_lanes=lanes)
    kernel = build_kernel(sched, list(inputs) + [out], out.name, target=target)
    result = np.zeros(out.shape, dtype=out.dtype)
    kernel(*arrays, result)
    return result

