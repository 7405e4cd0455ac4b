"""`benchmarks/fleet.py --simulate N`: a fleet of N machines on this one, two drivers tuning the
same model at once into one database, to tell whether one driver and one database keep up.

The fleet is a local Ray cluster (`ray.cluster_utils.Cluster`) grown in steps to N nodes (N/4,
N/2, N). Each node offers two units of this host's device resource, and each driver takes one
per node (`RayOptions.devices_per_node`; a driver that took every unit would leave the other
waiting for it to finish). The devices' runner is a double: `SleepingRunner` holds its device for
`--kernel-ms` per candidate (default 150 ms: the default runner times 3 repeats of at least
40 ms each, plus a warm-up and the check against the reference; a kernel's own length hardly
matters), then reports a cost that is a fixed function of the config, so the tuners have
something to learn. Builds are a double too (`FakeBuilder`, in the driver: a few bytes written
per candidate) — what is measured is the driver (tuner, cost model, Ray dispatch), the database
(claims, others' records, commits) and Ray's dispatch to the devices, with no compiler.

Each driver is its own process running `autosched.api.tune` on the zoo MLP (the same model and
seed for both, so they propose the same configs and claims keep them apart), after a warm-up
batch that starts its device actors. Per step: trials per minute (both drivers' trials over the
longer of their tuning times), the driver's CPU time per trial (all it computes: proposals, cost
model fits, Ray's client, the database client), the wall time per trial spent in the database,
claims contended (configs the other driver held) and duplicate (task, target, config) records,
which must be 0. The database is a throwaway PostgreSQL server (the tests' `postgres_server.py`)
where this machine has the server binaries, else an SQLite file; the output says which.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from autosched.measure import Builder, BuildResult, ErrorKind, MeasureInput, MeasureResult  # noqa: E402
from autosched.measure.local import LocalRunner, RunnerOptions  # noqa: E402


class SleepingRunner(LocalRunner):
    """A device that holds each candidate for `kernel_s` (no worker process, nothing run)."""

    def __init__(self, kernel_s: float, options: RunnerOptions) -> None:
        self.kernel_s, self.options = kernel_s, options

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]:
        out = []
        for inp in inputs:
            time.sleep(self.kernel_s)
            digest = hashlib.sha256(f"{inp.task.key}/{inp.config.index}".encode()).digest()
            cost = 1e-4 * (1 + int.from_bytes(digest[:4], "little") / 2**32)
            out.append(MeasureResult((cost,) * 3, ErrorKind.NO_ERROR, "", 0.0, time.time()))
        return out

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class SleepingRunners:
    """The RunnerFactory of the device actors (picklable: it travels to the nodes)."""

    kernel_s: float

    def __call__(self, options: RunnerOptions) -> LocalRunner:
        return SleepingRunner(self.kernel_s, options)


class FakeBuilder(Builder):
    """Writes a few bytes and a manifest per candidate, as a build would leave them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        out = []
        for inp in inputs:
            name = hashlib.sha256(f"{inp.task.key}/{inp.config.index}".encode()).hexdigest()[:24]
            lib, manifest = self.directory / f"{name}.so", self.directory / f"{name}.json"
            lib.write_bytes(name.encode())
            manifest.write_text(json.dumps({"lib": str(lib)}))
            out.append(BuildResult(str(manifest), ErrorKind.NO_ERROR, "", 0.0))
        return out


# --- one driver (a process of its own) --------------------------------------------------------
def drive(address: str, db: str, model: str, trials: int, tuner: str, kernel_s: float, round_trials: int) -> dict:
    """Connect to the cluster, start every device actor, then tune `model` into `db`."""
    from autosched import fleet
    from autosched.api import tune
    from autosched.measure.ray import RayOptions, RayRunner
    from autosched.target import Target

    fleet.connect(address)
    target = Target.parse("llvm")
    options = RayOptions(cpu_runner=SleepingRunners(kernel_s), exclusive_timing=False, refresh_s=0.5,
                         devices_per_node=1)
    with tempfile.TemporaryDirectory(prefix="autosched-sim-") as tmp, RayRunner(options) as runner:
        builder = FakeBuilder(Path(tmp))
        devices = runner.start_devices(target, timeout=600.0)  # not timed: a fleet's actors start once
        print("ready", flush=True)
        sys.stdin.readline()  # both drivers start tuning together
        start, cpu = time.perf_counter(), time.process_time()
        out = tune(model, target, trials, db=db, tuner=tuner, round_trials=round_trials, builder=builder,
                   runner=runner)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    search = sum(p.tuner.search_s for p in out.summary.progress)
    return {"trials": out.summary.trials, "wall_s": wall, "driver_cpu_s": cpu, "search_s": search,
            "database_s": out.database_s, "contended": out.claims.contended, "measured": out.claims.measured,
            "devices": devices}


# --- the simulation ----------------------------------------------------------------------------
#: nodes when `--simulate` names none: what this project's 24 GiB machines, shared, can hold
DEFAULT_NODES = 16
#: resident memory measured here (Ray 2.60): per node (raylet, dashboard and runtime-env agents, two
#: device actors) and for the rest (GCS, head services, the drivers, the database server)
GIB_PER_NODE, GIB_FIXED = 0.45, 1.6


def check_memory(nodes: int) -> None:
    """Refuse, in one line, a simulation this machine has not the memory for (instead of
    starting it and leaving the kernel to pick what to kill)."""
    import psutil
    need, free = GIB_FIXED + GIB_PER_NODE * nodes, psutil.virtual_memory().available / 2**30
    if need > free:
        raise SystemExit(f"--simulate {nodes} needs about {need:.1f} GiB of memory ({GIB_PER_NODE} per node); "
                         f"{free:.1f} GiB is available here: simulate fewer nodes")


@contextlib.contextmanager
def databases(tmp: Path) -> Iterator[tuple[str, Callable[[str], str]]]:
    """(kind, new): `new(name)` makes an empty database of a throwaway PostgreSQL server, else
    an SQLite file (each step of the simulation gets its own: no step resumes another's)."""
    from postgres_server import NoServer, PostgresServer
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(PostgresServer.start())
        except NoServer:
            yield "sqlite", lambda name: str(tmp / f"{name}.db")
            return
        yield "postgresql", server.create_database


def memory_gib(root_pid: int) -> float:
    """Resident memory of this process and all its descendants (the cluster's processes)."""
    import psutil
    root = psutil.Process(root_pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total / 2**30


def duplicates(location: str) -> int:
    from sqlalchemy import text

    from autosched.database import Database
    with Database(location, read_only=True) as db, db.reading() as conn:
        return conn.execute(text("SELECT count(*) FROM (SELECT workload_id, target_id, config FROM records "
                                 "GROUP BY workload_id, target_id, config HAVING count(*) > 1) AS d")).scalar_one()


def step(address: str, location: str, model: Path, nodes: int, trials: int, tuner: str, kernel_s: float) -> dict:
    """Both drivers at once on a cluster of `nodes` nodes; their figures combined."""
    args = [address, location, str(model), str(trials), tuner, str(kernel_s), str(max(16, nodes))]
    procs = [subprocess.Popen([sys.executable, __file__, "--drive", *args], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:  # every actor of both drivers up
        if p.stdout is None or p.stdout.readline().strip() != "ready":
            raise SystemExit(f"a driver failed to start:\n{p.communicate()[1][-3000:]}")
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    peak = 0.0
    while any(p.poll() is None for p in procs):
        peak = max(peak, memory_gib(os.getpid()))
        time.sleep(1.0)
    runs = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"a driver failed (exit {p.returncode}):\n{err[-3000:]}")
        runs.append(json.loads(out.splitlines()[-1]))
    done = sum(r["trials"] for r in runs)
    return {"nodes": nodes, "devices_per_driver": runs[0]["devices"], "trials": done,
            "trials_per_minute": round(60 * done / max(r["wall_s"] for r in runs), 1),
            "driver_ms_per_trial": round(1e3 * sum(r["driver_cpu_s"] for r in runs) / done, 1),
            "search_ms_per_trial": round(1e3 * sum(r["search_s"] for r in runs) / done, 1),
            "database_ms_per_trial": round(1e3 * sum(r["database_s"] for r in runs) / done, 1),
            "claims_contended": sum(r["contended"] for r in runs),
            "measured_by_the_other": sum(r["measured"] for r in runs),
            "duplicates": duplicates(location), "memory_gib": round(peak, 2)}


def simulate(nodes: int, trials: int | None, tuner: str, kernel_ms: float, quick: bool) -> dict:
    import onnx
    from ray.cluster_utils import Cluster

    from autosched import fleet
    from autosched.backend import device_resource
    from autosched.target import Target
    from autosched.zoo import mlp

    steps = sorted({max(1, nodes // 4), max(1, nodes // 2), nodes}) if not quick else [nodes]
    target = Target.parse("llvm")
    # one device per driver; no CPUs: device actors take none and the builds run in the drivers, and
    # a node with CPUs keeps idle workers (memory) for tasks that never come
    node = {"num_cpus": 0, "resources": {device_resource(target): 2}}
    check_memory(nodes)
    with tempfile.TemporaryDirectory(prefix="autosched-sim-") as tmp_dir, databases(Path(tmp_dir)) as (kind, new_db):
        tmp = Path(tmp_dir)
        model = tmp / "mlp.onnx"
        onnx.save(mlp(), model)
        os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))  # a throwaway cluster's own token
        # 64 device actors' workers importing autosched at once on 2 cores take minutes to register:
        # more than Ray's 60 s, after which it gives up on them
        os.environ.setdefault("RAY_worker_register_timeout_seconds", "900")
        os.environ["XDG_CACHE_HOME"] = str(tmp / "cache")  # the nodes install the fake kernels there
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")])
        fleet.token_auth()
        started = time.perf_counter()
        cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
        rows = []
        try:
            for count in steps:
                while len(cluster.list_all_nodes()) < count:
                    cluster.add_node(**node)
                cluster.wait_for_nodes()
                if count == steps[0]:
                    setup_s = time.perf_counter() - started
                rows.append(step(cluster.address, new_db(f"fleet{count}"), model, count, trials or max(32, 8 * count),
                                 tuner, kernel_ms / 1e3))
        finally:
            cluster.shutdown()
    return {"database": kind, "tuner": tuner, "kernel_ms": kernel_ms, "cores": os.cpu_count(),
            "cluster_start_s": round(setup_s, 1), "steps": rows}


def show(out: dict) -> None:
    print(f"two drivers tuning the zoo MLP ({out['tuner']}) into one {out['database']} database; devices hold "
          f"each candidate {out['kernel_ms']:g} ms; builds faked; {out['cores']} cores host every node")
    print(f"{'nodes':>5} {'trials':>6} {'trials/min':>10} {'driver ms/trial':>15} {'(search)':>8} "
          f"{'db ms/trial':>11} {'contended':>9} {'duplicates':>10} {'memory GiB':>10}")
    for r in out["steps"]:
        print(f"{r['nodes']:>5} {r['trials']:>6} {r['trials_per_minute']:>10.1f} {r['driver_ms_per_trial']:>15.1f} "
              f"{r['search_ms_per_trial']:>8.1f} {r['database_ms_per_trial']:>11.1f} {r['claims_contended']:>9} "
              f"{r['duplicates']:>10} {r['memory_gib']:>10.2f}")


if __name__ == "__main__" and sys.argv[1:2] == ["--drive"]:
    address, location, model_path, n, tuner_name, kernel, rounds = sys.argv[2:9]
    print(json.dumps(drive(address, location, model_path, int(n), tuner_name, float(kernel), int(rounds))))
