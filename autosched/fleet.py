"""A fleet of measuring machines on Ray: start a head or a worker node, connect, look, stop.

Each node is a `ray start --block` process this module starts in its own session and records
in a pid file under the user's cache directory, so `stop_nodes` ends exactly the nodes
`autosched fleet head/worker` started on this machine and nothing else. A node advertises the
resources `measure.devices.detect_resources` finds (its CPU ISA class, its GPUs, its
toolchains), which is how the Ray runner routes a candidate to matching hardware.

Token authentication is always on: every node and driver runs with RAY_AUTH_MODE=token (Ray
2.60 turns it on by itself only for `address="auto"`), so a fleet is never open without a
token. The token is RAY_AUTH_TOKEN, or the file RAY_AUTH_TOKEN_PATH names, or Ray's
~/.ray/auth_token, which `fleet head` creates when none exists; workers and drivers on other
machines need the same token. Ray 2.60 listens on every interface whatever `host` says (`ray
start` rewrites a loopback --node-ip-address to the machine's address; the one mode that keeps
it, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, refuses worker nodes): `host` is the address a node is
reached at, the token is what keeps strangers out. The README lists which ports stay open where.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosched.measure.devices import PREFIX, FleetError, detect_resources

if TYPE_CHECKING:
    from autosched.target import Target

DEFAULT_PORT = 6379
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class NodeProcess:
    """A node this machine started: the pid of its `ray start --block` process (also its
    process group), its role, the head's address and its log file."""

    pid: int
    role: str
    address: str
    log: str
    resources: dict[str, float]


def state_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "autosched" / "fleet"


def token_auth() -> None:
    """Turn Ray's token authentication on for this process and the nodes it starts.

    Ray reads RAY_AUTH_MODE into its C++ config once, when `ray` is first imported, and this
    process may have imported it already (autosched.measure.ray does): Ray 2.60 has no public
    call that re-reads it, so the private `Config.initialize` stays until one exists."""
    os.environ["RAY_AUTH_MODE"] = "token"
    from ray._raylet import Config  # type: ignore[attr-defined]  # private, absent from ray's _raylet stub
    Config.initialize("")


def token_source() -> str | None:
    """Where Ray will take its auth token from, by the precedence Ray documents: RAY_AUTH_TOKEN,
    else the file RAY_AUTH_TOKEN_PATH names, else ~/.ray/auth_token; None where there is none."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        return str(path) if path.read_text().strip() else None
    except OSError:
        return None


def _require_token(create: bool) -> None:
    """Fail with one line where there is no token; with `create`, have Ray write one (its
    documented `ray get-auth-token --generate`; the token it prints stays in the pipe)."""
    if token_source() is not None:
        return
    if not create:
        raise FleetError("no Ray auth token: set RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to the head's token, "
                         "or copy the head machine's ~/.ray/auth_token here")
    made = subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "get-auth-token", "--generate"],
                          capture_output=True, text=True)
    if made.returncode != 0 or token_source() is None:
        raise FleetError(f"Ray could not create an auth token: {made.stderr.strip().splitlines()[-1:]}")


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Ray's C++ client logs a warning line per failed attempt on fd 2: a user who gave a
    wrong token should read one line, ours."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _reachable(address: str) -> None:
    """One line when nothing listens at HOST:PORT: a wrong address is that, whether or not this
    machine has a token."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise FleetError(f"{address!r} is not a Ray head's HOST:PORT (e.g. 10.0.0.5:{DEFAULT_PORT}) or 'auto'")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as e:
        raise FleetError(f"no Ray head answers at {address}: {e.strerror or e}") from None


def probe(address: str) -> None:
    """Check in milliseconds that a head answers at HOST:PORT and accepts our token
    (`ray.init` would retry a wrong token for 20 s before a vague ConnectionError). Ray 2.60 has
    no public client that asks a head one question: the private GcsClient stays until one exists."""
    _reachable(address)
    token_auth()
    _require_token(create=False)
    import ray._raylet
    from ray.exceptions import AuthenticationError
    try:
        with _quiet_stderr():
            client = ray._raylet.GcsClient(address=address)  # type: ignore[attr-defined]  # private, absent from the stub
            client.internal_kv_get(b"autosched-probe", None, timeout=5)
    except AuthenticationError:
        raise FleetError(f"the Ray head at {address} refused our auth token: use the head's token "
                         "(RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)") from None
    except Exception as e:  # noqa: BLE001 - whatever the GCS client raises, the head is not usable
        raise FleetError(f"no Ray head answers at {address}: {type(e).__name__}: {str(e).splitlines()[0]}") from None


def connect(address: str = "auto") -> None:
    """Join the fleet at `address` ("auto": the head started on this machine) as a driver."""
    import ray

    from autosched.measure.ray import FLEET_NAMESPACE
    if ray.is_initialized():
        return
    token_auth()
    if address != "auto":
        probe(address)
    try:
        ray.init(address=address, namespace=FLEET_NAMESPACE, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, ray.exceptions.RayError, RuntimeError) as e:
        raise FleetError(f"cannot join the Ray fleet at {address}: {str(e).splitlines()[0]}") from None


def disconnect() -> None:
    import ray
    ray.shutdown()


def _start(role: str, args: list[str], address: str, resources: dict[str, float]) -> NodeProcess:
    """Run `ray start --block` in its own session, return once the node is up."""
    state_dir().mkdir(parents=True, exist_ok=True)
    log = state_dir() / f"{role}-{time.time_ns()}.log"
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", "--disable-usage-stats",
           f"--resources={json.dumps(resources)}", *args]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    node = NodeProcess(proc.pid, role, address, str(log), resources)
    deadline = time.monotonic() + START_TIMEOUT_S
    while "Ray runtime started" not in Path(log).read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            _kill(proc.pid)
            tail = Path(log).read_text().strip().splitlines()[-1:] or ["no output"]
            raise FleetError(f"the Ray {role} did not start (log {log}): {tail[0]}")
        time.sleep(0.2)
    (state_dir() / f"{proc.pid}.json").write_text(json.dumps(asdict(node)))
    return node


def start_head(port: int = DEFAULT_PORT, host: str = "127.0.0.1", build_slots: int | None = None) -> NodeProcess:
    """A head node at HOST:PORT that also offers this machine's devices."""
    token_auth()
    _require_token(create=True)
    args = ["--head", f"--port={port}", f"--node-ip-address={host}", "--include-dashboard=false"]
    return _start("head", args, f"{host}:{port}", detect_resources(build_slots))


def start_worker(address: str, host: str | None = None, build_slots: int | None = None,
                 resources: dict[str, float] | None = None) -> NodeProcess:
    """A worker node joined to the head at `address`, offering `resources` (default: the
    devices and toolchains detected here)."""
    probe(address)
    args = [f"--address={address}"] + ([f"--node-ip-address={host}"] if host else [])
    return _start("worker", args, address, resources if resources is not None else detect_resources(build_slots))


def _kill(pid: int) -> None:
    """SIGTERM lets `ray start --block` stop its node's processes; whatever is left of its
    process group after a grace period is killed."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def started_nodes() -> list[NodeProcess]:
    """The nodes `fleet head/worker` started on this machine and still running."""
    nodes = []
    for f in sorted(state_dir().glob("*.json")) if state_dir().exists() else []:
        node = NodeProcess(**json.loads(f.read_text()))
        try:
            os.kill(node.pid, 0)
            nodes.append(node)
        except ProcessLookupError:
            f.unlink(missing_ok=True)
    return nodes


def stop_nodes() -> list[NodeProcess]:
    """Stop the nodes started on this machine, workers before heads."""
    nodes = sorted(started_nodes(), key=lambda n: n.role == "head")
    for node in nodes:
        _kill(node.pid)
        (state_dir() / f"{node.pid}.json").unlink(missing_ok=True)
    return nodes


def fleet_status() -> dict[str, Any]:
    """One object with a `nodes` list: each node's address, resources and what its device
    actors are measuring now (the driver must be connected)."""
    import ray

    from autosched.measure.ray import ACTOR_PREFIX
    nodes = {n["NodeID"]: {"node_id": n["NodeID"], "address": n["NodeManagerAddress"], "alive": n["Alive"],
                           "resources": {k: v for k, v in n["Resources"].items()
                                         if k.startswith(PREFIX) or k in ("CPU", "GPU")},
                           "measuring": []}
             for n in ray.nodes()}
    described = []
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["name"].startswith(ACTOR_PREFIX):
            with contextlib.suppress(ValueError, ray.exceptions.RayError):
                described.append(ray.get_actor(entry["name"], namespace=entry["namespace"]).describe.remote())
    answered, _ = ray.wait(described, num_returns=len(described), timeout=5)  # the dead never answer
    for ref in answered:
        with contextlib.suppress(ray.exceptions.RayError):
            actor = ray.get(ref)
            if actor["node_id"] in nodes and actor["measuring"]:
                nodes[actor["node_id"]]["measuring"].append({"resource": actor["resource"], **actor["measuring"]})
    return {"nodes": sorted(nodes.values(), key=lambda n: (not n["alive"], n["address"], n["node_id"]))}


def format_status(status: dict[str, Any]) -> str:
    """`fleet_status` as one line per node and one per measurement in progress."""
    lines = []
    for n in status["nodes"]:
        devices = ", ".join(f"{k}={v:g}" for k, v in sorted(n["resources"].items()))
        lines.append(f"{n['node_id'][:12]}  {n['address']:<15} {'alive' if n['alive'] else 'dead ':<5}  {devices}")
        lines += [f"    measuring {m['task']} config {m['config']} on {m['resource']}" for m in n["measuring"]]
    return "\n".join(lines) or "no nodes"


def fleet_measurers(address: str, target: Target, emulate: bool = False) -> tuple[Any, Any]:
    """A Ray builder and runner on the fleet at `address` for `target`'s back end (with
    `emulate`, its CPU emulation), for `tune --ray-address`: CPU targets on the nodes of their
    ISA class, cuda targets built by nvcc nodes and timed by GPU actors of their arch, emulated
    ones built and checked on CPU nodes of this machine's ISA class."""
    from autosched.backend import backend_for
    backend_for(target, emulate)  # a target the back ends refuse is refused before connecting
    connect(address)
    from autosched.measure.ray import RayBuilder, RayOptions, RayRunner
    options = RayOptions(emulate=emulate)
    return RayBuilder(options), RayRunner(options)
