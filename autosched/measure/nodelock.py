"""Timing on a node is exclusive of builds on that node, and of nothing else.

A build (gcc, nvcc, and the Python lowering before them) holds a core; a candidate timed
while it runs is timed on fewer cores than it was built for, and OpenMP kernels slow down by
large factors when another process holds one of a 2-core node's cores. So a device actor
holds its node's lock exclusively while it times, and a build on that node holds it shared
while it builds: builds overlap each other, and builds and timings alternate on one node,
while other nodes (whose locks are other files) go on untouched. Two CPU devices offered by one
node time one at a time too: they share its cores as much as a build does.

The lock is two `flock` files per node in the Ray session's own directory, beside its logs and
sockets (in /tmp itself, two files per node of every cluster ever started stayed there): a
turnstile and the lock itself. A timing waits at the turnstile for the lock, so builds that arrive meanwhile
queue behind it instead of starving it (flock alone favours no one). Locks belong to open
files: a process that dies releases them, and children never inherit them (close_fds).
"""
from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path


@contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    """`path` locked in `mode` until the block ends (closing the file releases it)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)


@dataclass(frozen=True)
class NodeLock:
    """The lock of one node (a Ray node id; nodes that share a machine have one each), its files
    in `directory`."""

    node_id: str
    directory: Path

    def _hold(self, mode: int) -> ExitStack:
        """The lock in `mode`, taken through the turnstile in the same mode: a waiting timing
        holds the turnstile, so builds queue behind it; builds pass it together."""
        self.directory.mkdir(parents=True, exist_ok=True)
        held = ExitStack()
        with _flock(self.directory / f"{self.node_id}.turnstile", mode):
            held.enter_context(_flock(self.directory / f"{self.node_id}.lock", mode))
        return held

    def timing(self) -> ExitStack:
        """Held while a candidate is timed: waits for the node's builds, holds off new ones."""
        return self._hold(fcntl.LOCK_EX)

    def building(self) -> ExitStack:
        """Held while a candidate is built: waits for a timing in progress or waiting."""
        return self._hold(fcntl.LOCK_SH)
