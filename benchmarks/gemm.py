"""GEMM throughput of autosched's default matmul schedule against numpy, in one run, 2 threads.

    python benchmarks/gemm.py [--json] [--threads 2] [--rounds 3]

numpy runs in a child process started with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (the
machine's default sets them and OpenBLAS then uses its slower AVX2 kernels); measurements of the
two alternate, round by round, so machine noise hits both alike.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import best_seconds  # noqa: E402

from autosched import te  # noqa: E402
from autosched.kernel import build_kernel  # noqa: E402
from autosched.ops.matmul import default_packing, matmul, schedule_matmul  # noqa: E402

CASES = {"matmul_1024": (1024, 1024, 1024), "matmul_128x768x3072": (128, 3072, 768)}


def autosched_gemm(m: int, n: int, k: int, threads: int):
    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    c = matmul(a, b, packing=default_packing(m, n))
    kern = build_kernel(schedule_matmul(c), [a, b, c], "matmul")
    kern.set_num_threads(threads)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32),
            np.zeros((m, n), np.float32)]
    kern(*args)
    err = float(np.abs(args[2] - args[0] @ args[1]).max())
    if err > 1e-2 * np.sqrt(k):
        raise SystemExit(f"autosched matmul {m}x{n}x{k} is wrong: max abs error {err}")
    bound = kern.bind(args)
    return lambda: kern.run(bound)


def numpy_child(threads: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env.update(OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    return subprocess.Popen([sys.executable, str(Path(__file__).with_name("_numpy_worker.py"))], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=str(Path(__file__).parent))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds per case")
    args = p.parse_args(argv)
    child = numpy_child(args.threads)
    blas = json.loads(child.stdout.readline())["blas"]
    results = {}
    for name, (m, n, k) in CASES.items():
        run = autosched_gemm(m, n, k, args.threads)
        ours, theirs = 0.0, 0.0
        for _ in range(args.rounds):
            ours = max(ours, 2 * m * n * k / best_seconds(run) / 1e9)
            child.stdin.write(f"{m} {n} {k}\n")
            child.stdin.flush()
            theirs = max(theirs, json.loads(child.stdout.readline())["gflops"])
        results[name] = {"autosched_gflops": round(ours, 1), "numpy_gflops": round(theirs, 1),
                         "ratio": round(ours / theirs, 3)}
    child.stdin.close()
    child.wait()
    if args.json:
        print(json.dumps(results))
    else:
        print(f"threads: {args.threads}; numpy BLAS: {blas}")
        print(f"{'case':24} {'autosched GFLOP/s':>18} {'numpy GFLOP/s':>14} {'ratio':>7}")
        for name, r in results.items():
            print(f"{name:24} {r['autosched_gflops']:18.1f} {r['numpy_gflops']:14.1f} {r['ratio']:7.3f}")
    return results


if __name__ == "__main__":
    main()
