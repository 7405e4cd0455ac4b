"""The seams between tuners and devices: a Builder compiles, a Runner times.

Build is not run: builders may compile many candidates in parallel processes
that never touch the device, runners time one candidate at a time. Tuners see
neither; they call a `MeasureBatch`, which `measure_with` makes from a pair.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from autosched.measure.record import BuildResult, MeasureInput, MeasureResult, RecordError
from autosched.target import Target

MeasureBatch = Callable[[Sequence[MeasureInput]], list[MeasureResult]]


class Builder(ABC):
    @abstractmethod
    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        """One BuildResult per input, in order; failures are results, not exceptions."""


class Runner(ABC):
    @abstractmethod
    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]:
        """One MeasureResult per input, in order. Only successful builds are passed."""

    def measured_target(self, target: Target) -> Target:
        """`target` as this runner's device describes it; records are stored under it. Runners
        whose device the target string already fingerprints (the CPU, read at parse) keep it."""
        return target

    def time_in(self, caches: str) -> bool:
        """Time the next candidates in cache mode `caches` (`autosched.measure.caches`); False
        where this runner cannot, and keeps timing as it did (warm, unless its options say)."""
        return caches == "warm"

    def cache_bytes(self) -> int | None:
        """The last-level cache of what runs the kernels, which decides "auto" (None: this machine's)."""
        return None


class PipelinedRunner(Runner):
    """A runner that starts timing each candidate as soon as its build is done, so the rest
    of a batch builds while the first candidates run, and that takes the next batch before the
    current one is done, so its builds overlap the current one's timings (a fleet keeps
    builders and devices busy)."""

    @abstractmethod
    def submit(self, builder: Builder, inputs: Sequence[MeasureInput]) -> int:
        """Start building (and, as builds finish, timing) `inputs`; a ticket for `wait`."""

    @abstractmethod
    def wait(self, ticket: int) -> list[MeasureResult]:
        """One MeasureResult per input of the ticket's batch, in order, build failures included."""

    def measure(self, builder: Builder, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        """One batch, start to end."""
        return self.wait(self.submit(builder, inputs))


def measure_with(builder: Builder, runner: Runner) -> MeasureBatch:
    """Measure batches with this pair: a PipelinedRunner overlaps building and timing
    itself, any other runner gets `build_then_run`."""
    if isinstance(runner, PipelinedRunner):
        return lambda inputs: _checked("runner", inputs, runner.measure(builder, inputs))
    return lambda inputs: build_then_run(builder, runner, inputs)


def build_then_run(builder: Builder, runner: Runner, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
    """Build every input, run those that built, and give build failures their
    result directly, so runners never see a failed build."""
    builds = builder.build(inputs)
    check_count("builder", inputs, builds)
    built = [i for i, b in enumerate(builds) if b.ok]
    ran = runner.run([inputs[i] for i in built], [builds[i] for i in built])
    check_count("runner", built, ran)
    ran_in_order = iter(ran)
    return [
        next(ran_in_order) if b.ok else MeasureResult.failure(b.error_kind, b.error_msg, b.build_s, time.time())
        for b in builds
    ]


def _checked(who: str, inputs: Sequence[object], outputs: list[MeasureResult]) -> list[MeasureResult]:
    check_count(who, inputs, outputs)
    return outputs


def check_count(who: str, inputs: Sequence[object], outputs: Sequence[object]) -> None:
    if len(outputs) != len(inputs):
        raise RecordError(f"{who} returned {len(outputs)} results for {len(inputs)} inputs")

