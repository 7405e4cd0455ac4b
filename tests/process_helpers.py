"""A tuner run as a user runs it, in its own process and process group, and ways to watch it:
which of its processes live, how many records it committed, which temporary directories it left;
and a signal whose interrupt is swallowed, as native code swallows it."""
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def start_tune(model, db, trials, mark, *extra):
    """`autosched tune` in its own process group (as a shell runs it), its processes marked; without
    the model check (these tests are about claims, signals and the database, not the model)."""
    env = {**os.environ, "AUTOSCHED_TEST_MARK": mark, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "autosched.cli", "tune", str(model), "--db", str(db),
                             "--trials", str(trials), "--round", "4", "--tuner", "random", "--no-model-check", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, preexec_fn=_as_in_a_terminal)
    STARTED.append(proc)
    return proc


def finish(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """`proc.communicate(timeout)` for a command started with PYTHONFAULTHANDLER=1 (as `start_tune`
    starts tuners); one that hangs is aborted, and the failure shows where each of its threads
    was (faulthandler's dump on SIGABRT)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        native = native_stacks(proc.pid)
        proc.send_signal(signal.SIGABRT)
        out, err = proc.communicate()
        raise AssertionError(f"the command did not exit within {timeout:.0f} s; its threads were at:\n{err}\n"
                             f"in C:\n{native}\nits output:\n{out}") from None


def native_stacks(pid: int) -> str:
    """Every thread's C stack of a live process, by gdb where it is installed: a command that hung
    in a kernel library's thread pool shows only its Python frame `run_into` to faulthandler."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return "(no gdb here)"
    try:
        done = subprocess.run([gdb, "-p", str(pid), "-batch", "-ex", "thread apply all bt"], capture_output=True,
                              text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "(gdb did not finish in 60 s)"
    return done.stdout[-20000:] or done.stderr[-2000:]


#: tuners the running test started: a test that fails before they exit must not leave them running
STARTED: list[subprocess.Popen] = []


def kill_started() -> None:
    """Kill the process group of every tuner a test started that still runs (passing tests have
    ended theirs: this only matters when one fails half way)."""
    for proc in STARTED:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    STARTED.clear()


def _as_in_a_terminal():
    """A shell without job control starts background commands with SIGINT ignored, and the test
    may run under one: give the tuner the default disposition a terminal's foreground job has."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def marked(mark):
    """Pids of live processes whose environment carries `mark` (a tuner and its children)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"AUTOSCHED_TEST_MARK={mark}".encode() in environ.split(b"\0") and state != "Z":
            found.append(int(pid))
    return found


def wait_for(condition, limit=120.0):
    """Poll `condition` until it holds; a guard against hanging, not a timing claim."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.05)


def records(db):
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        try:
            # trials: not the defaults re-timed beside rounds (`task_scheduler.with_reference`)
            return conn.execute("SELECT count(*) FROM records WHERE coalesce(tuner, '') != 'reference'").fetchone()[0]
        except sqlite3.OperationalError:
            return 0


OURS = re.compile(r"autosched-(cc|run|check|bench|nvcc)-")


def ours(tmp):
    """The temporary directories our commands made in `tmp` and left there."""
    return sorted(p.name for p in tmp.iterdir() if OURS.match(p.name))


def swallow(signum: int) -> None:
    """Send this process `signum` and swallow the KeyboardInterrupt its handler raises, as native
    code that clears errors does (numpy.random's Cython ABC registration: PyErr_Clear)."""
    try:
        os.kill(os.getpid(), signum)
        time.sleep(10)  # the handler raises here at the latest
    except KeyboardInterrupt:
        return
    raise AssertionError(f"signal {signum} raised nothing")
