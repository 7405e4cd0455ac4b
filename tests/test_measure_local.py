"""Local measurement: real gcc builds in a process pool, real runs in a restartable worker.

Faulty kernels are produced by test templates through the real pipeline: an index far out of
bounds (segfault), a reduction of 2^50 steps (never returns), an off-by-one body (wrong answer).
"""
import pytest
from faulty_kernels import SPACE, AddOneTask, instantiate

from autosched.measure.caches import llc_bytes
from autosched.measure.interface import measure_with
from autosched.measure.local import LocalBuilder, LocalRunner, RunnerOptions
from autosched.measure.record import ErrorKind, MeasureInput
from autosched.measure.worker import activations
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


class RecordingRunner(LocalRunner):
    """A LocalRunner that notes what it asks its (real) worker."""

    def __init__(self, options):
        super().__init__(options)
        self.asked = []

    def _exchange(self, req, limit, build_s):
        self.asked.append(("time", sorted(map(int, req["slots"]))) if "slots" in req
                          else ("hold", req["hold"]) if "hold" in req else ("alone", req["manifest"]))
        return super()._exchange(req, limit, build_s)


def test_a_batch_is_checked_one_by_one_then_timed_together_and_a_crash_loses_no_candidate(tmp_path):
    """Candidates held before a kernel crashed the worker are timed alone afterwards; those
    checked after it are timed together, one repeat of each in turn, in one request."""
    runner = RecordingRunner(RunnerOptions(repeat=3, min_repeat_ms=1.0, timeout=3.0, threads=1, stop_factor=0))
    builder = LocalBuilder(n_parallel=2, cache_dir=tmp_path, instantiate=instantiate)
    try:
        results = measure_with(builder, runner)(_inputs("good", "segfault", "good", "good_vec", "wrong"))
    finally:
        runner.close()
    kinds = [r.error_kind for r in results]
    assert kinds == [ErrorKind.NO_ERROR, ErrorKind.RUNTIME_ERROR, ErrorKind.NO_ERROR, ErrorKind.NO_ERROR,
                     ErrorKind.WRONG_ANSWER]
    assert all(len(r.costs) == 3 for r in results if r.ok)
    assert [kind for kind, _ in runner.asked] == ["hold"] * 5 + ["time", "alone"]
    assert runner.asked[5] == ("time", [2, 3])


def test_compile_timeout_is_reported(tmp_path):
    builder = LocalBuilder(n_parallel=1, timeout=0.001, cache_dir=tmp_path, instantiate=instantiate)
    (res,) = builder.build(_inputs("good"))
    assert res.error_kind is ErrorKind.COMPILE_TIMEOUT and res.artifact is None


def test_each_result_says_the_cache_mode_and_threads_it_was_timed_in(tmp_path):
    builder = LocalBuilder(n_parallel=1, cache_dir=tmp_path, instantiate=instantiate)
    for mode in ("warm", "cold", "flushed"):
        options = RunnerOptions(repeat=2, min_repeat_ms=1.0, threads=1, caches=mode, flush_bytes=1 << 20)
        assert options.flush() == (0 if mode == "warm" else 1 << 20)
        with LocalRunner(options) as runner:
            [result] = measure_with(builder, runner)(_inputs("good"))
        assert result.ok and (result.caches, result.threads) == (mode, 1) and len(result.costs) == 2
    assert RunnerOptions(caches="cold").flush() == 2 * llc_bytes() > 0
    with pytest.raises(ValueError, match="unknown cache mode 'hot'"):
        RunnerOptions(caches="hot")


def test_after_a_flush_only_the_inputs_that_are_not_weights_are_read_back():
    assert activations(3, [1, 2]) == (0,)  # a convolution: its filter and bias stay cold
    assert activations(2, []) == (0, 1)
    assert activations(2, None) == ()  # flushed: nothing read back
