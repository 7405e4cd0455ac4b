"""Interrupts that never unwound, raised again by the loops that run for long.

The command line turns SIGTERM and Ctrl-C into a KeyboardInterrupt in the main thread
(`autosched.cli.app.terminate_as_interrupt`) and records the signal here. Native code can
swallow that exception: a SIGTERM landing in numpy.random's lazy import raised it inside a
Cython module's registration with the ABCs, which calls PyErr_Clear, and `autosched bench
--runs 1000000` ran on for good, its signal spent (a second SIGTERM is ignored while the first
unwinds). Any extension that clears errors (an import of xgboost, sklearn or ray, a C callback)
can do the same, so the long loops of a command call `check` on every iteration.
"""
from __future__ import annotations

#: signals received while the command line's handler is installed; `terminate_as_interrupt`
#: puts its own list here and the one before back on exit, so nothing carries over between commands
received: list[int] = []


def check() -> None:
    """Raise KeyboardInterrupt again when a signal was received: a loop still iterating after
    one was never unwound by its interrupt (native code cleared it, or code caught it and went
    on). A list's truth test, nothing measurable beside a timed run."""
    if received:
        raise KeyboardInterrupt
