"""GEMM throughput of autosched's default matmul schedule against numpy, in one run, 2 threads.

    python benchmarks/gemm.py [--json] [--quick] [--threads 2] [--rounds 3] [--target "llvm -mcpu=haswell"]

The default schedule's register tile and vectors come from the target (the host by default;
`--target "llvm -mcpu=haswell"` measures AVX2 code on any AVX2-capable host).
numpy runs in a child process started with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (the
machine's default sets them and OpenBLAS then uses its slower AVX2 kernels); measurements of the
two alternate, round by round, so machine noise hits both alike. `--json` prints one object: `host`,
`target` (with the `register_tile`) and per case `autosched_gflops`, `numpy_gflops` and `ratio`;
`--quick` is a smoke run (one round).
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
from autosched.compile.kernel import build_kernel  # noqa: E402
from autosched.ops.matmul import default_packing, matmul, schedule_matmul  # noqa: E402
from autosched.target import Target, read_cpuinfo  # noqa: E402

CASES = {"matmul_1024": (1024, 1024, 1024), "matmul_128x768x3072": (128, 3072, 768)}


def autosched_gemm(m: int, n: int, k: int, threads: int, target: Target):
    """A call of the default schedule on bound arguments (checked once against numpy), and its kernel."""
    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    c = matmul(a, b, packing=default_packing(m, n, target.capabilities))
    kern = build_kernel(schedule_matmul(c, target.capabilities.lanes(4)), [a, b, c], "matmul", target=target)
    kern.set_num_threads(threads)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32),
            np.zeros((m, n), np.float32)]
    kern(*args)
    err = float(np.abs(args[2] - args[0] @ args[1]).max())
    if err > 1e-2 * np.sqrt(k):
        raise SystemExit(f"autosched matmul {m}x{n}x{k} is wrong: max abs error {err}")
    bound = kern.bind(args)
    return (lambda: kern.run(bound)), kern


def numpy_child(threads: int, coretype: str | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env.update(OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    return subprocess.Popen([sys.executable, str(Path(__file__).with_name("_numpy_worker.py"))], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=str(Path(__file__).parent))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds per case")
    p.add_argument("--quick", action="store_true", help="smoke run: one round per case")
    p.add_argument("--target", default="llvm", help="the target to build for (default: this host)")
    p.add_argument("--openblas-coretype", metavar="NAME",
                   help="OpenBLAS kernels for numpy (e.g. Haswell, to compare AVX2 code with AVX2 BLAS on an "
                        "AVX-512 host; default: unset, OpenBLAS picks the host's)")
    args = p.parse_args(argv)
    target = Target.parse(args.target)
    host = read_cpuinfo()
    missing = sorted(target.capabilities.flags - host.flags)
    if missing:
        raise SystemExit(f"this host ({host.model}) cannot run code for {target}: it lacks {', '.join(missing)}")
    host_isa = Target.parse("llvm").isa
    child = numpy_child(args.threads, args.openblas_coretype)
    blas = json.loads(child.stdout.readline())["blas"]
    results = {}
    for name, (m, n, k) in CASES.items():
        run, _ = autosched_gemm(m, n, k, args.threads, target)
        ours, theirs = 0.0, 0.0
        for _ in range(1 if args.quick else args.rounds):
            ours = max(ours, 2 * m * n * k / best_seconds(run) / 1e9)
            child.stdin.write(f"{m} {n} {k}\n")
            child.stdin.flush()
            theirs = max(theirs, json.loads(child.stdout.readline())["gflops"])
        results[name] = {"autosched_gflops": round(ours, 1), "numpy_gflops": round(theirs, 1),
                         "ratio": round(ours / theirs, 3)}
    child.stdin.close()
    child.wait()
    packing = default_packing(1024, 1024, target.capabilities)
    results = {"host": {"cpu": host.model, "isa": host_isa}, "target": {"target": str(target), "isa": target.isa,
               "register_tile": [packing.mr, packing.nr]}, **results}
    if args.json:
        print(json.dumps(results))
    else:
        print(f"host: {host.model}, {host_isa}; target: {target} ({target.isa}, register tile "
              f"{packing.mr}x{packing.nr})")
        print(f"threads: {args.threads}; numpy BLAS: {blas}")
        print(f"{'case':24} {'autosched GFLOP/s':>18} {'numpy GFLOP/s':>14} {'ratio':>7}")
        for name, r in results.items():
            if name in ("host", "target"):
                continue
            print(f"{name:24} {r['autosched_gflops']:18.1f} {r['numpy_gflops']:14.1f} {r['ratio']:7.3f}")
    return results


if __name__ == "__main__":
    main()
