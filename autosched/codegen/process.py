"""Running a compiler under a time limit that also holds for the processes it starts.

gcc and nvcc are drivers: the work happens in their children (cc1, cicc, ptxas). A timeout
that kills only the driver leaves its child running as an orphan, and on a 2-core machine an
orphaned cc1 holds one core for as long as it likes: every candidate timed after it ran its
OpenMP barriers at the scheduler's 4 ms ticks (a batched 49x49 matmul measured 16-24 ms
against 0.4 ms in the model). So on a timeout every descendant is killed, and each of them
also carries a CPU-time limit of its own (inherited through fork and exec), which ends it even
when whoever should have killed it is gone (a build worker terminated mid-compile).

A killed compiler cannot remove its own temporary files (gcc's cc1 writes its assembly to a
``ccXXXXXX.s`` in $TMPDIR for `as` to read): the compiler runs with $TMPDIR in the caller's own
scratch directory, which goes with everything in it when the build's `with` block ends.
"""
from __future__ import annotations

import math
import os
import resource
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, children before grandchildren (Linux /proc; [] elsewhere)."""
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            found.extend(children)
            frontier.extend(children)
    return found


def _kill_tree(proc: subprocess.Popen[str]) -> None:
    # the children are listed before the driver dies: once it has, they are orphans /proc no longer ties to it
    for pid in [*descendants(proc.pid), proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.communicate()


def run_compiler(cmd: Sequence[str], timeout: float, scratch: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    """`cmd`'s output, or subprocess.TimeoutExpired after `timeout` seconds with the command
    and everything it started killed. Ctrl-C still reaches them all (they stay in the caller's
    process group), and is passed on after they are killed. The compiler's temporary files go
    to `scratch` (a directory the caller removes)."""
    cpu_seconds = math.ceil(timeout) + 1

    def limit_cpu() -> None:  # soft limit: SIGXCPU; hard limit a second later: SIGKILL
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))

    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=limit_cpu, env={**os.environ, "TMPDIR": os.fspath(scratch)})
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException:  # the timeout, Ctrl-C, or the caller's own exception
        _kill_tree(proc)
        raise
    return subprocess.CompletedProcess(list(cmd), proc.returncode, stdout, stderr)


__all__ = ["descendants", "run_compiler"]
