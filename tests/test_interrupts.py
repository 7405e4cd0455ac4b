"""An interrupt that native code swallows (numpy.random's Cython ABC registration calls
PyErr_Clear) still stops the command: its long loops raise it again (`autosched.interrupts`)."""
import os
import signal
import subprocess
import sys
import time

import pytest
from process_helpers import ROOT, _as_in_a_terminal, finish, ours, swallow
from task_helpers import PerTaskCost, PipelinedPerTaskCost

from autosched import interrupts
from autosched.cli.app import terminate_as_interrupt
from autosched.compile.evaluate import alternate_rounds
from autosched.frontend.onnx import load_onnx
from autosched.graph.passes import optimize
from autosched.measure import NullBuilder
from autosched.task import extract_tasks
from autosched.task_scheduler import ROUNDS_IN_FLIGHT, tune_tasks


@pytest.mark.parametrize("settle_s", [0.0, 0.15])  # the check in the timed runs; in the settling runs
def test_a_swallowed_interrupt_stops_the_timing_loop(settle_s):
    """Without the check this times 10^7 runs (seconds) and raises nothing."""
    with terminate_as_interrupt() as received:
        swallow(signal.SIGTERM)
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            alternate_rounds([lambda: None], runs=10**7, block=10**7, settle_s=settle_s)
    assert received == [signal.SIGTERM] and time.monotonic() - start < 1


@pytest.mark.parametrize("runner", [PerTaskCost, PipelinedPerTaskCost])
def test_a_swallowed_interrupt_stops_tuning_at_the_next_batch(small_model, runner):
    tasks = extract_tasks(optimize(load_onnx(small_model))).tasks
    batches = []

    class Swallowing(runner):
        def run(self, inputs, builds):
            batches.append(len(inputs))
            if len(batches) == 1:
                swallow(signal.SIGTERM)
            return super().run(inputs, builds)

    with terminate_as_interrupt(), pytest.raises(KeyboardInterrupt):
        tune_tasks(tasks, "llvm", 400, NullBuilder(), Swallowing({t.key: 1e-3 for t in tasks}), tuner="random",
                   round_trials=4)
    assert 1 <= len(batches) <= ROUNDS_IN_FLIGHT  # the pipelined runner had the next round submitted


def test_the_record_is_reset_when_the_handler_is_removed():
    with terminate_as_interrupt() as received:
        assert interrupts.received is received
        swallow(signal.SIGTERM)
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
    interrupts.check()
    with terminate_as_interrupt() as again:
        assert again == [] and interrupts.received is again
        interrupts.check()
    assert received == [signal.SIGTERM]  # the caller's record outlives the handler, for its exit status


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_ctrl_c_is_raised_every_time_and_recorded_and_stays_ignored_where_it_was(sigint):
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN if sigint == "ignored" else signal.default_int_handler)
    try:
        with terminate_as_interrupt() as received:
            if sigint == "ignored":
                assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            else:
                swallow(signal.SIGINT)
                swallow(signal.SIGINT)  # not ignored as a second SIGTERM is: Ctrl-C twice still raises
                with pytest.raises(KeyboardInterrupt):
                    interrupts.check()
        assert received == ([] if sigint == "ignored" else [signal.SIGINT, signal.SIGINT])
        assert signal.getsignal(signal.SIGINT) is (signal.SIG_IGN if sigint == "ignored" else signal.default_int_handler)
    finally:
        signal.signal(signal.SIGINT, previous)


#: `autosched bench` whose interrupt is swallowed once, right after its build (argv: the signal, then bench's)
SWALLOWING_BENCH = """
import sys
import autosched.cli.model as model
from autosched.cli.app import main
from process_helpers import swallow

sample_inputs = model.sample_inputs

def swallowing(*args):
    swallow(int(sys.argv[1]))
    return sample_inputs(*args)

model.sample_inputs = swallowing
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_bench_whose_interrupt_native_code_swallowed_still_stops(small_model, tmp_path, signum):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
           "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen([sys.executable, "-c", SWALLOWING_BENCH, str(int(signum)), "bench", str(small_model),
                             "--runs", "1000000", "--db", str(tmp_path / "t.db")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, preexec_fn=_as_in_a_terminal)
    try:
        _, err = finish(proc, 120)
    finally:
        proc.kill()  # a command that ran on must not outlive the test
    assert proc.returncode == 128 + signum and err == "interrupted\n", err
    assert ours(tmp) == []
