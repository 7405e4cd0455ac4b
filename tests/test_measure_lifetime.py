"""Signals that land while measurement children start: they must interrupt the tuner only once
the children are known to it (and so are killed), never half-way through starting them."""
import os
import signal
import threading
import time

import pytest

from autosched.measure.lifetime import signals_deferred


def test_a_signal_taken_by_another_thread_interrupts_only_after_the_block():
    # the kernel gives a process-directed signal to a thread that does not block it (here the
    # only one, started before the block, as an OpenMP worker is); Python's handler would then
    # raise in the main thread at its next bytecode, inside the block
    go = threading.Event()
    sender = threading.Thread(target=lambda: (go.wait(), os.kill(os.getpid(), signal.SIGINT)))
    sender.start()
    finished = False
    with pytest.raises(KeyboardInterrupt):
        with signals_deferred():
            go.set()
            sender.join()
            deadline = time.monotonic() + 0.2
            while time.monotonic() < deadline:  # many bytecodes: the handler had every chance to run
                pass
            finished = True
    assert finished


def test_handlers_and_mask_are_restored_and_nothing_is_raised_without_a_signal():
    handler = signal.getsignal(signal.SIGTERM)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    with signals_deferred():
        assert {signal.SIGINT, signal.SIGTERM} <= signal.pthread_sigmask(signal.SIG_BLOCK, set())
    assert signal.getsignal(signal.SIGTERM) is handler
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == mask


def test_a_deferred_sigterm_reaches_the_handler_it_was_meant_for():
    got = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: got.append(signum))
    try:
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            assert got == []
        assert got == [signal.SIGTERM]  # once: two pending signals of a kind are one, as the kernel's
    finally:
        signal.signal(signal.SIGTERM, previous)
