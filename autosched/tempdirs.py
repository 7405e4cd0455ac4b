"""Temporary directories that name the process owning them.

A `with` block removes its directory on every exit Python runs (an exception, Ctrl-C, SIGTERM,
which the command line turns into an interrupt), but nothing runs after a kill -9: the next
command sweeps the directories whose owner is dead. PIDs are those of this PID namespace; a
container sharing /tmp with another sees that one's live owners as dead.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

_OWNED = re.compile(r"autosched-[a-z]+-(\d+)-")


def temp_dir(kind: str) -> tempfile.TemporaryDirectory:
    """A `TemporaryDirectory` named `autosched-KIND-PID-...` (KIND: lowercase letters)."""
    return tempfile.TemporaryDirectory(prefix=f"autosched-{kind}-{os.getpid()}-")


def sweep_stale(root: str | os.PathLike[str] | None = None) -> int:
    """Remove the temporary directories (under `root`, default the system's) of processes that no
    longer exist; returns how many went."""
    removed = 0
    try:
        entries = list(os.scandir(Path(root) if root is not None else tempfile.gettempdir()))
    except OSError:
        return 0
    for entry in entries:
        owner = _OWNED.match(entry.name)
        if owner and entry.is_dir(follow_symlinks=False) and not _alive(int(owner.group(1))):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed += not os.path.exists(entry.path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
