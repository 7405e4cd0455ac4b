"""Alternated timing (`compile/evaluate.py: alternate`): runs, blocks and how long they last."""
import time

import numpy as np
import pytest

from autosched.compile.evaluate import (
    alternate,
    alternate_rounds,
    joined,
    paired_interval,
    paired_ratio,
    paired_verdict,
)


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
    """20 runs of 1 ms are 20 ms; asked for 0.1 s, each side runs until its timed runs last that
    long, in the same rounds (blocks grown alike), whichever runner is faster. How many runs that
    takes depends on how long a 1 ms sleep lasts on a loaded machine, so the count is not asserted."""
    (_, a), (_, b) = counting(0.001), counting(0.003)
    times = alternate([a, b], runs=20, block=10, settle_s=0.0, min_seconds=0.1)
    assert len(times[0]) == len(times[1]) > 20
    assert sum(times[0]) >= 0.1 and sum(times[1]) >= 0.1
    assert len(times[0]) <= 200  # the faster runner decides; the slower one would have needed 40


def test_a_first_run_longer_than_the_rest_is_made_up_by_more_rounds():
    """One run judges the scale; when it was slow (a loaded machine), whole rounds are added until
    the timed runs reach the minimum, so the minimum holds whatever that one run measured."""
    calls = []

    def run() -> None:
        calls.append(1)
        time.sleep(0.02 if len(calls) == 1 else 0.001)
    times = alternate([run, run], runs=4, block=2, settle_s=0.0, min_seconds=0.05)
    assert len(times[0]) == len(times[1]) and len(times[0]) % 2 == 0
    assert sum(times[0]) >= 0.05 and sum(times[1]) >= 0.05


def test_a_first_run_far_longer_than_the_rest_costs_one_top_up_round_not_hundreds():
    """A first run 100x the rest scaled the blocks to a hundredth of what the minimum needs;
    the top-up round is sized by the runs' mean, so settling happens a few times, not once per
    block of the first scale (200 rounds of 0.15 s settling made a 10 us model's check take 60 s)."""
    calls = []

    def run() -> None:
        calls.append(1)
        time.sleep(0.1 if len(calls) == 1 else 0.001)
    times = alternate([run], runs=4, block=2, settle_s=0.0, min_seconds=0.2)
    assert sum(times[0]) >= 0.2 and len(times[0]) % 2 == 0
    rounds = len(calls) - len(times[0])  # one settling run before each block or round
    assert rounds <= 6


def test_slow_runners_keep_the_runs_asked_for():
    (_, a), (_, b) = counting(0.01), counting(0.01)
    times = alternate([a, b], runs=4, block=2, settle_s=0.0, min_seconds=0.02)
    assert [len(t) for t in times] == [4, 4]


def test_rounds_keep_each_block_and_the_paired_ratio_leaves_out_a_round_of_another_phase(monkeypatch):
    """b twice as slow as a; from the third round's block of b on, both three times slower (a host
    that changed phase within a round): the medians of the whole runs say 4, the rounds' ratios
    2, 2, 6 and 2. The runs advance a clock of their own (real sleeps overshoot on a loaded host
    by as much as the 2 ms they sleep)."""
    import autosched.compile.evaluate as evaluate

    calls, clock = [], [0.0]
    monkeypatch.setattr(evaluate.time, "perf_counter", lambda: clock[0])

    def runner(seconds: float):
        def run() -> None:
            calls.append(1)
            clock[0] += seconds * (3 if len(calls) >= 16 else 1)  # six calls a round, a settling run per block
        return run
    rounds = alternate_rounds([runner(0.002), runner(0.004)], runs=8, block=2, settle_s=0.0)
    assert len(rounds) == 4 and all(len(block) == 2 for r in rounds for block in r)
    a, b = joined(rounds, 2)
    assert a == [t for r in rounds for t in r[0]] and b == [t for r in rounds for t in r[1]]
    assert np.median(b) / np.median(a) > 3
    assert paired_ratio(rounds, 1, 0) == pytest.approx(2)


def _rounds(ratios):
    """Rounds whose blocks (of one run each side) have these ratios of runner 0 over runner 1."""
    return [[[r], [1.0]] for r in ratios]


def test_the_paired_interval_is_the_binomial_order_statistics_of_the_rounds_ratios():
    """20 rounds: P(Binomial(20, 1/2) <= 5) = 0.021 <= 0.025 < P(<= 6) = 0.058, so the 95%
    interval runs from the 6th smallest ratio to the 15th; fewer than 6 rounds give the range."""
    ratios = [0.80 + 0.01 * i for i in range(20)]
    shuffled = _rounds(np.random.default_rng(0).permutation(ratios))
    assert paired_interval(shuffled, 0, 1) == (ratios[5], ratios[14])
    assert paired_interval(_rounds([1.1, 0.9, 1.0]), 0, 1) == (0.9, 1.1)
    assert paired_interval(_rounds([1.1, 0.9, 1.0]), 1, 0) == (1 / 1.1, 1 / 0.9)


def test_the_paired_interval_covers_the_median_as_often_as_it_says():
    """Rounds drawn from a skewed law around a true median of 0.97: the interval misses it in
    at most about 5% of 400 tries, and is narrow enough at 40 rounds to tell 0.97 from 1."""
    rng = np.random.default_rng(1)
    misses, below_one = 0, 0
    for _ in range(400):
        ratios = 0.97 * np.exp(rng.laplace(0, 0.02, 40))
        lo, hi = paired_interval(_rounds(ratios), 0, 1)
        misses += not lo <= 0.97 <= hi
        below_one += hi < 1
    assert misses <= 0.05 * 400 * 1.5
    assert below_one >= 0.9 * 400


def test_a_verdict_is_faster_or_slower_only_where_six_rounds_or_more_exclude_one():
    """Rounds that all agree leave 1 out of their interval; one that disagrees, among six, does
    not; five rounds or fewer give no verdict (one round's interval is a point)."""
    assert paired_verdict(_rounds([0.95, 0.97, 0.96, 0.98, 0.97, 0.96]), 0, 1) == "faster"
    assert paired_verdict(_rounds([0.95, 0.97, 0.96, 0.98, 0.97, 0.96]), 1, 0) == "slower"
    assert paired_verdict(_rounds([0.95, 1.02, 0.97, 0.96, 0.97, 0.96]), 0, 1) == "within noise"
    assert paired_verdict(_rounds([1.037]), 0, 1) == "too few rounds"
    assert paired_verdict(_rounds([1.02, 1.05, 1.03, 1.04, 1.03]), 0, 1) == "too few rounds"
