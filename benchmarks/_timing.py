"""Shared timing rule of the benchmarks: best per-call time over rounds of at least `min_s` seconds."""
from __future__ import annotations

import time
from collections.abc import Callable


def best_seconds(fn: Callable[[], object], min_s: float = 0.2, rounds: int = 5) -> float:
    fn()  # warm-up: page faults, lazy binding, thread pool start
    best = float("inf")
    for _ in range(rounds):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_s:
                break
        best = min(best, elapsed / n)
    return best
