"""The node lock without Ray: flock locks belong to open files, so threads that each open
the lock contend as the processes of one node do."""
from __future__ import annotations

import threading
import time

from autosched.measure.nodelock import NodeLock


def _taken_within(hold, seconds: float) -> bool:
    """Whether `hold()` is entered within `seconds` (a thread tries; it lets go at once)."""
    entered = threading.Event()

    def take() -> None:
        with hold():
            entered.set()

    threading.Thread(target=take, daemon=True).start()
    return entered.wait(seconds)


def test_builds_share_a_node_and_a_timing_excludes_them(tmp_path):
    lock = NodeLock("a", tmp_path)
    with lock.building():
        assert _taken_within(lock.building, 1.0)
        assert not _taken_within(lock.timing, 0.3)
    with lock.timing():
        assert not _taken_within(lock.building, 0.3)


def test_a_waiting_timing_holds_off_new_builds(tmp_path):
    """flock alone would let builds that keep arriving starve the timing: the turnstile stops them."""
    lock = NodeLock("a", tmp_path)
    timing, done = threading.Event(), threading.Event()

    def time_one() -> None:
        with lock.timing():
            timing.set()
            done.wait(5)

    timer = threading.Thread(target=time_one)
    with lock.building():
        timer.start()
        time.sleep(0.2)  # the timing waits at the turnstile now
        assert not _taken_within(lock.building, 0.3)
        assert not timing.is_set()
    assert timing.wait(5)
    done.set()
    timer.join(5)


def test_other_nodes_are_not_held(tmp_path):
    with NodeLock("a", tmp_path).timing():
        assert _taken_within(NodeLock("b", tmp_path).building, 1.0)
        assert _taken_within(NodeLock("b", tmp_path).timing, 1.0)
