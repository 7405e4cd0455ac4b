"""How far apart this process's first two cores are right now: the round trip of one cache line
between two threads pinned to them.

Why: a virtual machine's vCPUs are placed by the host, and on the 2-vCPU EPYC guests this
project is built on they sometimes sit on different core complexes (or sockets) for seconds to
minutes. A cache line then takes 336-349 ns to go there and back instead of 52-83, and kernels
whose activations outweigh their weights slow down: ResNet-18's untuned build ran 13.5-13.8 ms
in such phases against 10.5-11.4 ms (issue 18's 28% swing), and a compute-bound GEMM did not
notice. A timing taken in one phase says nothing about a build's speed in the other.
`benchmarks/host.py` samples this probe to report how often a host is in such a phase.
Retaking the alternated timings of a model that fell in one (tried: a round retaken when the
probe said "far" before or after it, at most once per round) did not help here: these phases
lasted minutes, longer than a whole alternation.
"""
from __future__ import annotations

import ctypes
import os

from autosched.codegen.errors import CompileError
from autosched.codegen.gcc import compile_c

#: a round trip at least this many times the fastest one seen means the cores are far apart
FAR = 2.5

PING_PONG = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
static _Atomic int ball __attribute__((aligned(64)));
struct side { int cpu, n; };
static void pin(int cpu) {
  cpu_set_t set; CPU_ZERO(&set); CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}
static void* pong(void* arg) {
  struct side* s = arg;
  pin(s->cpu);
  for (int i = 0; i < s->n; ++i) {
    while (atomic_load_explicit(&ball, memory_order_acquire) != 1) {}
    atomic_store_explicit(&ball, 0, memory_order_release);
  }
  return NULL;
}
/* Nanoseconds per round trip of one cache line between cpus a and b, over n trips; the caller's
   affinity is restored. */
double round_trip_ns(int a, int b, int n) {
  pthread_t t;
  struct side other = {b, n};
  cpu_set_t saved;
  pthread_getaffinity_np(pthread_self(), sizeof saved, &saved);
  atomic_store(&ball, 0);
  if (pthread_create(&t, NULL, pong, &other) != 0) return -1.0;
  pin(a);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < n; ++i) {
    atomic_store_explicit(&ball, 1, memory_order_release);
    while (atomic_load_explicit(&ball, memory_order_acquire) != 0) {}
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  pthread_join(t, NULL);
  pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
  return ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n;
}
"""


class CoreProbe:
    """Round trips between two CPUs, and the fastest seen. Sample after `quiet_s` of sleep when
    a runtime's pool threads may still be spinning on those cores: beside them a round trip is
    slow for that reason alone."""

    def __init__(self, cpus: tuple[int, int], pings: int = 2000, quiet_s: float = 0.02) -> None:
        lib = ctypes.CDLL(str(compile_c(PING_PONG, ("-O2", "-shared", "-fPIC", "-pthread"))))
        lib.round_trip_ns.restype = ctypes.c_double
        lib.round_trip_ns.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int)
        self._fn = lib.round_trip_ns
        self.cpus, self.pings, self.quiet_s = cpus, pings, quiet_s
        self.fastest = float("inf")

    def round_trip_ns(self) -> float:
        """One sample (`pings` round trips, about 0.1 ms near and 0.7 ms far)."""
        ns = float(self._fn(self.cpus[0], self.cpus[1], self.pings))
        if ns > 0:
            self.fastest = min(self.fastest, ns)
        return ns


def core_probe() -> CoreProbe | None:
    """A probe of this process's first two CPUs, or None where it has one CPU or no C compiler."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    try:
        return CoreProbe((cpus[0], cpus[1]))
    except (CompileError, OSError):
        return None
