"""What every CPU template shares: the task's argument tensors, the check that a config
belongs to the task's space, and the stage treatments that do not depend on the op.

Spaces are built so that every point is a schedule the task can run (blocks are divisors,
panels are padded). The one refusal is a register tile so large (for the target's register
file) that gcc needs minutes for its unrolled body and the result spills anyway: `InvalidConfigError`, a ValueError, which the
builder reports as INSTANTIATION_ERROR without compiling.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from autosched import te
from autosched.compute import epilogue_fn
from autosched.ops.epilogue import EPILOGUE_TAG, EpilogueFn
from autosched.schedule import Schedule
from autosched.space import Config, ConfigError, ConfigSpace
from autosched.target import CpuCapabilities, Target
from autosched.task import Task
from autosched.te import Tensor
from autosched.templates import TemplateError

_DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2}

#: an unrolled register tile may hold this many times the target's vector registers in
#: accumulators: beyond, it only spills, and gcc takes minutes to unroll it
ACCUMULATORS_PER_REGISTER = 2


class InvalidConfigError(TemplateError, ValueError):
    """A point of the space that the template refuses to build."""


def cpu_capabilities(target: Target) -> CpuCapabilities:
    caps = target.capabilities
    if not isinstance(caps, CpuCapabilities):
        raise TemplateError(f"target {target} is not a CPU target")
    return caps


def max_accumulators(target: Target) -> int:
    """The largest register tile, in vectors, a template builds for `target`."""
    return ACCUMULATORS_PER_REGISTER * cpu_capabilities(target).vector_registers


def check_register_tile(accumulators: int, config: Config, target: Target) -> None:
    limit = max_accumulators(target)
    if accumulators > limit:
        raise InvalidConfigError(f"register tile of {accumulators} vector accumulators exceeds {limit} "
                                 f"({ACCUMULATORS_PER_REGISTER} × the {cpu_capabilities(target).vector_registers} "
                                 f"vector registers of {target.isa}; config {config.index}): it spills, and gcc "
                                 "takes minutes to unroll it")


@dataclass(frozen=True)
class TaskTensors:
    """The kernel's arguments in `Task.input_values` order, split the way computes take them."""

    args: tuple[Tensor, ...]  # every input, anchor operands first, then the epilogue's extras
    anchor: tuple[Tensor, ...]
    epilogue: tuple[EpilogueFn, ...]  # () or the one function computing the whole fused epilogue


def task_tensors(task: Task) -> TaskTensors:
    args = tuple(te.placeholder(v.shape, v.dtype, name=v.name) for v in task.input_values)
    n = len(task.shapes)
    fn = epilogue_fn(task.epilogue, args[n:])
    return TaskTensors(args, args[:n], (fn,) if fn is not None else ())


def vector_lanes(target: Target, dtype: str) -> int:
    """Elements of `dtype` in the widest SIMD register the target allows."""
    caps = cpu_capabilities(target)
    if dtype not in _DTYPE_BYTES:
        raise TemplateError(f"no CPU template handles dtype {dtype}")
    return caps.lanes(_DTYPE_BYTES[dtype])


def inline_epilogue(s: Schedule, out: Tensor, tags: Sequence[str] = ()) -> None:
    """Inline every epilogue stage (and stages with one of `tags`) except the output's own,
    so the anchor's result reaches memory once, through the whole chain."""
    for st in s.stages:
        if st.op is not out.op and (st.op.tag == EPILOGUE_TAG or st.op.tag in tags):
            s.compute_inline(st)


def nearest(values: tuple[int, ...], wanted: int) -> int:
    """The knob value nearest `wanted`, the larger of two as near (a fallback's rule of thumb
    mapped onto the task's space)."""
    return min(values, key=lambda v: (abs(v - wanted), -v))


def divisors(n: int, at_most: int | None = None) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0 and (at_most is None or d <= at_most))


class CpuTemplate(ABC):
    """A template's space is a pure function of (task, target); `apply` refuses a config from
    any other space, because its knob values would be read against the wrong shapes."""

    name: str

    @abstractmethod
    def space(self, task: Task, target: Target) -> ConfigSpace: ...

    @abstractmethod
    def _schedule(self, task: Task, config: Config, target: Target) -> tuple[Schedule, list[Tensor]]: ...

    def fallback(self, task: Task, target: Target) -> Config | None:
        """The config an untuned build uses (TVM's "fallback config"), or None where the op
        library's default schedule is the better start. A rule of thumb, not a search."""
        return None

    def register_tile(self, task: Task, config: Config, target: Target) -> int | None:
        """The vector accumulators of `config`'s register tile where the template bounds it
        (`check_register_tile`), else None."""
        return None

    def valid(self, task: Task, config: Config, target: Target) -> bool:
        """Whether `apply` builds `config`, judged without building it: the tuners never propose
        what it refuses. On an AVX2 host 117 of a 300-trial ResNeXt-50 tune's trials were register
        tiles of 33-84 accumulators that `apply` refused, each spent as a trial."""
        tile = self.register_tile(task, config, target)
        return tile is None or tile <= max_accumulators(target)

    def apply(self, task: Task, config: Config, target: Target) -> tuple[Schedule, list[Tensor]]:
        """(schedule, [inputs in Task.input_values order..., output]) for `config`."""
        expected = self.space(task, target)
        if config.space != expected:
            raise ConfigError(f"config {config.index} is from space {config.space.template!r} "
                              f"({config.space.fingerprint}), not from {self.name}'s space {expected.fingerprint} "
                              f"for task {task.key}")
        return self._schedule(task, config, target)
