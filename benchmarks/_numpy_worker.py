"""numpy's side of the GEMM benchmark, in its own process so OpenBLAS starts with the environment
the benchmark chose (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset: its AVX-512 kernels).

Reads `M N K` lines on stdin, answers one GFLOP/s figure per line.
"""
import functools
import json
import sys

import numpy as np
from _timing import best_seconds


def main() -> None:
    try:
        from threadpoolctl import threadpool_info
        info = [{k: d.get(k) for k in ("internal_api", "architecture", "num_threads")} for d in threadpool_info()]
    except ImportError:
        info = []
    print(json.dumps({"blas": info}), flush=True)
    rng = np.random.default_rng(0)
    for line in sys.stdin:
        m, n, k = map(int, line.split())
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        out = np.empty((m, n), np.float32)
        sec = best_seconds(functools.partial(np.matmul, a, b, out=out))
        print(json.dumps({"gflops": 2 * m * n * k / sec / 1e9}), flush=True)


if __name__ == "__main__":
    main()
