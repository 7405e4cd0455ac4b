"""Throughput of the Ray fleet on this machine: trials per minute with 1, 2 and 3 measuring
devices, and the per-trial cost of the Ray path against the local builder and runner.

    python benchmarks/fleet.py [--json] [--quick] [--trials 24] [--min-repeat-ms 100]

A measurement-bound task: valid configs of a small matmul, each timed for at least 3 ×
`--min-repeat-ms` on one thread, their builds already in the kernel cache. For N devices a local
Ray cluster (`ray.cluster_utils.Cluster`) of N nodes offers one unit of this host's device
resource each, so the runner starts N actors; every device shares this machine's cores, so N
beyond the core count cannot scale (say so when quoting). The overhead row times the same
candidates with near-zero timing budgets through LocalBuilder+LocalRunner and through
RayBuilder+RayRunner with one device: the difference per trial is what the Ray path adds. The
last rows compile every candidate on one node while its device times on all cores, with timings
exclusive of the node's builds (the default) and not: trials per minute, and each candidate's
time there against its time measured alone.
`--json` prints one JSON object: `host`, `task`, `trials`, `min_repeat_ms`, `trials_per_minute` and
`speedup` per device count, `per_trial_ms` (`local`, `ray`, `ray_overhead`) and
`builds_beside_timings` (`exclusive`, `not exclusive`: `trials_per_minute`, `failed`,
`time_vs_alone_median`, `time_vs_alone_worst`). `--quick` is a smoke run: 4 trials of at least
1 ms, 1 device.

    python benchmarks/fleet.py --simulate [N] [--json] [--quick] [--trials T] [--tuner xgb] [--kernel-ms 150]

simulates a fleet of N machines (default 16: each node takes ~0.45 GiB here, and a simulation the
memory cannot hold is refused) on this one (`_fleet_sim.py` says how): two drivers tuning one
model into one database (PostgreSQL where the server binaries are here, else SQLite), on N/4, N/2
and N nodes; trials per minute, the driver's and the database's time per trial, claims
contended and duplicates (0). `--json` prints `{"simulate": {database, tuner, kernel_ms, cores,
cluster_start_s, steps: [{nodes, devices_per_driver, trials, trials_per_minute,
driver_ms_per_trial, search_ms_per_trial, database_ms_per_trial, claims_contended,
measured_by_the_other, duplicates, memory_gib}]}}`; with `--quick`, N nodes only, 8 random-search
trials per driver of 20 ms each.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from _fleet_sim import DEFAULT_NODES  # noqa: E402

from autosched import fleet  # noqa: E402
from autosched.backend import device_resource, toolchain_resource  # noqa: E402
from autosched.graph.builder import GraphBuilder  # noqa: E402
from autosched.graph.ir import Op  # noqa: E402
from autosched.measure import Builder, MeasureInput, Runner, measure_with  # noqa: E402
from autosched.measure.local import LocalBuilder, LocalRunner, RunnerOptions  # noqa: E402
from autosched.target import Target  # noqa: E402
from autosched.task import Task, extract_tasks  # noqa: E402
from autosched.templates import get_template  # noqa: E402


def matmul(m: int, k: int, n: int) -> Task:
    b = GraphBuilder()
    w = b.constant("w", np.random.default_rng(0).standard_normal((k, n)).astype(np.float32))
    b.output(b.node(Op.MATMUL, [b.input("a", (m, k)), w]))
    (task,) = extract_tasks(b.build()).tasks
    return task


def candidates(task: Task, target: Target, n: int) -> list[MeasureInput]:
    """`n` configs that build and run (random ones, found with the local builder and runner;
    this also fills the kernel cache, so no later run compiles)."""
    space = get_template(task.op, target.kind).space(task, target)
    rng = np.random.default_rng(0)
    quick = RunnerOptions(repeat=1, min_repeat_ms=0.0, threads=1, stop_factor=0)
    found: list[MeasureInput] = []
    with LocalRunner(quick) as runner:
        while len(found) < n:
            batch = [MeasureInput(task, target, space.get(int(i))) for i in rng.integers(0, len(space), 2 * n)]
            results = measure_with(LocalBuilder(), runner)(batch)
            found += [inp for inp, res in zip(batch, results) if res.ok]
    return found[:n]


def per_trial(builder: Builder, runner: Runner, inputs: Sequence[MeasureInput]) -> float:
    start = time.perf_counter()
    results = measure_with(builder, runner)(inputs)
    assert all(r.ok for r in results), [r.error_msg for r in results if not r.ok]
    return (time.perf_counter() - start) / len(inputs)


def on_cluster(devices: int, target: Target, options: Sequence[RunnerOptions],
               inputs: Sequence[MeasureInput]) -> list[float]:
    """Seconds per trial with `devices` actors, on as many nodes of a fresh local cluster
    (after a warm-up batch that starts the actors and the build workers), once per runner
    options in turn (a cluster starts in ~10 s: one serves them all)."""
    from ray.cluster_utils import Cluster

    from autosched.measure.ray import RayBuilder, RayOptions, RayRunner
    cores = os.cpu_count() or 1
    node = {"num_cpus": cores, "resources": {device_resource(target): 1, toolchain_resource(target): cores}}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})  # 5 s it would take
    try:
        for _ in range(devices - 1):  # a node each: one node's CPU devices would time one at a time (nodelock.py)
            cluster.add_node(**node)
        fleet.connect(cluster.address)
        seconds = []
        for each in options:
            ray_options = RayOptions(runner=each)
            with RayRunner(ray_options) as runner:
                per_trial(RayBuilder(ray_options), runner, inputs[:devices])
                seconds.append(per_trial(RayBuilder(ray_options), runner, inputs))
        return seconds
    finally:
        fleet.disconnect()
        cluster.shutdown()


def builds_beside_timings(target: Target, inputs: Sequence[MeasureInput], exclusive: bool,
                          alone: Sequence[float | None], options: RunnerOptions) -> dict:
    """One node that compiles every candidate (a kernel cache of its own) while its device
    times on all its cores, two batches in flight, with timings exclusive of builds or not:
    trials per minute, and the median and worst ratio of a candidate's time there to its time
    measured alone (`alone`, None where it failed): how much a build beside a timing moves it;
    `failed`: candidates that failed either way (a timeout, on a core another process holds)."""
    from ray.cluster_utils import Cluster

    from autosched.measure.ray import RayBuilder, RayOptions, RayRunner
    cores = os.cpu_count() or 1
    options = RayOptions(runner=options, exclusive_timing=exclusive)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["XDG_CACHE_HOME"] = cache  # the node's processes keep the environment it started with
        try:
            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": cores, "include_dashboard": False,
                                                                    "resources": {device_resource(target): 1,
                                                                                  toolchain_resource(target): cores}})
        finally:
            del os.environ["XDG_CACHE_HOME"]
        try:
            fleet.connect(cluster.address)
            builder = RayBuilder(options)
            with RayRunner(options) as runner:
                runner.measure(builder, inputs[:1])  # starts the actor and the build workers
                start = time.perf_counter()
                order = [*range(1, len(inputs), 2), *range(2, len(inputs), 2)]
                tickets = [runner.submit(builder, [inputs[i] for i in order[:len(order) // 2]]),
                           runner.submit(builder, [inputs[i] for i in order[len(order) // 2:]])]
                results = [r for t in tickets for r in runner.wait(t)]
                elapsed = time.perf_counter() - start
        finally:
            fleet.disconnect()
            cluster.shutdown()
    ratios = [r.cost / alone[i] for i, r in zip(order, results) if r.ok and alone[i]]
    return {"trials_per_minute": round(60 * len(results) / elapsed, 1), "failed": len(results) - len(ratios),
            "time_vs_alone_median": round(statistics.median(ratios), 2), "time_vs_alone_worst": round(max(ratios), 2)}


def all_cores(min_repeat_ms: float) -> RunnerOptions:
    """Timings on every core (OpenMP): the case a build beside a timing hurts most."""
    return RunnerOptions(repeat=3, min_repeat_ms=min_repeat_ms, timeout=30.0, threads=os.cpu_count() or 1,
                         stop_factor=0)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--trials", type=int, help="default 24; with --simulate, per driver: 8 × nodes, at least 32")
    parser.add_argument("--min-repeat-ms", type=float, default=100.0)
    parser.add_argument("--quick", action="store_true", help="smoke run: 4 trials of at least 1 ms, 1 device")
    parser.add_argument("--simulate", type=int, metavar="N", nargs="?", const=DEFAULT_NODES,
                        help="a simulated fleet of N nodes (default 16), two drivers into one database")
    parser.add_argument("--tuner", default="xgb", help="--simulate: the drivers' tuner (default xgb)")
    parser.add_argument("--kernel-ms", type=float, default=150.0,
                        help="--simulate: how long a device holds each candidate (default 150)")
    args = parser.parse_args(argv)
    if args.simulate is not None:
        return simulated(args)
    args.trials = args.trials or 24
    if args.quick:
        args.trials, args.min_repeat_ms = 4, 1.0
    device_counts = (1,) if args.quick else (1, 2, 3)  # a Ray cluster starts in ~10 s on 2 busy cores
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))  # a throwaway cluster's own token
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    fleet.token_auth()
    target = Target.parse("llvm")
    inputs = candidates(matmul(64, 64, 64), target, args.trials)

    timed = RunnerOptions(repeat=3, min_repeat_ms=args.min_repeat_ms, threads=1, stop_factor=0)
    bare = RunnerOptions(repeat=1, min_repeat_ms=0.0, threads=1, stop_factor=0)  # the Ray path's own cost
    scaling = {}
    for n in device_counts:
        seconds = on_cluster(n, target, [timed, bare] if n == 1 else [timed], inputs)
        scaling[n] = 60.0 / seconds[0]
        if n == 1:
            ray_path = seconds[1]
    with LocalRunner(bare) as runner:
        local = per_trial(LocalBuilder(), runner, inputs)
    every_core = all_cores(1.0 if args.quick else 20.0)
    with LocalRunner(every_core) as runner:
        alone = [r.cost if r.ok else None for r in measure_with(LocalBuilder(), runner)(inputs)]
    beside = {"exclusive": builds_beside_timings(target, inputs, True, alone, every_core),
              "not exclusive": builds_beside_timings(target, inputs, False, alone, every_core)}
    out = {"host": {"cores": os.cpu_count(), "avx512f": "avx512f" in Target.parse("llvm").fingerprint},
           "task": "matmul 64x64x64, measurement-bound", "trials": args.trials,
           "min_repeat_ms": args.min_repeat_ms, "trials_per_minute": {str(n): round(v, 1) for n, v in scaling.items()},
           "speedup": {str(n): round(v / scaling[1], 2) for n, v in scaling.items()},
           "per_trial_ms": {"local": round(local * 1e3, 1), "ray": round(ray_path * 1e3, 1),
                            "ray_overhead": round((ray_path - local) * 1e3, 1)},
           "builds_beside_timings": beside}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{args.trials} trials of {out['task']} (≥ 3 × {args.min_repeat_ms:g} ms each), "
              f"{os.cpu_count()} cores shared by every device")
        for n, v in scaling.items():
            print(f"  {n} device(s): {v:7.1f} trials/min  ({v / scaling[1]:.2f}×)")
        print(f"per trial, near-zero timing: local {local * 1e3:.1f} ms, Ray {ray_path * 1e3:.1f} ms "
              f"(+{(ray_path - local) * 1e3:.1f} ms)")
        print(f"one node compiling every candidate while timing on {os.cpu_count()} threads:")
        for name, row in beside.items():
            print(f"  timings {name} of builds: {row['trials_per_minute']:7.1f} trials/min, time vs alone "
                  f"median {row['time_vs_alone_median']:.2f}×, worst {row['time_vs_alone_worst']:.2f}× "
                  f"({row['failed']} failed)")
    return out


def simulated(args: argparse.Namespace) -> dict:
    from _fleet_sim import show, simulate  # noqa: I001 - beside this script
    if args.simulate < 1:
        raise SystemExit(f"--simulate needs at least 1 node, got {args.simulate}")
    if args.quick:
        out = simulate(args.simulate, args.trials or 8, "random", 20.0, quick=True)
    else:
        out = simulate(args.simulate, args.trials, args.tuner, args.kernel_ms, quick=False)
    if args.json:
        print(json.dumps({"simulate": out}))
    else:
        show(out)
    return {"simulate": out}


if __name__ == "__main__":
    main()
