"""How steady this machine is: the same GEMM on 1 thread and on N, in alternating short windows,
and how far apart its first two cores are.

    python benchmarks/host.py [--json] [--quick] [--threads 2] [--seconds 60] [--window 0.25]

Why: a shared or virtual machine's cores are not all its own all the time. On the 2-vCPU hosts
these figures were taken on, one thread ran at the same speed all the time while two threads
were 1.0x to 2.2x as fast as one, switching every few seconds (the second vCPU shared with
another tenant or placed on the first one's hyper-thread). Every timing at N threads then
carries that swing: a built model's median latency, a tuning record, an A/B test in the model.
This benchmark tells whether a host can resolve a 5% difference at all before anyone tries.

The GEMM, compute-bound, cannot see the other kind of phase: the two vCPUs placed far apart
(`autosched/measure/cores.py`), where ResNet-18's untuned build runs 1.27x its usual time. So each window pair is followed by
`--pings` round trips of a cache line between the first two cores this process may run on.

autosched's default matmul schedule (512 x 512 x 512, float32, the target's register tile) is
timed in windows of `--window` seconds, alternately on 1 thread and on `--threads`, for
`--seconds`. Printed: per-call time percentiles of each, the N-thread speedup over the 1-thread
window before it (percentiles and histogram), the share of windows at full speed (a speedup of
at least 0.8 N), the length of the slow phases, each side's p90 / p10 spread, and the cores'
round trip (percentiles, the share of samples at least `FAR` times the fastest, and those far
phases' lengths). `--json` prints one object with the same fields; `--quick` runs 3 seconds.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm import autosched_gemm  # noqa: E402

from autosched.measure.cores import FAR, core_probe  # noqa: E402
from autosched.target import Target, read_cpuinfo  # noqa: E402

SIZE = 512
#: a window counts as full speed when N threads run at least this share of N times one thread
FULL_SPEED = 0.8
#: speedup histogram edges, in multiples of one thread
EDGES = (0.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2, 4.0, 8.0, 1e9)
def window(run, threads: int, set_threads, seconds: float) -> float:
    """Seconds per call over one window of `seconds` on `threads`."""
    set_threads(threads)
    run()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        run()
        n += 1
    return (time.perf_counter() - start) / n


def percentiles(values: np.ndarray, scale: float = 1.0) -> dict[str, float]:
    return {f"p{p}": round(float(np.percentile(values, p)) * scale, 4) for p in (10, 50, 90)}


def slow_phases(full: np.ndarray, step_s: float) -> dict[str, float | int]:
    """Runs of consecutive windows below full speed: how many, and how long (seconds)."""
    runs, length = [], 0
    for ok in full:
        if not ok:
            length += 1
        elif length:
            runs.append(length)
            length = 0
    if length:
        runs.append(length)
    lengths = np.array(runs, dtype=float) * step_s
    return {"count": len(runs), "median_s": round(float(np.median(lengths)), 2) if runs else 0.0,
            "longest_s": round(float(lengths.max()), 2) if runs else 0.0}


def _round_trips(ns: np.ndarray, step_s: float) -> dict | None:
    """Percentiles of the cores' round trip, the share of samples in a far phase, its phases."""
    if not len(ns):
        return None
    far = ns >= FAR * ns.min()
    return {**percentiles(ns, 1.0), "min": round(float(ns.min()), 1), "max": round(float(ns.max()), 1),
            "far_share": round(float(far.mean()), 3), "far_phases": slow_phases(~far, step_s)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="3 seconds")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--window", type=float, default=0.25)
    ap.add_argument("--pings", type=int, default=2000, help="round trips between the cores per sample")
    args = ap.parse_args()
    seconds = 3.0 if args.quick else args.seconds
    target = Target.parse("llvm")
    run, kern = autosched_gemm(SIZE, SIZE, SIZE, args.threads, target)
    probe = core_probe()
    one, many, trips = [], [], []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or not one:
        one.append(window(run, 1, kern.set_num_threads, args.window))
        many.append(window(run, args.threads, kern.set_num_threads, args.window))
        if probe is not None:
            probe.pings = args.pings
            time.sleep(probe.quiet_s)  # the GEMM's pool threads stop spinning first
            trips.append(probe.round_trip_ns())
    t1, tn = np.array(one), np.array(many)
    speedup = t1 / tn
    full = speedup >= FULL_SPEED * args.threads
    out = {
        "host": {"cpu": read_cpuinfo().model, "isa": target.isa},
        "threads": args.threads, "window_s": args.window, "windows": len(t1),
        "one_thread_ms": percentiles(t1, 1e3), "n_threads_ms": percentiles(tn, 1e3),
        "speedup": {**percentiles(speedup), "min": round(float(speedup.min()), 3),
                    "max": round(float(speedup.max()), 3)},
        "speedup_histogram": {f"{lo:g}-{hi:g}": int(((speedup >= lo) & (speedup < hi)).sum())
                              for lo, hi in zip(EDGES, EDGES[1:]) if ((speedup >= lo) & (speedup < hi)).any()},
        "full_speed_share": round(float(full.mean()), 3),
        "slow_phases": slow_phases(full, 2 * args.window),
        "spread": {"one_thread": round(float(np.percentile(t1, 90) / np.percentile(t1, 10)), 3),
                   "n_threads": round(float(np.percentile(tn, 90) / np.percentile(tn, 10)), 3)},
        "core_round_trip_ns": _round_trips(np.array(trips), 2 * args.window),
    }
    if args.json:
        print(json.dumps(out))
        return
    print(f"host: {out['host']['cpu']} ({target.isa}); {SIZE}^3 GEMM, windows of {args.window} s, "
          f"1 thread and {args.threads} alternating, {len(t1)} pairs")
    print(f"1 thread   ms per call p10/p50/p90 {out['one_thread_ms']}  spread p90/p10 {out['spread']['one_thread']}")
    print(f"{args.threads} threads  ms per call p10/p50/p90 {out['n_threads_ms']}  spread p90/p10 "
          f"{out['spread']['n_threads']}")
    print(f"speedup of {args.threads} threads over 1: {out['speedup']}")
    print(f"histogram: {out['speedup_histogram']}")
    print(f"windows at full speed (>= {FULL_SPEED:g} x {args.threads}): {out['full_speed_share']:.0%}; "
          f"slow phases: {out['slow_phases']}")
    trips = out["core_round_trip_ns"]
    if trips is None:
        print("core round trip: one CPU only")
    else:
        print(f"core round trip ns p10/p50/p90 {{'p10': {trips['p10']}, 'p50': {trips['p50']}, 'p90': {trips['p90']}}}"
              f" min {trips['min']} max {trips['max']}; far (>= {FAR:g} x min): {trips['far_share']:.0%}, "
              f"phases {trips['far_phases']}")


if __name__ == "__main__":
    main()
