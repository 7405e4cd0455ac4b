"""The cache state a candidate is timed in: the state the built model runs its kernel in.

A kernel timed many times back to back finds its weights in cache from the previous call. In a
model whose weights exceed the last-level cache it never does: the other layers' weights have
evicted them by the time it runs again, while its input activations were just written by the
previous kernel. Timing warm then ranks configs by how they run from cache, which is not how
the model runs them. Three modes:

- ``warm``: many calls back to back, the fastest and least noisy (`tune`'s default);
- ``cold``: each timed call follows a flush of twice the last-level cache, after which the
  kernel's activations are read back in: weights cold, inputs as warm as the previous kernel
  leaves them (what ``tune --caches auto`` picks for a model whose weights exceed the cache;
  on a GPU its L2, flushed and read back by the GPU worker before each launch);
- ``flushed``: each timed call after the flush alone, everything cold (TVM's
  ``enable_cpu_cache_flush``).

Why warm stays the default: on the AVX2 host this was measured on (Zen 3, 2 cores, a 32 MiB L3
shared with other tenants), `benchmarks/in_model.py` (3 costliest tasks, 8 configs each) found
no mode that ranks configs closer to their in-model order. ResNet-18 (45 MiB of weights): mean
Spearman warm 0.897 and 0.881, cold 0.865 and 0.801, flushed 0.825 and 0.889 in two quiet runs;
MobileNetV2 (14 MiB): warm 0.746, cold 0.643, flushed 0.818. On a 2-vCPU share of an AVX-512
Xeon (sysfs: a 300 MiB L3) ResNet-18's three costliest tasks ranked at warm 0.55/0.83/0.55, cold
0.50/0.93/0.91, flushed 0.93/0.52/0.69, yet a ResNet-18 tune in cold caches bought no more in
the model than a warm one (tuned / untuned 0.98 at 250 and 500 trials, against 0.87 and 0.98).
Other hosts may differ: the modes are there to measure it.

Records keep the mode they were timed in (`MeasureResult.caches`), since times of different
modes are not comparable.
"""
from __future__ import annotations

from pathlib import Path

CACHE_MODES = ("warm", "cold", "flushed")
#: bytes per second a CPU kernel streams from memory when the shared host gives it little: one
#: thread's numpy sum read 20 GB/s on the 2-vCPU EPYCs, and ResNet-18's F(4) 7x7 convolutions
#: read their 37.7 MB of weights at 50 GB/s in one hour's model check and 34 GB/s in the next
MEMORY_BANDWIDTH = 20e9
#: what `tune` and `build` accept: a mode, or "auto" to pick one from the model's weights
CACHE_CHOICES = ("auto", *CACHE_MODES)


def llc_bytes() -> int:
    """This machine's last-level cache (sysfs, CPU 0's highest level), 32 MiB where it cannot be read."""
    best = 0
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            text = (index / "size").read_text().strip()
            size = int(text[:-1]) * {"K": 1 << 10, "M": 1 << 20}[text[-1]] if text[-1] in "KM" else int(text)
        except (OSError, ValueError, IndexError, KeyError):
            continue
        best = max(best, size)
    return best or 32 << 20


def model_caches(mode: str, weight_bytes: int, cache_bytes: int | None = None) -> str:
    """The mode to time a model's candidates in: `mode` itself unless it is "auto", which is
    "cold" where the model's weights exceed the last-level cache of what runs the kernels
    (`cache_bytes`: a GPU's L2; by default this machine's), else "warm"."""
    if mode not in CACHE_CHOICES:
        raise ValueError(f"unknown cache mode {mode!r}: expected one of {', '.join(CACHE_CHOICES)}")
    if mode != "auto":
        return mode
    return "cold" if weight_bytes > (cache_bytes or llc_bytes()) else "warm"
