"""`autosched fleet head/worker/status/stop` and `tune --ray-address`, as a user runs them:
real processes on loopback ports, token authentication on, a throwaway token and state dir."""
from __future__ import annotations

import json
import os
import re
import secrets
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "RAY_AUTH_TOKEN": secrets.token_hex(16),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _records(db: Path) -> list[dict]:
    """The database's records as `autosched db export` writes them."""
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(row) for row in conn.execute("SELECT * FROM records")]


def _listening(session: int) -> set[tuple[str, int]]:
    """(address, port) of each TCP socket that a process of `session` (a node's `ray start`
    and everything it started) listens on, as `ss` lists them."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = set()
    for line in out.splitlines():
        pids = [int(p) for p in re.findall(r"pid=(\d+)", line)]
        if any(_session_of(pid) == session for pid in pids):
            host, port = line.split()[3].rsplit(":", 1)
            found.add((host, int(port)))
    return found


def _session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except ProcessLookupError:
        return None


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autosched.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow  # 69 s: a head and a worker started through the CLI, then stopped
def test_head_worker_tune_status_stop(env, small_model, tmp_path):
    address = f"127.0.0.1:{_free_port()}"
    try:
        head = _cli(env, "fleet", "head", "--port", address.split(":")[1])
        assert head.returncode == 0, head.stderr
        assert f"fleet at {address}" in head.stdout and "autosched-gcc" in head.stdout
        head_pid = int(re.search(r"pid (\d+)", head.stdout).group(1))
        # Ray 2.60 binds the GCS on every interface whatever --node-ip-address says (README, "What
        # a head listens on"); when this fails, Ray binds what it is told: make --host mean it
        gcs = {host for host, port in _listening(head_pid) if port == int(address.split(":")[1])}
        assert gcs == {"*"}, gcs
        worker = _cli(env, "fleet", "worker", "--address", address)
        assert worker.returncode == 0, worker.stderr
        assert "worker started" in worker.stdout and "autosched-cpu-" in worker.stdout

        db = tmp_path / "fleet.db"
        tune = _cli(env, "tune", str(small_model), "--trials", "4", "--round", "2", "--tuner", "random",
                    "--db", str(db), "--ray-address", address)
        assert tune.returncode == 0, tune.stderr
        records = _records(db)
        assert len(records) == 4 and all(r["node"] for r in records)
        emulated = _cli(env, "tune", str(small_model), "--target", "cuda -arch=sm_90", "--emulate", "--trials", "2",
                        "--round", "2", "--tuner", "random", "--db", str(db), "--ray-address", address)
        assert emulated.returncode == 0, emulated.stderr
        cuda = [r for r in _records(db) if r not in records]
        assert len(cuda) == 2 and all(r["node"] and r["error_kind"] == "NO_ERROR" for r in cuda), cuda

        status = _cli(env, "fleet", "status", "--address", address, "--json")
        assert status.returncode == 0, status.stderr
        nodes = json.loads(status.stdout)["nodes"]
        assert len(nodes) == 2 and all(n["alive"] and n["measuring"] == [] for n in nodes)
        assert all(any(k.startswith("autosched-cpu-") for k in n["resources"]) for n in nodes)

        for token in ("wrong", None):
            bad_env = {k: v for k, v in env.items() if k != "RAY_AUTH_TOKEN"}
            bad_env.update({"RAY_AUTH_TOKEN": token} if token else {"HOME": str(tmp_path)})
            refused = _cli(bad_env, "fleet", "status", "--address", address)
            assert refused.returncode == 2
            assert len(refused.stderr.strip().splitlines()) == 1 and "token" in refused.stderr
    finally:
        stop = _cli(env, "fleet", "stop")
    assert stop.returncode == 0 and "stopped worker" in stop.stdout and "stopped head" in stop.stdout
    assert "no fleet node runs here" in _cli(env, "fleet", "stop").stdout


def test_head_without_a_token_has_ray_make_one(monkeypatch, tmp_path):
    """No RAY_AUTH_TOKEN and no token file: `fleet head` has Ray write ~/.ray/auth_token."""
    from autosched import fleet
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    assert fleet.token_source() is None
    with pytest.raises(fleet.FleetError, match="no Ray auth token"):
        fleet._require_token(create=False)
    fleet._require_token(create=True)
    made = tmp_path / ".ray" / "auth_token"
    assert fleet.token_source() == str(made) and len(made.read_text().strip()) >= 32


@pytest.mark.slow
def test_driver_killed_mid_tune_loses_only_its_rounds_in_flight(env, small_model, tmp_path):
    """kill -9 of `tune --ray-address`: the fleet stays up with nothing left measuring, and a
    second tune resumes from the database without measuring any recorded config again."""
    address = f"127.0.0.1:{_free_port()}"
    db = tmp_path / "killed.db"
    tune = ["tune", str(small_model), "--round", "2", "--tuner", "random", "--db", str(db), "--ray-address", address]
    try:
        assert _cli(env, "fleet", "head", "--port", address.split(":")[1]).returncode == 0
        driver = subprocess.Popen([sys.executable, "-m", "autosched.cli", *tune, "--trials", "40"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not db.exists() or len(_records(db)) < 4:
            assert driver.poll() is None
            time.sleep(0.2)
        driver.kill()
        driver.wait()
        logged = len(_records(db))
        status = json.loads(_cli(env, "fleet", "status", "--address", address, "--json").stdout)
        assert [n["measuring"] for n in status["nodes"]] == [[]]
        again = _cli(env, *tune, "--trials", "6")
        assert again.returncode == 0 and f"resuming from {logged} records" in again.stdout + again.stderr
    finally:
        _cli(env, "fleet", "stop")
    records = _records(db)
    configs = {(r["workload_id"], r["config"]) for r in records}
    assert len(records) == logged + 6 == len(configs)
