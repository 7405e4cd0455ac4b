"""A compiler that runs past its time leaves no process behind: not the driver, not the cc1
it started (an orphaned cc1 once held a core of a 2-core machine through every later timing)."""
import os
import subprocess
import sys
import tempfile
import time

import pytest

from autosched.codegen import CompileError
from autosched.codegen.gcc import compile_c
from autosched.codegen.process import run_compiler

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and RLIMIT_CPU are Linux's")

BUSY = "while :; do :; done"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _wait_dead(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _fake_gcc(tmp_path, pidfile):
    """gcc for its queries (version, ISA), a driver whose child spins forever for a build after
    writing a temporary file where cc1 writes its assembly."""
    script = tmp_path / "slowcc"
    script.write_text(f"""#!/bin/sh
case " $* " in
  *" -o "*) mktemp "${{TMPDIR:-/tmp}}/ccXXXXXX.s" > /dev/null; sh -c '{BUSY}' & echo $! > {pidfile}; wait ;;
  *) exec gcc "$@" ;;
esac
""")
    script.chmod(0o755)
    return str(script)


def test_a_build_timeout_kills_the_compilers_children_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    system_tmp = tmp_path / "tmp"  # the system's temporary directory, as this build sees it
    system_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(system_tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
    pidfile = tmp_path / "child.pid"
    with pytest.raises(CompileError, match="did not finish within 1 s"):
        compile_c("int f(void) { return 1; }", ("-O2", "-shared", "-fPIC"), cache_dir=tmp_path / "cache",
                  timeout=1.0, cc=_fake_gcc(tmp_path, pidfile))
    child = int(pidfile.read_text())
    assert _wait_dead(child, 2.0), f"the compiler's child {child} outlived the timeout"
    assert list(system_tmp.iterdir()) == []  # a killed gcc's ccXXXXXX.s went with the build's directory


def test_a_compiler_child_nobody_is_left_to_kill_ends_at_its_cpu_limit(tmp_path):
    """The driver exits and leaves a spinning child (as when a build worker is terminated):
    the CPU-time limit it inherited ends it."""
    pidfile = tmp_path / "child.pid"
    run_compiler(["sh", "-c", f"sh -c '{BUSY}' > /dev/null 2>&1 & echo $! > {pidfile}"], 1.0, tmp_path)
    child = int(pidfile.read_text())
    try:
        assert _alive(child)
        assert _wait_dead(child, 8.0), f"the orphan {child} outlived its CPU limit"
    finally:
        if _alive(child):
            os.kill(child, 9)


def test_a_compiler_within_its_time_returns_its_output(tmp_path):
    proc = run_compiler(["sh", "-c", "echo out; echo err >&2; echo $TMPDIR; exit 3"], 10.0, tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, f"out\n{tmp_path}\n", "err\n")
    with pytest.raises(subprocess.TimeoutExpired):
        run_compiler(["sleep", "5"], 0.2, tmp_path)
