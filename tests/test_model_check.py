"""Tuning never loses in the model: verdicts of the model on tuned configs, the noise rule for
configs it never judged, and the A/B tests a tune ends with (issue 18)."""
import json

import numpy as np
import onnx
import pytest
from db_helpers import AVX512, HERE, execute

from autosched import model_check, tune
from autosched.api import model_tasks
from autosched.cli import main
from autosched.compile.model import build_model
from autosched.database import Database, TunedSchedules
from autosched.database.queries import fastest
from autosched.database.verdicts import IN_MODEL_NOISE, Verdict, losers, record_verdict, verdict_of
from autosched.frontend.onnx import load_onnx
from autosched.graph.passes import optimize_for
from autosched.measure import ErrorKind, MeasureInput, MeasureResult
from autosched.model_check import check_in_model, judge, kernel_verdicts
from autosched.runtime import load_model
from autosched.target import CpuInfo, Target
from autosched.task import extract_tasks
from autosched.templates import get_template
from autosched.zoo import mlp
from autosched.zoo_builder import ModelBuilder, tensor_info


def _record(task, target, config, seconds, t0=1000.0):
    return MeasureInput(task, target, config), MeasureResult((seconds,) * 3, ErrorKind.NO_ERROR, "", 0.1, t0)


@pytest.fixture(scope="module")
def mlp_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("mlp") / "mlp.onnx"
    onnx.save(mlp(), path)
    return path


def test_isolated_wins_within_noise_are_built_only_once_the_model_says_they_win_and_losers_give_way_to_winners(
        tmp_path, tasks):
    """Records of a fixed (not this host's) target: no timing, only what a build picks."""
    task = tasks[0]
    template = get_template(task.op, HERE.kind)
    space, default = template.space(task, HERE), template.fallback(task, HERE)
    close, clear = [c for c in map(space.get, range(3)) if c.index != default.index][:2]
    db = Database(tmp_path / "t.db")
    db.commit([_record(task, HERE, default, 1e-3), _record(task, HERE, close, (1 - IN_MODEL_NOISE / 2) * 1e-3)])
    schedules = TunedSchedules(db)
    schedules(task, HERE)
    assert task.key in schedules.declined and task.key not in schedules.used  # 2.5% alone: within noise

    record_verdict(db, task, HERE, close, Verdict(True, 1.0, 1.1, None))
    schedules = TunedSchedules(db)
    schedules(task, HERE)
    assert schedules.used[task.key].config.index == close.index  # the model said it wins

    db.commit([_record(task, HERE, clear, 0.8e-3, t0=2000.0)])
    schedules = TunedSchedules(db)
    schedules(task, HERE)
    assert schedules.used[task.key].config.index == clear.index  # 20% alone: beyond noise, built untested
    record_verdict(db, task, HERE, clear, Verdict(False, 1.2, 1.0, None))
    record_verdict(db, task, HERE, clear, Verdict(False, 1.3, 1.0, None))  # the latest replaces the earlier
    assert verdict_of(db, task, HERE, clear) == Verdict(False, 1.3, 1.0, None)
    assert execute(tmp_path / "t.db", "SELECT count(*) FROM verdicts") == [(2,)]
    schedules = TunedSchedules(db)
    schedules(task, HERE)
    # lost in the model: never built; the fastest config the model judged a win is, not the default
    assert schedules.superseded[task.key].config.index == clear.index and task.key not in schedules.declined
    assert schedules.used[task.key].config.index == close.index
    record_verdict(db, task, HERE, close, Verdict(False, 1.1, 1.0, None))
    schedules = TunedSchedules(db)
    schedules(task, HERE)
    assert schedules.declined[task.key].config.index == clear.index and task.key not in schedules.used  # no winner left
    assert verdict_of(db, task, Target.parse("llvm"), clear) is None  # verdicts are per machine


def _lying_record(mlp_model, tmp_path):
    """The MLP's largest task with a 1×(one vector) register tile recorded 100× faster than its default."""
    target = Target.parse("llvm")
    graph = load_onnx(mlp_model)
    tasks = extract_tasks(optimize_for(graph, target)).tasks
    task = max(tasks, key=lambda t: t.flops)
    template = get_template(task.op, target.kind)
    slow, default = template.space(task, target).get(0), template.fallback(task, target)
    assert (slow["mr"], slow["nr"]) == (1, target.capabilities.lanes(4)) and slow.index != default.index
    db = Database(tmp_path / "t.db")
    db.commit([_record(task, target, default, 1e-4), _record(task, target, slow, 1e-6)])
    return target, graph, tasks, task, slow, default, db


def test_a_config_whose_isolated_time_lies_is_caught_in_the_model_and_kept_out_of_builds(mlp_model, tmp_path):
    """A 1×(one vector) register tile recorded 100× faster than the default: what a build used to trust.
    Timed in the model, it loses to the default by several times (far above a shared
    machine's noise), gets a verdict, and builds leave it out."""
    target, graph, tasks, task, slow, default, db = _lying_record(mlp_model, tmp_path)
    before = TunedSchedules(db)
    build_model(graph, tmp_path / "before.so", target, before)
    assert before.used[task.key].config.index == slow.index

    check = check_in_model(graph, tasks, target, db, runs=10, threads=1, shortlist=0)  # the A/B test alone
    assert not check.kernels
    [tested] = check.tested
    assert tested.task == task.key and not tested.wins and tested.with_ms > tested.without_ms
    assert tested.estimated_gain_ms == pytest.approx(task.weight * (1e-4 - 1e-6) * 1e3)
    assert verdict_of(db, task, target, slow).wins is False
    after = TunedSchedules(db)
    build_model(graph, tmp_path / "after.so", target, after)
    assert task.key in after.declined and task.key not in after.used


def test_a_shortlist_timed_kernel_by_kernel_in_the_model_declines_the_config_whose_isolated_time_lies(
        mlp_model, tmp_path):
    """The same lying record, now timed with the task's other shortlisted configs in builds of
    their own: its kernel loses to the default's in the model, so it gets a verdict before any
    A/B test of the whole model, and the A/B tests are left nothing of it to try."""
    target, graph, tasks, task, slow, default, db = _lying_record(mlp_model, tmp_path)
    check = check_in_model(graph, tasks, target, db, runs=10, threads=1)
    [kernel] = check.kernels
    assert kernel.task == task.key and kernel.verdicts == (False,) and kernel.chosen is None
    assert kernel.configs_ms[0] > kernel.default_ms > 0
    said = verdict_of(db, task, target, slow)
    assert said.wins is False and said.with_ms == pytest.approx(kernel.configs_ms[0])
    assert not check.tested  # the A/B tests had no tuned config left to weigh
    assert fastest(db, task, target, 3, losers(db, task, target)) == [default]  # a later shortlist skips it


def test_a_config_its_kernel_judged_a_win_is_built_and_not_judged_again_by_the_whole_models_noise(
        mlp_model, tmp_path, monkeypatch):
    """The kernels' times are made up here (the machine decides them otherwise): the 2nd fastest
    config alone is 20% faster than the default in the model, the 1st 5% slower than it. The 2nd
    is built, the 1st is kept out, and no A/B test of the whole model weighs the task again, nor
    does the whole model's time within noise of the untuned build's."""
    target, graph, tasks, task, slow, default, db = _lying_record(mlp_model, tmp_path)
    second = next(c for c in map(template_space(task, target).get, range(1, 50)) if c.index != default.index)
    db.commit([_record(task, target, second, 2e-6)])
    monkeypatch.setattr(model_check, "kernel_seconds", lambda feeds, models, rounds, runs: [
        {task.key: 100e-6}, {task.key: 105e-6}, {task.key: 80e-6}][:len(models)])
    # the whole model 3% slower with it: within noise
    monkeypatch.setattr(model_check._Builds, "time", lambda builds, a, b, runs: (1.0, 1.03))
    check = check_in_model(graph, tasks, target, db, runs=4, threads=1, ab_tasks=3)
    [kernel] = check.kernels
    assert kernel.verdicts == (False, True) and kernel.chosen == 1 and check.declined == 0
    assert task.key not in {v.task for v in check.tested}
    schedules = TunedSchedules(db)
    schedules(task, target)
    assert schedules.used[task.key].config.index == second.index


def test_wins_that_do_not_add_up_in_the_model_are_declined_too(mlp_model, tmp_path, monkeypatch):
    """The kernels' and the builds' times are made up here: the task's 2nd config wins kernel by
    kernel, but the tuned build times 20% slower than the untuned one (beyond noise) with it.
    The check declines it too, and the build it leaves is the untuned one."""
    target, graph, tasks, task, slow, default, db = _lying_record(mlp_model, tmp_path)
    second = next(c for c in map(template_space(task, target).get, range(1, 50)) if c.index != default.index)
    db.commit([_record(task, target, second, 2e-6)])
    monkeypatch.setattr(model_check, "kernel_seconds", lambda feeds, models, rounds, runs: [
        {task.key: 100e-6}, {task.key: 105e-6}, {task.key: 80e-6}][:len(models)])

    def timed(builds, a, b, runs):
        schedules = TunedSchedules(db)
        schedules(task, target)
        slower = a is builds.models[0] and task.key in schedules.used
        return (1.0, 1.2) if slower else (1.0, 1.0)
    monkeypatch.setattr(model_check._Builds, "time", timed)
    check = check_in_model(graph, tasks, target, db, runs=4, threads=1, ab_tasks=3)
    assert check.kernels[0].chosen == 1 and check.declined >= 1
    assert verdict_of(db, task, target, second).wins is False
    assert (check.untuned_ms, check.tuned_ms) == (1.0, 1.0)
    schedules = TunedSchedules(db)
    schedules(task, target)
    assert task.key not in schedules.used


def template_space(task, target):
    return get_template(task.op, target.kind).space(task, target)


def test_the_kernel_verdicts_build_the_fastest_in_the_model_where_it_beats_the_default_beyond_noise():
    # the 2nd fastest alone is fastest in the model: it wins, the 1st (slower there beyond noise) loses
    assert kernel_verdicts(1.0, [0.97, 0.8, 0.83]) == (False, True, None)
    # none beats the default by more than noise: only those beyond noise slower than it lose
    assert kernel_verdicts(1.0, [0.97, 1.04, 1.2]) == (None, None, False)
    assert kernel_verdicts(1.0, [0.9]) == (True,)


def test_a_config_that_wins_only_while_the_host_streams_its_extra_weight_bytes_fast_loses():
    """Floors are the seconds each kernel's weights take at a low bandwidth (`streaming_floors`)."""
    # F(4) on a 7x7 layer: faster as measured, but its floor (more bytes) is slower than the default
    assert kernel_verdicts(0.889, [0.747], 0.84, [1.88]) == (False,)
    # F(4) on a 14x14 layer: a measured win the floor brings within noise: it loses, never built on its time alone
    assert kernel_verdicts(0.484, [0.416], 0.21, [0.47]) == (False,)
    # a config reading the default's bytes keeps a win that holds above the floor, and loses nothing the floor ties
    assert kernel_verdicts(1.0, [0.8], 0.5, [0.5]) == (True,)
    assert kernel_verdicts(0.9, [0.8], 1.0, [1.0]) == (None,)
    # fewer bytes than the default: the floor raises only the default
    assert kernel_verdicts(0.9, [0.95], 1.2, [0.5]) == (True,)


def test_build_and_db_best_say_which_tasks_give_way_to_a_config_that_won_in_the_model(mlp_model, tmp_path, capsys):
    """ResNet-18's 1000-trial build ran 25% slower than its 500-trial one: the new best config of
    one convolution lost its A/B test by 3% and the task went back to its default (3× slower
    alone), although the 500-trial best had won there. A build now takes that winner."""
    target = Target.parse("llvm")
    _, tasks = model_tasks(mlp_model, target, substitutions=False)
    task = max(tasks, key=lambda t: t.flops)
    template = get_template(task.op, target.kind)
    default = template.fallback(task, target)
    won, lost = [c for c in map(template.space(task, target).get, range(3)) if c.index != default.index][:2]
    db = Database(tmp_path / "t.db")
    db.commit([_record(task, target, default, 3e-3), _record(task, target, won, 1.2e-3),
               _record(task, target, lost, 1e-3, t0=2000.0)])
    record_verdict(db, task, target, won, Verdict(True, 20.0, 25.0, None))
    record_verdict(db, task, target, lost, Verdict(False, 20.6, 20.0, None))
    db.close()
    argv = ["--db", str(tmp_path / "t.db"), "--no-substitutions"]
    assert main(["build", str(mlp_model), "-o", str(tmp_path / "m.so"), "--no-shipped", *argv]) == 0
    assert "1 with the fastest config the model judged a win" in capsys.readouterr().out
    assert main(["db", "best", str(mlp_model), *argv]) == 0
    assert "(built with record 2, 1.2 ms, the fastest config the model judged a win" in capsys.readouterr().out


def test_an_ab_test_judges_only_beyond_in_model_noise():
    assert judge(20.0, 25.0) is True and judge(26.0, 20.0) is False
    # within 5% either way: no verdict (the config keeps being judged by its isolated time)
    assert judge(20.6, 20.0) is None and judge(19.5, 20.0) is None


def test_tune_ends_with_the_model_check_and_the_cli_reports_it(small_model, tmp_path, capsys):
    out = tune(small_model, "llvm", 6, db=tmp_path / "a.db", tuner="random", round_trials=3, ab_tasks=1)
    check = out.model_check
    assert check is not None and check.untuned_ms > 0 and check.tuned_ms > 0 and len(check.tested) <= 1
    judged = sum(v.wins is not None for v in check.tested)  # a test within noise gives no verdict
    kernels = sum(v is not None for k in check.kernels for v in k.verdicts)
    [(verdicts,)] = execute(tmp_path / "a.db", "SELECT count(*) FROM verdicts")
    assert kernels <= verdicts <= kernels + judged + check.declined  # a config judged twice keeps the last
    assert tune(small_model, "llvm", 2, db=tmp_path / "b.db", tuner="random", model_check=False).model_check is None

    assert main(["tune", str(small_model), "--trials", "4", "--round", "2", "--tuner", "random",
                 "--db", str(tmp_path / "c.db"), "--ab-tasks", "2"]) == 0
    assert "in the model (" in capsys.readouterr().out
    # the build it settled on was profiled: every task's kernel timed in the model, and the build
    assert execute(tmp_path / "c.db", "SELECT count(*) FROM kernel_times") == [(2,)]
    assert execute(tmp_path / "c.db", "SELECT count(*), min(calls) FROM model_times") == [(1, 2)]
    assert main(["db", "best", str(small_model), "--db", str(tmp_path / "c.db")]) == 0
    printed = capsys.readouterr().out
    assert printed.count("(in the model ") == 2 and "estimated latency of the build: " in printed
    assert "last timed build here: " in printed and "by op, estimated / in the model (ms): Gemm " in printed
    assert main(["tune", str(small_model), "--trials", "2", "--tuner", "random", "--db", str(tmp_path / "d.db"),
                 "--no-model-check"]) == 0
    assert "in the model" not in capsys.readouterr().out


def test_the_latency_model_adds_untuned_kernels_in_the_model_and_the_executor_to_the_records(tmp_path, tasks):
    """Records where the build uses a config measured here, the in-model time of what it uses
    elsewhere, the executor's share of the last timed build, and that build beside them."""
    from autosched.database.model_times import BuildTiming, estimate, record_build_timing, record_kernel_time
    tuned, untuned, never = tasks
    template = get_template(tuned.op, HERE.kind)
    config = template.space(tuned, HERE).get(5)
    db = Database(tmp_path / "t.db")
    db.commit([_record(tuned, HERE, config, 2e-3)])
    record_kernel_time(db, tuned, HERE, config, 2.6e-3)
    record_kernel_time(db, untuned, HERE, None, 0.5e-3)
    record_kernel_time(db, untuned, HERE, None, 0.4e-3)  # the latest profile replaces the earlier
    assert estimate(db, tasks, HERE, {}).measured is None
    record_build_timing(db, tasks, HERE, BuildTiming(3.5, 4.0, 3.1, 3, 2))
    schedules = TunedSchedules(db)
    model = estimate(db, tasks, HERE, {t.key: schedules.choose(t, HERE) for t in tasks})
    # the tuned task's record, 2.0 ms alone, counts at its in-model time: 1.3x
    assert [(p.source, p.ms, p.in_model_ms, p.context) for p in model.tasks] == [
        ("record", pytest.approx(2.6), pytest.approx(2.6), pytest.approx(1.3)),
        ("model", pytest.approx(0.4), pytest.approx(0.4), 1.0), ("-", None, None, 1.0)]
    assert model.unknown == 1 and model.executor_ms == pytest.approx(0.4)
    assert model.alone_ms == pytest.approx(2.0) and model.records_ms == pytest.approx(2.6)
    assert model.total_ms == pytest.approx(2.6 + 0.4 + 0.4) and model.measured.tuned_ms == 3.5
    assert model.by_op() == {"Gemm": (pytest.approx(3.0), pytest.approx(3.0))}
    assert estimate(db, tasks, Target.parse("llvm"), {}).measured is None  # timings are per machine

    # a faster config never profiled takes the task's context from the profiled one: 1.5 ms x 1.3
    faster = template.space(tuned, HERE).get(6)
    db.commit([_record(tuned, HERE, faster, 1.5e-3)])
    model = estimate(db, tasks, HERE, {t.key: TunedSchedules(db).choose(t, HERE) for t in tasks})
    assert model.tasks[0].best.config == faster and model.tasks[0].in_model_ms is None
    assert model.tasks[0].ms == pytest.approx(1.95) and model.tasks[0].context == pytest.approx(1.3)

    # the task scheduler weighs a task by its time in the model: 1.3 × its record here
    from autosched.database.model_times import context_factors
    from autosched.task_scheduler import TaskProgress, gradient_priority
    assert context_factors(db, tasks, HERE) == {tuned.key: pytest.approx(1.3)}
    alone = TaskProgress(tuned, None, trials=32, best_cost=2e-3, previous_cost=3e-3, last_round=16)
    in_model = TaskProgress(tuned, None, trials=32, best_cost=2e-3, previous_cost=3e-3, last_round=16, context=1.3)
    assert in_model.model_seconds == pytest.approx(1.3 * alone.model_seconds)
    assert gradient_priority(in_model, []) == pytest.approx(1.3 * gradient_priority(alone, []))


def test_a_model_check_that_cannot_build_is_a_warning_and_the_tune_is_done(small_model, tmp_path, monkeypatch, caplog):
    from autosched import model_check
    from autosched.codegen.errors import CompileError

    def broken(*args, **kwargs):
        raise CompileError("gcc: out of disk space")
    monkeypatch.setattr(model_check, "build_model", broken)
    out = tune(small_model, "llvm", 4, db=tmp_path / "t.db", tuner="random", round_trials=2)
    assert out.model_check is None and out.summary.trials == 4
    assert "the model check after tuning could not run, the records are kept: gcc: out of disk space" in caplog.text
    assert execute(tmp_path / "t.db", "SELECT status, trials_done FROM sessions") == [("done", 4)]


def test_shipped_records_of_another_vendors_cores_give_way_to_the_defaults(tmp_path, tasks, caplog):
    """The package's records were tuned on AMD's cores; on an Intel CPU of the same ISA class the
    task builds its default (measured there: the shipped configs ran 3-5% slower than the
    defaults), with one warning; on AMD's cores, or on a CPU naming no vendor, they apply."""
    task = tasks[1]
    amd = Target.parse("llvm", host=CpuInfo("AMD EPYC 9R45", AVX512, vendor="amd"))
    shipped = Database(tmp_path / "shipped.db")
    shipped.commit([_record(task, amd, get_template(task.op, "llvm").space(task, amd).get(3), 1e-3)])
    empty = Database(tmp_path / "empty.db")
    intel = Target.parse("llvm", host=CpuInfo("Intel(R) Xeon(R) Platinum 8480+", AVX512, vendor="intel"))
    schedules = TunedSchedules(empty, shipped)
    assert schedules.choose(task, intel) is None and schedules.other_vendor == {task.key}
    assert "the shipped records were measured on AMD's cores; on this Intel CPU" in caplog.text
    other_amd = Target.parse("llvm", host=CpuInfo("AMD EPYC 9654", AVX512, vendor="amd"))
    unknown = Target.parse("llvm", host=CpuInfo("Example CPU B", AVX512))
    for target in (other_amd, unknown):
        schedules = TunedSchedules(empty, shipped)
        assert schedules.choose(task, target) is not None and schedules.from_fallback == {task.key}
    shipped.close()
    empty.close()


def test_the_kept_profile_alternates_with_plain_runs_for_its_whole_window(mlp_model, tmp_path):
    """The latency model's kernel sum and the latency it is compared with come from one window:
    profile blocks after plain runs, for at least the window, each kernel the median of its
    blocks (a real build of the MLP, its profile calls counted as they pass)."""
    import time

    from autosched.api import build
    from autosched.compile.evaluate import sample_inputs
    from autosched.runtime import load_model

    model = load_model(build(mlp_model, "llvm", db=tmp_path / "e.db", output=tmp_path / "m.so", shipped=False,
                             substitutions=False).files.library)
    feeds = sample_inputs(load_onnx(mlp_model), 0)
    blocks, profile = [], model.profile
    model.profile = lambda f, runs: blocks.append(profile(f, runs=runs)) or blocks[-1]
    start = time.perf_counter()
    calls, plain_ms = model_check._profile_window(model, feeds, runs=3, seconds=0.2)
    assert time.perf_counter() - start >= 0.2 and len(blocks) >= 2
    assert len(calls) == len(model.manifest["calls"]) and 0 < 1e3 * sum(c.seconds for c in calls) < 10 * plain_ms
    for i, call in enumerate(calls):
        assert call.seconds == pytest.approx(float(np.median([b[i].seconds for b in blocks])))
    model.close()


def _winograd_conv(tmp_path):
    """Two 3x3 convolutions of 32 channels on 64x64 maps (F(4) by default, above `MIN_JUDGED_S`), as a loaded graph."""
    b = ModelBuilder(5)
    x = b.node("Relu", [b.conv_bn("input", "c0", 32, 32, 3)], "c0/Relu")
    x = b.node("Relu", [b.conv_bn(x, "c1", 32, 32, 3)], "c1/Relu")
    path = tmp_path / "conv.onnx"
    onnx.save(b.model("conv", [tensor_info("input", (1, 32, 64, 64))], [tensor_info(x, (1, 32, 64, 64))]), path)
    return load_onnx(path)


def test_a_config_that_streams_more_weight_bytes_is_judged_as_if_the_host_gave_it_little_memory_bandwidth(
        tmp_path, monkeypatch):
    """The manifest counts each call's weight bytes: F(4)'s transformed weights are (6/4)² times
    F(2)'s. Where the model's weights exceed the last-level cache, each kernel is judged no faster
    than its weights stream at `MEMORY_BANDWIDTH`; here the cache is 0 bytes and the bandwidth
    low enough that the streaming floor decides, so F(2), recorded 100x faster than F(4) alone,
    loses to it in the model, which no timing on any host could decide otherwise."""
    target = Target.parse("llvm")
    graph = _winograd_conv(tmp_path)
    tasks = extract_tasks(optimize_for(graph, target)).tasks
    [task] = [t for t in tasks if t.op == "ConvNCHWc"]
    template = get_template(task.op, target.kind)
    default = template.fallback(task, target)
    assert default["algorithm"] == "winograd_4"
    f2 = default.space.from_values({**{k.name: default[k.name] for k in default.space.knobs}, "algorithm": "winograd_2"})

    files = build_model(graph, tmp_path / "plain.so", target)
    calls = [c for c in json.loads(files.manifest.read_text())["calls"] if c["op"] == "ConvNCHWc"]
    assert [c["weight_bytes"] for c in calls] == [36 * 32 * 32 * 4 + 32 * 4] * 2  # the transformed 6x6 kernels and a bias
    model = load_model(files.library)
    try:
        assert model_check.streaming_floors(model, cache_bytes=1 << 40) == {}  # weights stay in cache
        assert model_check.streaming_floors(model, cache_bytes=0)[task.key] == pytest.approx(
            calls[0]["weight_bytes"] / model_check.MEMORY_BANDWIDTH)
    finally:
        model.close()

    db = Database(tmp_path / "t.db")
    db.commit([_record(task, target, default, 1e-3), _record(task, target, f2, 1e-5)])
    monkeypatch.setattr(model_check, "llc_bytes", lambda: 0)
    monkeypatch.setattr(model_check, "MEMORY_BANDWIDTH", 1e6)  # F(4) 148 ms a call, F(2) 66 ms
    check = check_in_model(graph, tasks, target, db, runs=4, threads=1, ab_tasks=0)
    [kernel] = check.kernels
    assert kernel.verdicts == (True,) and kernel.configs_ms[0] == pytest.approx(16 * 32 * 32 * 4 / 1e6 * 1e3, rel=0.01)
    # (the whole model, timed next at this host's real bandwidth, may still decline it: the floor
    # only ever makes a kernel slower, never the build's own timing faster)
