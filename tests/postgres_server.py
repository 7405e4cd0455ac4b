"""A real PostgreSQL server for the tests: the system's binaries, a cluster made by initdb in a
temporary directory, listening only on a unix socket in that directory, stopped and removed
when the tests end.

initdb and postgres refuse to run as root, so where the tests run as root both run as
`nobody` (the directory is theirs). The server gets SIGQUIT (immediate shutdown: it takes its
backends down with it) if the process that started it dies, so even a killed test run leaves
no server behind; the next run removes directories whose starter is dead.

    with PostgresServer.start() as server:
        url = server.create_database("t1")   # postgresql+psycopg://...
"""
from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

USER = "autosched"  # the cluster's superuser (a role name, no system account)
_PREFIX = "autosched-pg-"
_PR_SET_PDEATHSIG = 1


class NoServer(Exception):
    """No PostgreSQL server binaries on this machine (the message says where we looked)."""


def find_bindir() -> Path:
    """The directory holding initdb and postgres: `pg_config --bindir`, else the newest
    /usr/lib/postgresql/*/bin."""
    candidates = []
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        if out.returncode == 0:
            candidates.append(Path(out.stdout.strip()))
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                                           key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
                                           reverse=True)]
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "postgres").is_file():
            return bindir
    looked = ", ".join(str(c) for c in candidates) or "no pg_config, no /usr/lib/postgresql/*/bin"
    raise NoServer(f"no PostgreSQL server binaries (initdb, postgres) found (looked in: {looked}); "
                   "install PostgreSQL's server package, e.g. apt-get install postgresql")


def _die_with_parent() -> None:
    """Run in the server's process after it became `nobody` (a change of user clears the setting)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGQUIT)


def _base() -> Path:
    """Where server directories go: the temporary directory, unless its path is so long that the
    socket's (at most 107 bytes) would not fit."""
    base = tempfile.gettempdir()
    return Path(base if len(base) < 60 else "/tmp")


def _sweep_stale() -> None:
    """Remove the directories of earlier runs whose starting process is gone (killed with -9)."""
    for path in _base().glob(f"{_PREFIX}*"):
        try:
            pid = int(path.name[len(_PREFIX):].split("-")[0])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (ValueError, PermissionError):
            continue


@dataclass
class PostgresServer:
    """A running server: its directory (cluster in `data/`, socket in the directory itself)."""

    root: Path
    process: subprocess.Popen
    made: int = 0  # databases created: each name gets a number, so tests may reuse names

    @classmethod
    @contextlib.contextmanager
    def start(cls, timeout: float = 60.0) -> Iterator[PostgresServer]:
        """initdb, start, wait until it accepts connections; stop and remove all on exit."""
        bindir = find_bindir()
        _sweep_stale()
        root = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=_base()))
        as_user: dict = {}
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            os.chown(root, nobody.pw_uid, nobody.pw_gid)
            as_user = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "TZ": "UTC"}
        process = None
        try:
            data = root / "data"
            init = subprocess.run([str(bindir / "initdb"), "-D", str(data), "-U", USER, "--auth=trust",
                                   "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"],
                                  capture_output=True, text=True, env=env, cwd=root, **as_user)
            if init.returncode != 0:
                raise RuntimeError(f"initdb failed ({init.returncode}): {init.stderr.strip()}")
            settings = {"listen_addresses": "", "unix_socket_directories": str(root), "fsync": "off",
                        "synchronous_commit": "off", "full_page_writes": "off", "max_connections": "200",
                        "shared_buffers": "32MB", "log_min_messages": "warning"}
            args = [str(bindir / "postgres"), "-D", str(data)]
            for name, value in settings.items():
                args += ["-c", f"{name}={value}"]
            with open(root / "server.log", "wb") as log:
                process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root,
                                           preexec_fn=_die_with_parent, **as_user)
            server = cls(root, process)
            server._wait_ready(timeout)
            yield server
        finally:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGQUIT)  # immediate shutdown: no checkpoint, the cluster is thrown away
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            shutil.rmtree(root, ignore_errors=True)

    def _wait_ready(self, timeout: float) -> None:
        import psycopg
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited ({self.process.returncode}): {self.log()}")
            try:
                psycopg.connect(**self.conninfo("postgres"), connect_timeout=5).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not accept connections within {timeout:.0f} s: "
                                       f"{self.log()}") from None
                time.sleep(0.05)

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def conninfo(self, dbname: str) -> dict[str, str]:
        return {"host": str(self.root), "user": USER, "dbname": dbname}

    def url(self, dbname: str) -> str:
        """The SQLAlchemy URL of one database (a plain postgresql:// URL, as a user writes it)."""
        return f"postgresql://{USER}@/{dbname}?host={self.root}"

    def create_database(self, name: str) -> str:
        """A new empty database named `name` and a number; returns its URL."""
        import psycopg
        from psycopg import sql
        self.made += 1
        dbname = f"{name}_{self.made}"
        with psycopg.connect(**self.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        return self.url(dbname)
