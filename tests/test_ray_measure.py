"""The Ray builder and runner on a real local Ray cluster (several nodes on this machine).

One module-scoped cluster serves every case: a head that offers this host's CPU device, and
nodes with fake device resources (Ray cannot tell a fake resource from a real one), added and
removed as the cases need. Kernels are real gcc builds; faults come from the same test
templates as the local runner's tests.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
from cuda_markers import needs_nvcc  # noqa: E402
from faulty_kernels import SPACE, AddOneTask, instantiate  # noqa: E402
from isa import AVX2  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from task_helpers import matmul_task  # noqa: E402

from autosched import fleet  # noqa: E402
from autosched.backend import device_resource, toolchain_resource  # noqa: E402
from autosched.measure import ErrorKind, MeasureInput, MeasureResult, measure_with  # noqa: E402
from autosched.measure.devices import NVCC_RESOURCE  # noqa: E402
from autosched.measure.local import LocalBuilder, LocalRunner, RunnerOptions  # noqa: E402
from autosched.measure.ray import ACTOR_PREFIX, RayBuilder, RayOptions, RayRunner  # noqa: E402
from autosched.target import Target  # noqa: E402
from autosched.task_scheduler import tune_tasks  # noqa: E402
from autosched.templates import get_template  # noqa: E402
from autosched.tuner.api import tune_task  # noqa: E402

TESTS = Path(__file__).resolve().parent
HOST = Target.parse("llvm")
OTHER = AVX2 if HOST.isa != AVX2.isa else Target.parse("llvm -mattr=-avx2")  # another ISA class, runnable here
QUICK = RunnerOptions(repeat=2, min_repeat_ms=1.0, timeout=5.0, threads=1, stop_factor=0)


def _node(target: Target) -> dict:
    """A node with one device of `target`'s class and a build slot for it."""
    return {"num_cpus": 1, "resources": {device_resource(target): 1, toolchain_resource(target): 1}}


@pytest.fixture(scope="module")
def cluster():
    """Head: this host's device. Workers import this checkout and these test modules."""
    env = pytest.MonkeyPatch()
    env.setenv("RAY_AUTH_TOKEN", secrets.token_hex(16))
    env.setenv("RAY_AUTH_MODE", "token")
    fleet.token_auth()
    env.setenv("PYTHONPATH", os.pathsep.join([str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")]))
    c = Cluster(initialize_head=True, head_node_args={**_node(HOST), "include_dashboard": False})  # saves ~5 s
    try:
        fleet.connect(c.address)
        yield c
    finally:
        fleet.disconnect()
        c.shutdown()
        env.undo()


def _inputs(target: Target, *behaviours: str) -> list[MeasureInput]:
    return [MeasureInput(AddOneTask(), target, SPACE.from_values({"behaviour": b})) for b in behaviours]


def _node_ids(results) -> set[str]:
    return {r.node.rsplit("/", 1)[1] for r in results}


def test_candidates_go_only_to_nodes_with_their_device(cluster):
    other = cluster.add_node(**_node(OTHER))
    try:
        head_id, other_id = cluster.head_node.node_id, other.node_id
        options = RayOptions(runner=QUICK, instantiate=instantiate)
        mixed = _inputs(HOST, "good", "good_vec") * 2 + _inputs(OTHER, "good", "good_vec") * 2
        with RayRunner(options) as runner:
            measure = measure_with(RayBuilder(options), runner)
            for _ in range(2):  # the second batch builds while the devices' actors hold them
                results = measure(mixed)
                assert all(r.ok for r in results), [r.error_msg for r in results]
                assert _node_ids(results[:4]) == {head_id[:12]}
                assert _node_ids(results[4:]) == {other_id[:12]}
    finally:
        cluster.remove_node(other)


def test_segfaulting_kernel_is_one_failed_record_and_the_device_goes_on(cluster, tmp_path):
    """Built here by the local builder: its libraries travel to the device as bytes."""
    builder = LocalBuilder(n_parallel=1, cache_dir=tmp_path, instantiate=instantiate)
    with RayRunner(RayOptions(runner=QUICK)) as runner:
        results = measure_with(builder, runner)(_inputs(HOST, "good", "segfault", "good", "wrong"))
    assert [r.error_kind for r in results] == [ErrorKind.NO_ERROR, ErrorKind.RUNTIME_ERROR, ErrorKind.NO_ERROR,
                                               ErrorKind.WRONG_ANSWER]
    assert "SIGSEGV" in results[1].error_msg
    assert results[2].node == results[0].node


def test_the_fleet_times_in_the_cache_mode_a_tune_asks_for_on_each_nodes_cores(cluster, tmp_path):
    builder = LocalBuilder(n_parallel=1, cache_dir=tmp_path, instantiate=instantiate)
    with RayRunner(RayOptions()) as runner:
        assert runner.time_in("warm") and runner.options.runner is None  # the back end's defaults, untouched
        assert runner.time_in("cold") and runner.options.runner.threads == 0  # 0: the node's own cores
        results = measure_with(builder, runner)(_inputs(HOST, "good"))
        assert runner.time_in("cold") and not runner.time_in("warm")  # its actors keep the options they started with
    assert [(r.ok, r.caches, r.threads) for r in results] == [(True, "cold", os.cpu_count())]


def test_fleet_builds_feed_a_local_runner(cluster):
    """The Ray builder alone: libraries built on the fleet land here, failures stay results."""
    builds = RayBuilder(RayOptions(instantiate=instantiate)).build(_inputs(HOST, "good", "bad_split"))
    assert builds[0].ok and Path(builds[0].artifact).exists()
    assert builds[1].error_kind is ErrorKind.INSTANTIATION_ERROR
    with LocalRunner(QUICK) as runner:
        (res,) = runner.run(_inputs(HOST, "good"), builds[:1])
    assert res.ok and res.node is None


def test_node_joining_mid_run_gets_the_work(cluster):
    """No node offers the device when the batch starts; one joins and measures all of it."""
    late = Target.parse("llvm -mattr=-avx512f,-avx2,-avx")
    options = RayOptions(runner=QUICK, instantiate=instantiate, refresh_s=0.2)
    out: list = []
    with RayRunner(options) as runner:
        t = threading.Thread(target=lambda: out.extend(measure_with(RayBuilder(options), runner)(
            _inputs(late, "good", "good_vec", "good"))))
        t.start()
        time.sleep(1.0)
        joined = cluster.add_node(**_node(late))
        t.join(timeout=120)
    try:
        assert not t.is_alive()
        assert all(r.ok for r in out) and _node_ids(out) == {joined.node_id[:12]}
    finally:
        cluster.remove_node(joined)


@pytest.mark.slow  # 13 s
def test_drivers_sharing_a_node_split_its_devices(cluster):
    """A node offering two devices of a class: runners taking one per node get one each; one
    taking every unit leaves another driver none (it would wait for the first to finish)."""
    shared = Target.parse("llvm -mattr=-avx512f,-avx2,-avx")
    node = cluster.add_node(num_cpus=1, resources={device_resource(shared): 2})
    try:
        split = RayOptions(runner=QUICK, devices_per_node=1)
        with RayRunner(split) as first, RayRunner(split) as second:
            assert (first.start_devices(shared), second.start_devices(shared)) == (1, 1)
        with RayRunner(RayOptions(runner=QUICK)) as greedy, RayRunner(split) as late:
            assert (greedy.start_devices(shared), late.start_devices(shared, timeout=5.0)) == (2, 0)
    finally:
        cluster.remove_node(node)


@pytest.mark.slow  # 19 s
def test_node_removed_mid_tune_every_trial_accounted_for(cluster):
    """Two devices of the host's class; one node leaves while it measures. The tune finishes
    with every trial recorded, its in-flight candidates measured again on the head."""
    doomed = cluster.add_node(**_node(HOST))
    slow = RunnerOptions(repeat=3, min_repeat_ms=150.0, timeout=10.0, threads=1, stop_factor=0)
    options = RayOptions(runner=slow, refresh_s=0.2)
    removed = threading.Event()

    def remove_when_busy() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            busy = {n["node_id"] for n in fleet.fleet_status()["nodes"] if n["measuring"]}
            if doomed.node_id in busy:
                cluster.remove_node(doomed, allow_graceful=False)
                removed.set()
                return
            time.sleep(0.1)

    remover = threading.Thread(target=remove_when_busy)
    remover.start()
    with RayRunner(options) as runner:
        result = tune_task(matmul_task((16, 32), (32, 16)), HOST, 12, "random", builder=RayBuilder(options),
                           runner=runner)
    remover.join()
    assert removed.is_set()
    assert len(result.records) == 12
    assert all(r.ok for _, r in result.records), [r.error_msg for _, r in result.records if not r.ok]
    assert {cluster.head_node.node_id[:12]} <= _node_ids(r for _, r in result.records)


def _busy_actor():
    """The handle of a device actor that is measuring now (asks every live one at once: actors
    of earlier cases on removed nodes never answer)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        asked = {}
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry["name"].startswith(ACTOR_PREFIX):
                try:
                    handle = ray.get_actor(entry["name"], namespace=entry["namespace"])
                except ValueError:
                    continue
                asked[handle.describe.remote()] = handle
        answered, _ = ray.wait(list(asked), num_returns=len(asked), timeout=0.5)
        for ref in answered:
            try:
                if ray.get(ref)["measuring"]:
                    return asked[ref]
            except ray.exceptions.RayError:
                continue
    raise AssertionError("no device actor began measuring within 60 s")


def test_killed_actor_costs_one_lost_record_and_is_restarted(cluster):
    """A device actor dies mid-measurement (as if its process crashed): with one attempt allowed,
    that candidate is recorded LOST, and a fresh actor on the same device measures the rest."""
    slow = RunnerOptions(repeat=3, min_repeat_ms=150.0, timeout=10.0, threads=1, stop_factor=0)
    options = RayOptions(runner=slow, instantiate=instantiate, max_attempts=1, refresh_s=0.2)
    out: list = []
    with RayRunner(options) as runner:
        t = threading.Thread(target=lambda: out.extend(measure_with(RayBuilder(options), runner)(
            _inputs(HOST, "good", "good_vec") * 3)))
        t.start()
        ray.kill(_busy_actor())
        t.join(timeout=120)
    assert not t.is_alive()
    assert sorted(r.error_kind.name for r in out) == ["LOST"] + ["NO_ERROR"] * 5
    assert "lost after 1 attempt" in next(r.error_msg for r in out if not r.ok)


class GpuRunnerDouble(LocalRunner):
    """Stands in for `GpuRunner` in a GPU actor: this machine has no GPU (and none is lent), so
    nothing can be timed. It checks what a GPU actor can check without one, that the cubin
    nvcc built on the fleet arrived here whole and that Ray gave its actor exactly one GPU,
    and answers with a made-up time."""

    def run(self, inputs, builds):
        out = []
        for b in builds:
            cubin = Path(json.loads(Path(b.artifact).read_text())["cubin"]).read_bytes()
            gpus = ray.get_gpu_ids()
            ok = cubin[:4] == b"\x7fELF" and len(gpus) == 1
            why = "" if ok else f"cubin starts {cubin[:4]!r}, GPUs {gpus}"
            out.append(MeasureResult((1e-6,) if ok else (), ErrorKind.NO_ERROR if ok else ErrorKind.RUNTIME_ERROR,
                                     why, b.build_s, time.time()))
        return out


@needs_nvcc
def test_cuda_candidates_build_on_nvcc_nodes_and_run_on_their_gpu(cluster):
    """Real nvcc builds as Ray tasks, timed by a GPU actor of the fake sm_90 node (a double of
    the GPU runner: see GpuRunnerDouble). The head has nvcc installed but offers no nvcc slot,
    so a cuda build waits until a node offering one joins. Then the real GPU runner on that node
    finds no GPU: its candidates are LOST after `device_wait`, saying why, and the tune goes on."""
    sm90 = Target.parse("cuda -arch=sm_90")
    task = matmul_task((16, 32), (32, 16))
    space = get_template(task.op, "cuda").space(task, sm90)
    inputs = [MeasureInput(task, sm90, space.get(i)) for i in range(0, len(space), max(1, len(space) // 4))][:4]
    options = RayOptions(runner=QUICK, gpu_runner=GpuRunnerDouble)
    ((waiting, _),) = RayBuilder(options).submit(inputs[:1])
    assert ray.wait([waiting], timeout=3)[0] == []
    gpu = cluster.add_node(num_cpus=1, num_gpus=1, resources={device_resource(sm90): 1, NVCC_RESOURCE: 1})
    try:
        assert ray.get(waiting).ok
        with RayRunner(options) as runner:
            results = measure_with(RayBuilder(options), runner)(inputs)
        measured = [r for r in results if r.error_kind is not ErrorKind.RESOURCE_LIMIT]
        assert measured and all(r.ok for r in measured), [r.error_msg for r in results]
        assert _node_ids(measured) == {gpu.node_id[:12]}
        real = RayOptions(runner=QUICK, device_wait=2.0)
        with RayRunner(real) as runner:
            lost = measure_with(RayBuilder(real), runner)([inp for inp, r in zip(inputs, results) if r.ok])
        assert all(r.error_kind is ErrorKind.LOST and "runner failed to start" in r.error_msg for r in lost), lost
        assert "--emulate" in lost[0].error_msg  # the GPU runner's own words: no GPU here, emulate instead
    finally:
        cluster.remove_node(gpu)


class StampedRayBuilder(RayBuilder):
    """A Ray builder that notes when each batch's builds are handed to Ray."""

    def __init__(self, options: RayOptions):
        super().__init__(options)
        self.submitted: list[float] = []

    def submit(self, inputs):
        self.submitted.append(time.time())
        return super().submit(inputs)


def test_next_round_builds_while_the_current_one_is_timed(cluster):
    """A real two-task tune on one device: each round's builds go to Ray before the previous
    round's last measurement ends (the node's clock stamps measurements), and every trial is
    measured once and reaches the callbacks, round by round."""
    options = RayOptions(runner=QUICK)
    builder = StampedRayBuilder(options)
    rounds: list[tuple] = []
    tasks = [matmul_task((16, 32), (32, 16)), matmul_task((8, 64), (64, 8))]
    with RayRunner(options) as runner:
        summary = tune_tasks(tasks, HOST, 12, builder, runner, "random", round_trials=3,
                             callbacks=[lambda inputs, results: rounds.append((inputs, results))])
    measured = [(inp.task.key, inp.config.index) for inputs, _ in rounds for inp in inputs]
    assert summary.trials == len(measured) == len(set(measured)) == 12
    assert all(r.ok for _, results in rounds for r in results)
    assert len(builder.submitted) == len(rounds) == 4
    for k in range(len(rounds) - 1):
        assert builder.submitted[k + 1] < max(r.timestamp for r in rounds[k][1])


class StampedLocalRunner(LocalRunner):
    """The CPU runner, noting the wall-clock interval in which it checks and times each
    candidate (in $AUTOSCHED_TEST_STAMPS/timing-$AUTOSCHED_TEST_NODE, set per node)."""

    def _run_one(self, inp, build):
        start = time.time()
        try:
            return super()._run_one(inp, build)
        finally:
            stamps = Path(os.environ["AUTOSCHED_TEST_STAMPS"]) / f"timing-{os.environ['AUTOSCHED_TEST_NODE']}"
            with stamps.open("a") as f:
                f.write(f"{start} {time.time()}\n")


def _stamping_gcc(directory: Path) -> Path:
    """A `gcc` first on PATH that notes when each real gcc run starts and ends (the stamps
    enclose the compiler process) in $AUTOSCHED_TEST_STAMPS/gcc-$AUTOSCHED_TEST_NODE."""
    directory.mkdir()
    wrapper = directory / "gcc"
    wrapper.write_text(f'#!/bin/sh\nstart=$(date +%s.%N)\n{shutil.which("gcc")} "$@"\nrc=$?\n'
                       'echo "$start $(date +%s.%N)" >> "$AUTOSCHED_TEST_STAMPS/gcc-$AUTOSCHED_TEST_NODE"\nexit $rc\n')
    wrapper.chmod(0o755)
    return directory


def _stamped_node(cluster, name: str, target: Target, stamps: Path, gcc_dir: Path):
    """A node with one device of `target`'s class and two build slots, whose processes stamp
    their gcc runs and timings under `name`, in a kernel cache of their own (every build runs gcc)."""
    env = pytest.MonkeyPatch()
    env.setenv("AUTOSCHED_TEST_NODE", name)
    env.setenv("AUTOSCHED_TEST_STAMPS", str(stamps))
    env.setenv("XDG_CACHE_HOME", str(stamps / f"cache-{name}"))
    env.setenv("PATH", f"{gcc_dir}{os.pathsep}{os.environ['PATH']}")
    try:  # the node's processes keep the environment it started with
        return cluster.add_node(num_cpus=2, resources={device_resource(target): 1, toolchain_resource(target): 2})
    finally:
        env.undo()


def _intervals(path: Path) -> list[tuple[float, float]]:
    return [tuple(map(float, line.split())) for line in path.read_text().splitlines()] if path.exists() else []


def _overlaps(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> int:
    return sum(1 for s, e in a for s2, e2 in b if s < e2 and s2 < e)


def test_no_build_on_a_node_while_it_times_and_nodes_do_not_wait_for_each_other(cluster, tmp_path):
    """Two nodes of one device class, two build slots each; their actors are started by a
    first batch, then two batches go in flight at once (so builds go on while candidates are
    timed): no gcc run on a node overlaps a timing on that node, while timings on one node
    do overlap gcc runs and timings on the other."""
    sse2 = Target.parse("llvm -mattr=-avx512f,-avx2,-avx")
    gcc_dir = _stamping_gcc(tmp_path / "bin")
    nodes = [_stamped_node(cluster, name, sse2, tmp_path, gcc_dir) for name in ("a", "b")]
    try:
        task = matmul_task((32, 64), (64, 32))
        space = get_template(task.op, "llvm").space(task, sse2)
        inputs = [MeasureInput(task, sse2, space.get(i)) for i in range(0, len(space), max(1, len(space) // 18))][:18]
        # one thread, a long timeout: this machine's two cores are shared with other work
        timed = RunnerOptions(repeat=3, min_repeat_ms=30.0, timeout=30.0, threads=1, stop_factor=0)
        options = RayOptions(runner=timed, cpu_runner=StampedLocalRunner)
        builder = RayBuilder(options)
        with RayRunner(options) as runner:
            warm = runner.measure(builder, inputs[:2])
            tickets = [runner.submit(builder, inputs[2:10]), runner.submit(builder, inputs[10:])]
            results = warm + [r for t in tickets for r in runner.wait(t)]
    finally:
        for node in nodes:
            cluster.remove_node(node)
    assert all(r.ok for r in results), [r.error_msg for r in results if not r.ok]
    assert _node_ids(results) == {n.node_id[:12] for n in nodes}
    timings = {n: _intervals(tmp_path / f"timing-{n}") for n in "ab"}
    gcc = {n: _intervals(tmp_path / f"gcc-{n}") for n in "ab"}
    assert sum(map(len, timings.values())) == len(results) and all(gcc.values())
    assert [_overlaps(timings[n], gcc[n]) for n in "ab"] == [0, 0]
    across = _overlaps(timings["a"], gcc["b"] + timings["b"]) + _overlaps(timings["b"], gcc["a"])
    assert across > 0
    # the locks' files lie in the Ray session's directory, beside its logs: none is left in the system's temp directory
    locks = Path(cluster.head_node.get_session_dir_path()) / "autosched-node-locks"
    assert {n.node_id for n in nodes} <= {p.stem for p in locks.iterdir()}
    assert not any((Path(tempfile.gettempdir()) / "autosched-node-locks" / f"{n.node_id}.lock").exists() for n in nodes)
