"""Alternated timing (`compile/evaluate.py: alternate`): runs, blocks and how long they last."""
import time

from autosched.compile.evaluate import alternate


def counting(seconds: float):
    calls = []

    def run() -> None:
        calls.append(1)
        time.sleep(seconds)
    return calls, run


def test_runs_are_as_asked_without_a_minimum_time():
    (a_calls, a), (b_calls, b) = counting(0.0), counting(0.0)
    times = alternate([a, b], runs=20, block=10, settle_s=0.0)
    assert [len(t) for t in times] == [20, 20]
    assert len(a_calls) == len(b_calls) == 2 * (10 + 1)  # two blocks, each after one settling run


def test_fast_runners_run_until_each_has_been_timed_for_the_minimum():
    """20 runs of 1 ms are 20 ms; asked for 0.1 s, each side runs at least 100 times, in the same
    two rounds (blocks grown alike), whichever runner is faster."""
    (_, a), (_, b) = counting(0.001), counting(0.003)
    times = alternate([a, b], runs=20, block=10, settle_s=0.0, min_seconds=0.1)
    assert len(times[0]) == len(times[1]) >= 100
    assert sum(times[0]) >= 0.1 and sum(times[1]) >= 0.1
    assert len(times[0]) % 2 == 0 and len(times[0]) <= 200  # two blocks; the faster one decides


def test_slow_runners_keep_the_runs_asked_for():
    (_, a), (_, b) = counting(0.01), counting(0.01)
    times = alternate([a, b], runs=4, block=2, settle_s=0.0, min_seconds=0.02)
    assert [len(t) for t in times] == [4, 4]
