"""Measurement on a Ray fleet: builds as Ray tasks, timings in one Ray actor per device.

The same seams as the local builder and runner (they are interchangeable, and mix): a build
runs as a Ray task on a node offering the target's toolchain resource and returns the
compiled library as bytes, so any node can time it; a `DeviceActor` owns one device (it holds
one unit of the device's resource, see `devices.py`) and times one candidate at a time in the
local runner's restartable worker process, so a crashing kernel costs one failed record and
the actor lives on. The driver keeps every build of a batch going while built candidates are
timed, re-sends the candidates of a device that vanished (node died, actor killed) to another
matching device, and records them as LOST after `max_attempts`. Nodes that join mid-run get
actors at the next refresh. Nothing outside this module imports ray.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import time
import uuid
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from autosched.codegen.gcc import default_cache_dir
from autosched.measure.devices import FleetError, device_resource, toolchain_resource
from autosched.measure.interface import Builder, PipelinedRunner, build_then_run
from autosched.measure.local import Instantiate, LocalRunner, RunnerOptions, _build_one, instantiate_from_template
from autosched.measure.record import BuildResult, ErrorKind, MeasureInput, MeasureResult

#: Ray namespace of the device actors, so `autosched fleet status` finds every driver's
FLEET_NAMESPACE = "autosched"
ACTOR_PREFIX = "autosched-device-"


@dataclass(frozen=True)
class BuiltKernel:
    """A compiled candidate that travels between nodes: the library's bytes and what the
    worker needs to call it (the manifest of `local._build_one`, minus its local path)."""

    lib: bytes
    symbol: str
    params: tuple[dict, ...]
    folded: tuple[tuple[bytes, dict], ...] = ()  # precomputed stages' kernels: (library, manifest entry)

    @classmethod
    def from_manifest(cls, path: str) -> BuiltKernel:
        manifest = json.loads(Path(path).read_text())
        folded = tuple((Path(f["lib"]).read_bytes(), f) for f in manifest.get("folded", ()))
        return cls(Path(manifest["lib"]).read_bytes(), manifest["symbol"], tuple(manifest["params"]), folded)

    def install(self) -> str:
        """Write the library (named by its digest: identical builds share one file), those of
        its precomputed stages, and its manifest into this machine's kernel cache; the
        manifest's path is the artifact a runner takes."""
        directory = default_cache_dir() / "from-fleet"
        directory.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(self.lib).hexdigest()[:32]
        lib, manifest = directory / f"{digest}.so", directory / f"{digest}.json"
        if not manifest.exists():  # written whole under a private name first: nodes' actors share the cache
            folded = []
            for data, entry in self.folded:
                path = directory / f"{hashlib.sha256(data).hexdigest()[:32]}.so"
                _write_atomically(path, data)
                folded.append({**entry, "lib": str(path)})
            fields = {"lib": str(lib), "symbol": self.symbol, "params": list(self.params)}
            _write_atomically(lib, self.lib)
            _write_atomically(manifest, json.dumps({**fields, **({"folded": folded} if folded else {})}).encode())
        return str(manifest)


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _build_remote(inp: MeasureInput, instantiate: Instantiate, timeout: float) -> tuple[BuildResult, BuiltKernel | None]:
    """One build on whichever node Ray chose, in that node's kernel cache."""
    res = _build_one(inp, instantiate, None, timeout)
    kernel = BuiltKernel.from_manifest(res.artifact) if res.ok else None
    return replace(res, artifact=None), kernel


@dataclass(frozen=True)
class RayOptions:
    """How the fleet is used. `build_slots` is the toolchain resource one build holds;
    `max_attempts` how many devices a candidate is sent to before it is recorded LOST;
    `device_wait` how long a candidate waits when no node has its device at all."""

    runner: RunnerOptions | None = None  # None: each node's defaults (its own core count)
    instantiate: Instantiate = instantiate_from_template
    build_timeout: float = 60.0
    build_retries: int = 3
    max_attempts: int = 3
    device_wait: float = 60.0
    refresh_s: float = 1.0  # how often the driver looks for joined and departed nodes


def _lost_build(e: Exception) -> BuildResult:
    """A build whose task Ray could not finish (its node left more often than it retries)."""
    return BuildResult(None, ErrorKind.LOST, f"the build was lost: {type(e).__name__}: {str(e).splitlines()[0]}", 0.0)


@functools.lru_cache(maxsize=None)
def _remote(fn_or_class: Any) -> Any:
    """The Ray wrapper of a function or actor class, made once per process (each wrapper
    is exported to the cluster again)."""
    return ray.remote(fn_or_class)


def require_ray() -> None:
    if not ray.is_initialized():
        raise FleetError("not connected to a Ray fleet: call autosched.fleet.connect(address) first")


class RayBuilder(Builder):
    """Builds as Ray tasks in the build slots of the target's toolchain, on any node
    (`devices.toolchain_resource` says which nodes can build for which target)."""

    def __init__(self, options: RayOptions = RayOptions()):
        self.options = options

    def submit(self, inputs: Sequence[MeasureInput]) -> list[tuple[Any, Any]]:
        """Start every build; (result ref, kernel ref) per input, in order."""
        require_ray()
        build = _remote(_build_remote)
        o = self.options
        return [tuple(build.options(num_cpus=1, num_returns=2, max_retries=o.build_retries,
                                    resources={toolchain_resource(inp.target): 1})
                      .remote(inp, o.instantiate, o.build_timeout)) for inp in inputs]

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        """Built libraries land in a local directory, for a runner on this machine."""
        out = []
        for res_ref, kernel_ref in self.submit(inputs):
            try:
                res, kernel = ray.get(res_ref), ray.get(kernel_ref)
            except ray.exceptions.RayError as e:
                out.append(_lost_build(e))
                continue
            out.append(replace(res, artifact=kernel.install()) if res.ok else res)
        return out


class DeviceActor:
    """Owns one device of its node: times candidates one at a time in a local runner's
    restartable worker. Threaded (two calls at once) only so that `describe` answers while
    a measurement runs; the driver never sends a second measurement before the first returns."""

    def __init__(self, resource: str, options: RunnerOptions | None):
        self.resource = resource
        self.node_id = ray.get_runtime_context().get_node_id()
        self.node = f"{socket.gethostname()}/{self.node_id[:12]}"
        self.runner = LocalRunner(options or RunnerOptions())
        self.current: dict | None = None

    def ready(self) -> str:
        return self.node

    def measure(self, inp: MeasureInput, build: BuildResult, kernel: BuiltKernel) -> MeasureResult:
        self.current = {"task": inp.task.key, "config": inp.config.index, "since": time.time()}
        try:
            artifact = kernel.install()
            (res,) = self.runner.run([inp], [replace(build, artifact=artifact)])
            return replace(res, node=self.node)
        finally:
            self.current = None

    def describe(self) -> dict:
        return {"node_id": self.node_id, "node": self.node, "resource": self.resource, "measuring": self.current}


@dataclass
class _Actor:
    handle: Any
    node_id: str
    resource: str
    ready_ref: Any
    ready: bool = False
    busy: bool = False


@dataclass
class _Job:
    index: int
    inp: MeasureInput
    build: BuildResult
    kernel: Any  # ObjectRef of a BuiltKernel
    attempts: int = 0
    errors: list[str] = field(default_factory=list)


class RayRunner(PipelinedRunner):
    """Times candidates on every matching device of the fleet at once, one per device."""

    def __init__(self, options: RayOptions = RayOptions()):
        self.options = options
        self._actors: list[_Actor] = []
        self._last_refresh = 0.0

    # --- devices ----------------------------------------------------------------------------
    def _refresh(self, resources: set[str], force: bool = False) -> None:
        """Start actors for device units not yet held (joined nodes, restarted actors) and
        forget those on nodes that left."""
        if not force and time.monotonic() - self._last_refresh < self.options.refresh_s:
            return
        self._last_refresh = time.monotonic()
        alive = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
        for a in [a for a in self._actors if a.node_id not in alive]:
            self._drop(a)
        actor_cls = _remote(DeviceActor)
        for node_id, offered in alive.items():
            for resource in resources:
                have = sum(1 for a in self._actors if a.node_id == node_id and a.resource == resource)
                for _ in range(int(offered.get(resource, 0)) - have):
                    handle = actor_cls.options(
                        name=f"{ACTOR_PREFIX}{uuid.uuid4().hex[:12]}", namespace=FLEET_NAMESPACE, num_cpus=0,
                        resources={resource: 1}, max_concurrency=2, max_restarts=0,
                        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                    ).remote(resource, self.options.runner)
                    self._actors.append(_Actor(handle, node_id, resource, handle.ready.remote()))

    def _drop(self, actor: _Actor) -> None:
        self._actors.remove(actor)
        ray.kill(actor.handle, no_restart=True)

    def close(self) -> None:
        for a in list(self._actors):
            self._drop(a)

    def __enter__(self) -> RayRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- measuring ----------------------------------------------------------------------------
    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]:
        """Time candidates built elsewhere (e.g. by a LocalBuilder): their libraries travel as bytes."""
        require_ray()
        jobs = [_Job(i, inp, b, ray.put(BuiltKernel.from_manifest(b.artifact)))
                for i, (inp, b) in enumerate(zip(inputs, builds))]
        return self._drive(inputs, deque(jobs), {})

    def measure(self, builder: Builder, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        if not isinstance(builder, RayBuilder):  # nothing to overlap with
            return build_then_run(builder, self, inputs)
        building = {res: (i, kernel) for i, (res, kernel) in enumerate(builder.submit(inputs))}
        return self._drive(inputs, deque(), building)

    def _drive(self, inputs: Sequence[MeasureInput], ready: deque[_Job], building: dict) -> list[MeasureResult]:
        """Until every input has a result: hand ready jobs to idle devices, and collect
        finished builds, started actors and finished measurements as they come."""
        results: list[MeasureResult | None] = [None] * len(inputs)
        resources = {device_resource(inp.target) for inp in inputs}
        self._refresh(resources, force=True)
        running: dict[Any, tuple[_Job, _Actor]] = {}
        waiting_since: float | None = None
        while any(r is None for r in results):
            self._refresh(resources)
            waiting_since = self._dispatch(ready, running, results, waiting_since)
            starting = {a.ready_ref: a for a in self._actors if not a.ready}
            refs = [*building, *running, *starting]
            if not refs:
                time.sleep(self.options.refresh_s / 4)
                continue
            done, _ = ray.wait(refs, num_returns=1, timeout=self.options.refresh_s)
            for ref in done:
                if ref in building:
                    self._collect_build(ref, building.pop(ref), inputs, ready, results)
                elif ref in running:
                    self._collect_run(ref, *running.pop(ref), ready, results)
                else:
                    self._collect_ready(starting[ref])
        return results  # type: ignore[return-value]

    def _dispatch(self, ready: deque[_Job], running: dict, results: list, waiting_since: float | None) -> float | None:
        """Send each ready job to an idle started actor of its device; record LOST the jobs
        whose device no node has offered for `device_wait` seconds. Returns when that wait began."""
        stranded = []
        for _ in range(len(ready)):
            job = ready.popleft()
            resource = device_resource(job.inp.target)
            actor = next((a for a in self._actors if a.resource == resource and a.ready and not a.busy), None)
            if actor is None:
                ready.append(job)
                if not any(a.resource == resource for a in self._actors):
                    stranded.append(job)
                continue
            actor.busy = True
            job.attempts += 1
            running[actor.handle.measure.remote(job.inp, job.build, job.kernel)] = (job, actor)
        if not stranded:
            return None
        waiting_since = waiting_since or time.monotonic()
        if time.monotonic() - waiting_since >= self.options.device_wait:
            for job in stranded:
                ready.remove(job)
                job.errors.append(f"no node offered {device_resource(job.inp.target)} for "
                                  f"{self.options.device_wait:.0f} s")
                results[job.index] = self._lost(job)
            return None
        return waiting_since

    def _collect_build(self, ref: Any, entry: tuple[int, Any], inputs: Sequence[MeasureInput], ready: deque[_Job],
                       results: list) -> None:
        index, kernel = entry
        try:
            build = ray.get(ref)
        except ray.exceptions.RayError as e:
            build = _lost_build(e)
            results[index] = MeasureResult.failure(build.error_kind, build.error_msg, build.build_s, time.time())
            return
        if build.ok:
            ready.append(_Job(index, inputs[index], build, kernel))
        else:
            results[index] = MeasureResult.failure(build.error_kind, build.error_msg, build.build_s, time.time())

    def _collect_run(self, ref: Any, job: _Job, actor: _Actor, ready: deque[_Job], results: list) -> None:
        try:
            results[job.index] = ray.get(ref)
            actor.busy = False
            return
        except ray.exceptions.RayTaskError as e:  # the actor raised: a bug of ours, not of the device
            actor.busy = False
            results[job.index] = MeasureResult.failure(ErrorKind.RUNTIME_ERROR, f"device actor failed: {e}",
                                                       job.build.build_s, time.time())
            return
        except ray.exceptions.RayError as e:  # the actor or its node is gone
            job.errors.append(f"{type(e).__name__} on node {actor.node_id[:12]}")
            if actor in self._actors:
                self._drop(actor)
        if job.attempts >= self.options.max_attempts:
            results[job.index] = self._lost(job)
        else:
            ready.append(job)

    def _collect_ready(self, actor: _Actor) -> None:
        try:
            ray.get(actor.ready_ref)
            actor.ready = True
        except ray.exceptions.RayError:  # its node left before it started
            self._drop(actor)

    @staticmethod
    def _lost(job: _Job) -> MeasureResult:
        return MeasureResult.failure(ErrorKind.LOST, f"lost after {job.attempts} attempt(s): {'; '.join(job.errors)}",
                                     job.build.build_s, time.time())
