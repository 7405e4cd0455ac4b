"""Helpers of the operator tests: build an op with a schedule, run it on numpy arrays."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from autosched.kernel import build_kernel
from autosched.te import Tensor

RNG = np.random.default_rng(0)


def rand(*shape: int, dtype: str = "float32", low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return RNG.uniform(low, high, size=shape).astype(dtype)


def run(out: Tensor, inputs: Sequence[Tensor], arrays: Sequence[np.ndarray], schedule: Callable,
        vector_lanes: int = 16) -> np.ndarray:
    """out computed by the kernel that `schedule` gives, from `arrays` bound to `inputs`."""
    sched = schedule(out, vector_lanes=vector_lanes)
    kernel = build_kernel(sched, list(inputs) + [out], out.name)
    result = np.zeros(out.shape, dtype=out.dtype)
    kernel(*arrays, result)
    return result

