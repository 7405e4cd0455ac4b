"""Local measurement: real gcc builds in a process pool, real runs in a restartable worker.

Faulty kernels are produced by test templates through the real pipeline: an index far out of
bounds (segfault), a reduction of 2^50 steps (never returns), an off-by-one body (wrong answer).
"""
from dataclasses import dataclass

import numpy as np
import pytest

from autosched import te
from autosched.measure.interface import measure_with
from autosched.measure.local import LocalBuilder, LocalRunner, RunnerOptions
from autosched.measure.record import ErrorKind, MeasureInput
from autosched.schedule import create_schedule
from autosched.space import ChoiceKnob, ConfigSpace
from autosched.target import Target

N = 256


@dataclass(frozen=True)
class AddOneTask:
    """y = x + 1 on N floats: the smallest real task."""
    key: str = "add_one_256"
    op: str = "test_add_one"

    def random_inputs(self, seed: int):
        return [np.random.default_rng(seed).standard_normal(N).astype(np.float32)]

    def reference(self, inputs):
        return [inputs[0] + 1.0]


SPACE = ConfigSpace("test_add_one", [ChoiceKnob("behaviour", ("good", "good_vec", "segfault", "hang", "wrong", "bad_split",
                                                             "rounding"))])


def instantiate(inp: MeasureInput):
    what = inp.config["behaviour"]
    x = te.placeholder((N,), name="x")
    if what == "segfault":
        y = te.compute((N,), lambda i: x[i * 50_000_000] + 1.0, name="y")
    elif what == "hang":
        r1, r2 = te.reduce_axis(1 << 25, "r1"), te.reduce_axis(1 << 25, "r2")
        acc = te.compute((1,), lambda i: te.sum(x[(r1 + r2) % N], [r1, r2]), name="acc")
        y = te.compute((N,), lambda i: x[i] + 1.0 + acc[0] * 0.0, name="y")
    elif what == "wrong":
        y = te.compute((N,), lambda i: x[i] + 2.0, name="y")
    elif what == "rounding":  # off by 2e-4 everywhere, near 0 too: what summation order does to long sums
        y = te.compute((N,), lambda i: x[i] + 1.0002, name="y")
    else:
        y = te.compute((N,), lambda i: x[i] + 1.0, name="y")
    s = create_schedule(y)
    if what == "good_vec":
        _, inner = s[y].split(s[y].op.axes[0], 16)
        s[y].vectorize(inner)
    if what == "bad_split":
        s[y].split(s[y].op.axes[0], 0)
    return s, [x, y]


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
