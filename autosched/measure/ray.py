"""Measurement on a Ray fleet: builds as Ray tasks, timings in one Ray actor per device.

The same seams as the local builder and runner (they are interchangeable, and mix): a build
runs as a Ray task on a node offering the target's toolchain resource (gcc of its ISA class, or
nvcc) and returns the compiled binary as bytes, so any node can time it; a `DeviceActor` owns
one device (it holds one unit of the device's resource, see `devices.py`, and for a GPU one of
Ray's GPUs) and times one candidate at a time in its runner's restartable worker process (the
CPU worker, or the GPU worker), so a crashing kernel costs one failed record and the actor
lives on. Which build, resources and runner a target gets is its back end's record
(`autosched.backend`). The driver takes batches by ticket: every build of every submitted batch
goes on while built candidates are timed, oldest batch first, so the next batch builds while the
current one runs; on one node, builds wait while its CPU device times a candidate and timings wait for
its builds (`nodelock.py`), so only other nodes' builds overlap a timing. It re-sends the
candidates of a device that vanished (node died, actor killed) to another matching device, and
records them as LOST after `max_attempts`. Nodes that join mid-run get actors at the next
refresh. Of the measurement modules, only this one imports ray.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from autosched.backend import Backend, RunnerFactory, backend_for
from autosched.codegen.gcc import default_cache_dir
from autosched.measure.devices import FleetError
from autosched.measure.interface import Builder, PipelinedRunner, check_count
from autosched.measure.local import Instantiate, RunnerOptions, instantiate_from_template
from autosched.measure.nodelock import NodeLock
from autosched.measure.record import BuildResult, ErrorKind, MeasureInput, MeasureResult
from autosched.target import Target

#: Ray namespace of the device actors, so `autosched fleet status` finds every driver's
FLEET_NAMESPACE = "autosched"
ACTOR_PREFIX = "autosched-device-"

#: (input, instantiate, cache dir, timeout) -> BuildResult: a back end's `builder.build_one`
BuildOne = Callable[[MeasureInput, Instantiate, "str | None", float], BuildResult]


@dataclass(frozen=True)
class BuiltKernel:
    """A compiled candidate that travels between nodes: its binary's bytes (a gcc library or
    an nvcc cubin, named in the manifest by `kind`) and the rest of the manifest a worker needs
    to call it (symbol, parameters, launch geometry), minus local paths."""

    binary: bytes
    kind: str  # the manifest's key for the binary: "lib" (gcc) or "cubin" (nvcc)
    fields: dict
    folded: tuple[tuple[bytes, dict], ...] = ()  # precomputed stages' kernels: (library, manifest entry)

    @classmethod
    def from_manifest(cls, path: str) -> BuiltKernel:
        manifest = json.loads(Path(path).read_text())
        kind = "cubin" if "cubin" in manifest else "lib"
        folded = tuple((Path(f["lib"]).read_bytes(), f) for f in manifest.pop("folded", ()))
        return cls(Path(manifest.pop(kind)).read_bytes(), kind, manifest, folded)

    def install(self) -> str:
        """Write the binary (named by its digest: identical builds share one file), those of
        its precomputed stages, and its manifest into this machine's kernel cache; the
        manifest's path is the artifact a runner takes."""
        directory = default_cache_dir() / "from-fleet"
        directory.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(self.binary).hexdigest()[:32]
        binary = directory / f"{digest}.{'cubin' if self.kind == 'cubin' else 'so'}"
        manifest = directory / f"{digest}.json"
        if not manifest.exists():  # written whole under a private name first: nodes' actors share the cache
            folded = []
            for data, entry in self.folded:
                path = directory / f"{hashlib.sha256(data).hexdigest()[:32]}.so"
                _write_atomically(path, data)
                folded.append({**entry, "lib": str(path)})
            _write_atomically(binary, self.binary)
            fields = {**self.fields, self.kind: str(binary), **({"folded": folded} if folded else {})}
            _write_atomically(manifest, json.dumps(fields).encode())
        return str(manifest)


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _this_node(exclusive_timing: bool) -> NodeLock | None:
    """This process's node's lock, where timings exclude builds."""
    if not exclusive_timing:
        return None
    context = ray.get_runtime_context()
    return NodeLock(context.get_node_id(), Path(context.get_temp_dir()) / context.get_session_name() / "autosched-node-locks")


def _while_building(lock: NodeLock | None) -> AbstractContextManager:
    """The node's lock shared for a build, or nothing where timings do not exclude builds."""
    return lock.building() if lock else nullcontext()


def _manifest(build: BuildResult) -> str:
    """A successful build's manifest: the fleet ships built kernels, so its builders must make
    files (a NullBuilder's "nothing to build" cannot run on it)."""
    if build.artifact is None:
        raise ValueError("a successful build left no artifact for the fleet to time")
    return build.artifact


def _build_remote(inp: MeasureInput, build_one: BuildOne, instantiate: Instantiate,
                  timeout: float, exclusive_timing: bool) -> tuple[BuildResult, BuiltKernel | None]:
    """One build on whichever node Ray chose, in that node's kernel cache, never while that
    node's device times a candidate (the whole build: lowering holds a core as gcc does)."""
    with _while_building(_this_node(exclusive_timing)):
        res = build_one(inp, instantiate, None, timeout)
    kernel = BuiltKernel.from_manifest(_manifest(res)) if res.ok else None
    return replace(res, artifact=None), kernel


@dataclass(frozen=True)
class RayOptions:
    """How the fleet is used. `build_slots` is the toolchain resource one build holds;
    `max_attempts` how many devices a candidate is sent to before it is recorded LOST;
    `device_wait` how long a candidate waits when no node has its device at all."""

    runner: RunnerOptions | None = None  # None: the back end's, else each node's defaults (its own core count)
    instantiate: Instantiate = instantiate_from_template
    build_timeout: float = 60.0
    build_retries: int = 3
    max_attempts: int = 3
    device_wait: float = 60.0
    refresh_s: float = 1.0  # how often the driver looks for joined and departed nodes
    emulate: bool = False  # cuda targets: build and check the CPU emulation on CPU nodes (costs are the static model's)
    gpu_runner: RunnerFactory | None = None  # what a GPU actor times with (None: the back end's; tests pass a double)
    cpu_runner: RunnerFactory | None = None  # what a CPU actor times with (None: the back end's; tests note when)
    exclusive_timing: bool = True  # no build on a node while its CPU device times a candidate (nodelock.py)
    # at most this many of a node's units of a device for this driver (None: all): drivers sharing a
    # fleet split its devices, else the first to start holds them all and the others wait for it
    devices_per_node: int | None = None

    def backend(self, target: Target) -> Backend:
        """The back end of `target` (with `emulate`, its CPU emulation: built by gcc and run by the
        CPU worker on a node of the driver's own ISA class, for which the emulation is built)."""
        return backend_for(target, self.emulate)

    def device_runner(self, backend: Backend) -> RunnerFactory:
        """What a device actor of `backend` times with: this fleet's GPU or CPU runner where one
        is given (tests), else the back end's."""
        return (self.cpu_runner if backend.on_host else self.gpu_runner) or backend.runner

    def runner_options(self, backend: Backend) -> RunnerOptions | None:
        """How a device actor times: these options where given, else the back end's defaults."""
        return self.runner or backend.runner_options


def _lost_build(e: Exception) -> BuildResult:
    """A build whose task Ray could not finish (its node left more often than it retries)."""
    return BuildResult(None, ErrorKind.LOST, f"the build was lost: {type(e).__name__}: {str(e).splitlines()[0]}", 0.0)


@functools.cache
def _remote(fn_or_class: Any) -> Any:
    """The Ray wrapper of a function or actor class, made once per process (each wrapper
    is exported to the cluster again)."""
    return ray.remote(fn_or_class)


def require_ray() -> None:
    if not ray.is_initialized():
        raise FleetError("not connected to a Ray fleet: call autosched.fleet.connect(address) first")


class RayBuilder(Builder):
    """Builds as Ray tasks in the build slots of the target's toolchain (gcc for CPU targets and
    the CUDA emulation, nvcc for cuda), on any node offering it: a node without nvcc never gets
    a cuda build (`RayOptions.backend` says which resource each target needs)."""

    def __init__(self, options: RayOptions = RayOptions()):
        self.options = options

    def submit(self, inputs: Sequence[MeasureInput]) -> list[tuple[Any, Any]]:
        """Start every build; (result ref, kernel ref) per input, in order."""
        require_ray()
        build = _remote(_build_remote)
        o = self.options
        out = []
        for inp in inputs:
            backend = o.backend(inp.target)
            out.append(tuple(build.options(num_cpus=1, num_returns=2, max_retries=o.build_retries,
                                           resources={backend.toolchain(inp.target): 1})
                             .remote(inp, backend.builder.build_one, o.instantiate, o.build_timeout,
                                     o.exclusive_timing)))
        return out

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
    """Owns one device of its node (a CPU, or the GPU Ray gave it): times candidates one at a
    time in its runner's restartable worker (the CPU worker, or the GPU worker); a CPU actor
    holds its node's lock meanwhile, so that no build runs on the node. Threaded (two calls at once) only
    so that `describe` answers while a measurement runs; the driver never sends a second
    measurement before the first returns."""

    def __init__(self, resource: str, runner: RunnerFactory, options: RunnerOptions | None, exclusive_timing: bool):
        self.resource = resource
        self.node_id = ray.get_runtime_context().get_node_id()
        self.lock = _this_node(exclusive_timing)
        self.node = f"{socket.gethostname()}/{self.node_id[:12]}"
        self.runner = runner(options or RunnerOptions())
        self.current: dict | None = None

    def ready(self) -> str:
        return self.node

    def measure(self, inp: MeasureInput, build: BuildResult, kernel: BuiltKernel) -> MeasureResult:
        artifact = kernel.install()
        self.current = {"task": inp.task.key, "config": inp.config.index, "since": time.time()}
        try:
            with self.lock.timing() if self.lock else nullcontext():
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
    batch: int
    index: int
    inp: MeasureInput
    build: BuildResult
    kernel: Any  # ObjectRef of a BuiltKernel
    attempts: int = 0
    errors: list[str] = field(default_factory=list)


class RayRunner(PipelinedRunner):
    """Times candidates on every matching device of the fleet at once, one per device.

    Batches are submitted (their builds start at once) and waited for by ticket; while the
    driver waits for one batch, the builds of those submitted after it go on, and their built
    candidates reach the devices as soon as the earlier batches' leave them idle."""

    def __init__(self, options: RayOptions = RayOptions()):
        self.options = options
        self._actors: list[_Actor] = []
        self._last_refresh = 0.0
        self._backends: dict[str, Backend] = {}  # device resource -> backend, of every target submitted
        self._tickets = itertools.count()  # never reused: a ticket names one batch for the runner's life
        self._batches: dict[int, list[MeasureResult | None]] = {}
        self._building: dict[Any, tuple[int, int, MeasureInput, Any]] = {}  # ref -> (batch, index, input, kernel)
        self._ready: list[_Job] = []
        self._running: dict[Any, tuple[_Job, _Actor]] = {}
        self._waiting_since: float | None = None
        self._unusable: dict[tuple[str, str], str] = {}  # (node, device) whose runner failed to start -> why

    def time_in(self, caches: str) -> bool:
        """The fleet's actors time in cache mode `caches`: only before the first starts (an actor
        keeps the options it was made with), each with its own node's cores unless the options
        name a thread count."""
        now = self.options.runner.caches if self.options.runner else "warm"
        if self._actors or caches == now:
            return caches == now
        base = self.options.runner or RunnerOptions(threads=0)
        self.options = replace(self.options, runner=replace(base, caches=caches))
        return True

    # --- devices ----------------------------------------------------------------------------
    def _refresh(self, force: bool = False) -> None:
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
            for resource, backend in self._backends.items():
                if (node_id, resource) in self._unusable:
                    continue
                have = sum(1 for a in self._actors if a.node_id == node_id and a.resource == resource)
                units = int(offered.get(resource, 0))
                cap = units if self.options.devices_per_node is None else min(units, self.options.devices_per_node)
                for _ in range(cap - have):
                    handle = actor_cls.options(
                        name=f"{ACTOR_PREFIX}{uuid.uuid4().hex[:12]}", namespace=FLEET_NAMESPACE, num_cpus=0,
                        num_gpus=backend.gpus, resources={resource: 1}, max_concurrency=2, max_restarts=0,
                        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                    ).remote(resource, self.options.device_runner(backend), self.options.runner_options(backend),
                             self.options.exclusive_timing and backend.on_host)
                    self._actors.append(_Actor(handle, node_id, resource, handle.ready.remote()))

    def _drop(self, actor: _Actor) -> None:
        self._actors.remove(actor)
        ray.kill(actor.handle, no_restart=True)

    def close(self) -> None:
        for a in list(self._actors):
            self._drop(a)

    def start_devices(self, target: Target, timeout: float = 120.0) -> int:
        """Start an actor on every device of `target` the fleet offers now and wait (up to
        `timeout` seconds) until they are up: measurements that follow find every device ready
        (a benchmark's timings then leave out the actors' start). Returns how many are up."""
        require_ray()
        backend = self.options.backend(target)
        self._backends[backend.device(target)] = backend
        self._refresh(force=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (starting := {a.ready_ref: a for a in self._actors if not a.ready}):
            done, _ = ray.wait(list(starting), num_returns=1, timeout=min(self.options.refresh_s,
                                                                          max(0.0, deadline - time.monotonic())))
            for ref in done:
                self._collect_ready(starting[ref])
            self._refresh()  # in place of an actor that could not start (its worker failed to come up)
        return sum(1 for a in self._actors if a.ready)

    def __enter__(self) -> RayRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- batches ------------------------------------------------------------------------------
    def _open(self, inputs: Sequence[MeasureInput]) -> int:
        require_ray()
        for inp in inputs:
            backend = self.options.backend(inp.target)
            self._backends[backend.device(inp.target)] = backend
        ticket = next(self._tickets)
        self._batches[ticket] = [None] * len(inputs)
        return ticket

    def _enqueue_built(self, ticket: int, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> None:
        """Candidates built on this machine: their libraries travel to the devices as bytes."""
        for i, (inp, b) in enumerate(zip(inputs, builds)):
            if b.ok:
                self._ready.append(_Job(ticket, i, inp, b, ray.put(BuiltKernel.from_manifest(_manifest(b)))))
            else:
                self._batches[ticket][i] = MeasureResult.failure(b.error_kind, b.error_msg, b.build_s, time.time())

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]:
        """Time candidates built elsewhere (e.g. by a LocalBuilder)."""
        ticket = self._open(inputs)
        self._enqueue_built(ticket, inputs, builds)
        return self.wait(ticket)

    def submit(self, builder: Builder, inputs: Sequence[MeasureInput]) -> int:
        """Start building `inputs` (on the fleet with a RayBuilder, here and now with any other)."""
        ticket = self._open(inputs)
        if isinstance(builder, RayBuilder):
            for i, (res, kernel) in enumerate(builder.submit(inputs)):
                self._building[res] = (ticket, i, inputs[i], kernel)
        else:  # built by this process's machine, which may be a node that measures
            with _while_building(_this_node(self.options.exclusive_timing)):
                builds = builder.build(inputs)
            check_count("builder", inputs, builds)
            self._enqueue_built(ticket, inputs, builds)
        return ticket

    def wait(self, ticket: int) -> list[MeasureResult]:
        """Drive every submitted batch until this one has all its results: hand ready jobs to
        idle devices, and collect finished builds, started actors and finished measurements."""
        results = self._batches[ticket]
        self._refresh(force=True)
        while any(r is None for r in results):
            self._refresh()
            self._dispatch()
            starting = {a.ready_ref: a for a in self._actors if not a.ready}
            refs = [*self._building, *self._running, *starting]
            if not refs:
                time.sleep(self.options.refresh_s / 4)
                continue
            done, _ = ray.wait(refs, num_returns=1, timeout=self.options.refresh_s)
            for ref in done:
                if ref in self._building:
                    self._collect_build(ref, *self._building.pop(ref))
                elif ref in self._running:
                    self._collect_run(ref, *self._running.pop(ref))
                else:
                    self._collect_ready(starting[ref])
        del self._batches[ticket]
        return results  # type: ignore[return-value]

    def _finish(self, job: _Job | tuple[int, int], result: MeasureResult) -> None:
        batch, index = (job.batch, job.index) if isinstance(job, _Job) else job
        self._batches[batch][index] = result

    def _dispatch(self) -> None:
        """Send each ready job, oldest batch first, to an idle started actor of its device;
        record LOST the jobs whose device no node has offered for `device_wait` seconds."""
        stranded = []
        for job in sorted(self._ready, key=lambda j: j.batch):
            resource = self.options.backend(job.inp.target).device(job.inp.target)
            actor = next((a for a in self._actors if a.resource == resource and a.ready and not a.busy), None)
            if actor is None:
                if not any(a.resource == resource for a in self._actors):
                    stranded.append(job)
                continue
            self._ready.remove(job)
            actor.busy = True
            job.attempts += 1
            self._running[actor.handle.measure.remote(job.inp, job.build, job.kernel)] = (job, actor)
        if not stranded:
            self._waiting_since = None
            return
        self._waiting_since = self._waiting_since or time.monotonic()
        if time.monotonic() - self._waiting_since >= self.options.device_wait:
            for job in stranded:
                self._ready.remove(job)
                device = self.options.backend(job.inp.target).device(job.inp.target)
                failed = "; ".join(sorted({why for (_, r), why in self._unusable.items() if r == device}))
                job.errors.append(f"no node offered {device} for {self.options.device_wait:.0f} s"
                                  + (f" (where one did, its runner failed to start: {failed})" if failed else ""))
                self._finish(job, self._lost(job))
            self._waiting_since = None

    def _collect_build(self, ref: Any, batch: int, index: int, inp: MeasureInput, kernel: Any) -> None:
        try:
            build = ray.get(ref)
        except ray.exceptions.RayError as e:
            build = _lost_build(e)
        if build.ok:
            self._ready.append(_Job(batch, index, inp, build, kernel))
        else:
            self._finish((batch, index), MeasureResult.failure(build.error_kind, build.error_msg, build.build_s,
                                                               time.time()))

    def _collect_run(self, ref: Any, job: _Job, actor: _Actor) -> None:
        try:
            self._finish(job, ray.get(ref))
            actor.busy = False
            return
        except ray.exceptions.RayTaskError as e:  # the actor raised: a bug of ours, not of the device
            actor.busy = False
            self._finish(job, MeasureResult.failure(ErrorKind.RUNTIME_ERROR, f"device actor failed: {e}",
                                                    job.build.build_s, time.time()))
            return
        except ray.exceptions.RayError as e:  # the actor or its node is gone
            job.errors.append(f"{type(e).__name__} on node {actor.node_id[:12]}")
            if actor in self._actors:
                self._drop(actor)
        if job.attempts >= self.options.max_attempts:
            self._finish(job, self._lost(job))
        else:
            self._ready.append(job)

    def _collect_ready(self, actor: _Actor) -> None:
        try:
            ray.get(actor.ready_ref)
            actor.ready = True
        except ray.exceptions.RayActorError as e:
            if e.actor_init_failed:  # its runner cannot start there (a GPU node without a driver): never again
                lines = [line for line in str(e).splitlines() if line.strip()]
                self._unusable[(actor.node_id, actor.resource)] = lines[-1].strip() if lines else type(e).__name__
            self._drop(actor)  # else its node left before it started
        except ray.exceptions.RayError:
            self._drop(actor)

    @staticmethod
    def _lost(job: _Job) -> MeasureResult:
        return MeasureResult.failure(ErrorKind.LOST, f"lost after {job.attempts} attempt(s): {'; '.join(job.errors)}",
                                     job.build.build_s, time.time())
