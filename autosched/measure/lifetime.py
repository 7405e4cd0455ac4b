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
