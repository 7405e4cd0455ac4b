"""Local measurement: real gcc builds in a process pool, real runs in a restartable worker.

Faulty kernels are produced by test templates through the real pipeline: an index far out of
bounds (segfault), a reduction of 2^50 steps (never returns), an off-by-one body (wrong answer).
"""
import pytest
from faulty_kernels import SPACE, AddOneTask, instantiate

from autosched.measure.interface import measure_with
from autosched.measure.local import LocalBuilder, LocalRunner, RunnerOptions
from autosched.measure.record import ErrorKind, MeasureInput
from autosched.target import Target


@pytest.fixture(scope="module")
def measure(tmp_path_factory):
    runner = LocalRunner(RunnerOptions(repeat=2, min_repeat_ms=1.0, timeout=3.0, threads=1, stop_factor=0))
    builder = LocalBuilder(n_parallel=2, cache_dir=tmp_path_factory.mktemp("kernels"), instantiate=instantiate)
    yield measure_with(builder, runner)
    runner.close()


def _inputs(*behaviours):
    target = Target.parse("llvm")
    return [MeasureInput(AddOneTask(), target, SPACE.from_values({"behaviour": b})) for b in behaviours]


def test_good_candidates_are_timed(measure):
    results = measure(_inputs("good", "good_vec", "rounding"))
    for r in results:
        assert r.error_kind is ErrorKind.NO_ERROR, r.error_msg
        assert len(r.costs) == 2 and all(c > 0 for c in r.costs) and r.build_s > 0
    # the reference's magnitude scales atol: 2e-4 at an output of 0 is rounding when others reach 3


def test_faults_become_error_kinds_and_tuning_goes_on(measure):
    results = measure(_inputs("segfault", "good", "hang", "good", "wrong", "bad_split", "good"))
    kinds = [r.error_kind for r in results]
    assert kinds == [ErrorKind.RUNTIME_ERROR, ErrorKind.NO_ERROR, ErrorKind.RUN_TIMEOUT, ErrorKind.NO_ERROR,
                     ErrorKind.WRONG_ANSWER, ErrorKind.INSTANTIATION_ERROR, ErrorKind.NO_ERROR]
    assert "SIGSEGV" in results[0].error_msg
    assert "restarted" in results[2].error_msg
    assert "expected" in results[4].error_msg
    assert "split factor must be >= 1" in results[5].error_msg
    assert all(r.costs == () for r, k in zip(results, kinds) if k is not ErrorKind.NO_ERROR)


def test_compile_timeout_is_reported(tmp_path):
    builder = LocalBuilder(n_parallel=1, timeout=0.001, cache_dir=tmp_path, instantiate=instantiate)
    (res,) = builder.build(_inputs("good"))
    assert res.error_kind is ErrorKind.COMPILE_TIMEOUT and res.artifact is None
