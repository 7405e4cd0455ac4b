"""The phases of a shared host: the round trip of a cache line between two cores
(`measure/cores.py`), which `benchmarks/host.py` samples."""
import os

import pytest

from autosched.measure.cores import core_probe


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: no round trip between two")
def test_the_probe_times_a_round_trip_between_two_cores():
    before = os.sched_getaffinity(0)
    probe = core_probe()
    assert probe is not None
    samples = [probe.round_trip_ns() for _ in range(3)]
    assert all(0 < ns < 1e6 for ns in samples) and probe.fastest == min(samples)
    assert os.sched_getaffinity(0) == before  # the calling thread was pinned while it timed, then let go
