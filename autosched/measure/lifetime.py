"""Measurement processes never outlive the tuner that started them.

A builder or runner child calls `die_with_parent` first thing: the kernel sends it SIGKILL when
its parent dies, even by kill -9 (Linux `prctl(PR_SET_PDEATHSIG)`), and a parent that died
before that call is caught by comparing the parent pid. It also ignores SIGINT: Ctrl-C reaches
the whole foreground process group, and it is the tuner's to handle (stop, keep what was
measured, say so), not a traceback from every child.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Make this process exit when `parent_pid` (its parent) does; ignore SIGINT, die of SIGTERM
    (the parent's handler, inherited by a fork, is not this process's), and unblock both, for
    children forked while the parent blocked them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while children are forked, and deliver them after.

    Blocking them in this thread is not enough: the kernel hands a process's signal to any thread
    that does not block it (an OpenMP or BLAS worker), Python's handler then runs in the main
    thread at its next bytecode, and a KeyboardInterrupt raised inside `multiprocessing.Pool()`
    left forked workers and the pool's threads behind, which the interpreter then waited on at
    exit for ever (CI, a Ctrl-C in the first build of a tune). So the handlers only record the
    signals meanwhile; children fork with both blocked and unblock them in `die_with_parent`."""
    caught: list[int] = []
    signums = (signal.SIGINT, signal.SIGTERM)
    # only the main thread may set handlers, and one set outside Python (None) could not be put back
    settable = threading.current_thread() is threading.main_thread() and None not in map(signal.getsignal, signums)
    previous = {s: signal.signal(s, lambda signum, _frame: caught.append(signum)) for s in signums} if settable else {}
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, signums)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for pending in dict.fromkeys(caught):
            signal.raise_signal(pending)  # now to the handler it was meant for
