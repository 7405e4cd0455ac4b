"""A synthetic tuning problem for tests: a matmul-like space whose cost is a
smooth function of tile sizes plus a few sharp effects (vectorization pays only
on wide inner tiles, oversized register tiles fail), the kind of structure a
cost model can learn and random search cannot exploit."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autosched.measure import ErrorKind, Outcome
from autosched.space import AnnotateKnob, ConfigSpace, SplitKnob
from autosched.target import CpuInfo, Target

HOST = CpuInfo(model="Test CPU", flags=frozenset({"avx2", "avx512f"}))
TARGET = Target.parse("llvm", host=HOST)


@dataclass(frozen=True)
class FakeTask:
    key: str
    flops: float = 2 * 64 * 64 * 32


def matmul_space(m: int = 64, n: int = 64, k: int = 32) -> ConfigSpace:
    return ConfigSpace("synthetic_matmul", (
        SplitKnob("tile_i", m, 2),
        SplitKnob("tile_j", n, 3),
        SplitKnob("tile_k", k, 2),
        AnnotateKnob("inner"),
    ))


def cost(space: ConfigSpace, index: int) -> float | ErrorKind:
    c = space.get(index)
    i_in, (_, j_mid, j_in), k_in, inner = c["tile_i"][1], c["tile_j"], c["tile_k"][1], c["inner"].value
    if i_in * j_in > 256:
        return ErrorKind.COMPILE_ERROR  # register tile spills
    log_cost = 0.15 * (math.log2(i_in * j_in) - 6) ** 2 + 0.05 * (math.log2(j_mid * j_in * k_in) - 8) ** 2
    if inner == "vectorize":
        log_cost += -0.5 if j_in >= 16 else 0.3 if j_in < 8 else 0.0
    elif inner == "unroll" and i_in * j_in <= 64:
        log_cost -= 0.15
    noise = np.random.default_rng(index).normal(0.0, 0.03)
    return 1e-3 * math.exp(log_cost + noise)


def table(space: ConfigSpace) -> dict[int, Outcome]:
    return {i: cost(space, i) for i in range(space.size)}


def best_cost(tab: dict[int, Outcome]) -> float:
    return min(v for v in tab.values() if isinstance(v, float))
