"""SIGTERM is Ctrl-C: one line, every committed record kept, exit 143, nothing left behind; and
what a kill -9 leaves in the temporary directory is swept by the next command."""
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid

import pytest
from process_helpers import ROOT, finish, marked, ours, records, start_tune, wait_for

from autosched.cli.app import terminate_as_interrupt


def test_sigterm_is_handled_like_ctrl_c_and_leaves_no_temporary_directory(small_model, tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    db, mark = tmp_path / "t.db", uuid.uuid4().hex
    proc = start_tune(small_model, db, 400, mark)
    wait_for(lambda: records(db) >= 2 and len(marked(mark)) > 1 or proc.poll() is not None)
    assert ours(tmp)  # the measuring worker's data directory at least
    proc.send_signal(signal.SIGTERM)  # `kill PID`: the tuner alone, not its process group
    _, err = finish(proc, 120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    [line] = err.splitlines()
    kept = records(db)
    assert line.startswith(f"interrupted: {kept} records kept in {db}")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status, trials_done FROM sessions").fetchall() == [("interrupted", kept)]
    wait_for(lambda: not marked(mark))
    assert ours(tmp) == []


def test_the_next_command_sweeps_what_a_kill_9_left(small_model, tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    db, mark = tmp_path / "t.db", uuid.uuid4().hex
    proc = start_tune(small_model, db, 400, mark)
    wait_for(lambda: records(db) >= 2 or proc.poll() is not None)
    proc.kill()
    proc.communicate()
    wait_for(lambda: not marked(mark))
    left = ours(tmp)
    assert any(name.startswith(f"autosched-run-{proc.pid}-") for name in left), left
    live = tmp / f"autosched-cc-{os.getpid()}-live"  # a live process's directory stays
    live.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "autosched.cli", "db", "stats", "--db", str(db)], check=True,
                   capture_output=True, env=env)
    assert ours(tmp) == [live.name]


def test_sigterm_during_bench_removes_its_build_directory(small_model, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "autosched.cli", "bench", str(small_model), "--runs", "1000000",
                             "--db", str(tmp_path / "t.db")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)

    def built() -> bool:
        return any(name.startswith(f"autosched-bench-{proc.pid}-") and (tmp / name / "model.weights").exists()
                   for name in ours(tmp))
    try:
        wait_for(lambda: proc.poll() is not None or built())  # built, so timing now
        proc.send_signal(signal.SIGTERM)
        _, err = finish(proc, 120)  # once under CI's load it did not exit in time: a dump of its threads if so
    finally:
        proc.kill()  # a command that ignored the signal must not outlive the test
    assert proc.returncode == 128 + signal.SIGTERM and err == "interrupted\n", err
    assert ours(tmp) == [] and not (tmp_path / "t.db").exists()


def test_an_interrupt_sqlalchemy_logs_before_reraising_it_is_not_printed(capfd):
    """A SIGTERM landing while SQLAlchemy's pool closes a connection: the pool logs the
    KeyboardInterrupt with its traceback, then re-raises it; the command prints `interrupted`
    alone (once a flaky failure of the test above). Its other errors still show."""
    import logging

    from autosched.cli.app import _show_warnings

    logger = logging.getLogger("sqlalchemy")
    earlier = logger.handlers[:]  # a CLI run earlier in this process installed its handler on another stderr
    logger.handlers.clear()
    try:
        _show_warnings()
        pool = logging.getLogger("sqlalchemy.pool.impl.QueuePool")
        for exc in (KeyboardInterrupt(), OSError("disk I/O error")):
            try:
                raise exc
            except BaseException:
                pool.error("Exception during reset or similar", exc_info=True)
    finally:
        logger.handlers[:] = earlier
    err = capfd.readouterr().err
    assert "KeyboardInterrupt" not in err and "sqlalchemy: Exception during reset or similar" in err
    assert "OSError: disk I/O error" in err


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_an_interrupt_swallowed_by_a_finalizer_is_delivered_again(sigint):
    """A SIGTERM landing while a __del__ runs raises its KeyboardInterrupt there, where the
    interpreter only prints "Exception ignored"; the command must still stop, also where SIGINT
    is ignored (a command a script starts in the background: redelivering it as a SIGINT did nothing)."""
    class SignalledWhileFinalized:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between these bytecodes, inside __del__
                pass

    swallowed = []
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN if sigint == "ignored" else signal.default_int_handler)
    try:
        with terminate_as_interrupt() as received:
            hook = sys.unraisablehook
            sys.unraisablehook = lambda u: (swallowed.append(u.exc_type), hook(u))
            try:
                with pytest.raises(KeyboardInterrupt):
                    obj = SignalledWhileFinalized()
                    del obj
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline:
                        pass
            finally:
                sys.unraisablehook = hook
    finally:
        signal.signal(signal.SIGINT, previous)
    assert swallowed == [KeyboardInterrupt] and received == [signal.SIGTERM]
