"""Back ends: one record per way of compiling and measuring a target kind, in one registry.

A target string says what the code is for (`llvm`, `cuda -arch=sm_80`); a back end says how
autosched gets there: which renderer writes the source, which compiler builds it, which builder
and runner measure a candidate, what a built model's library is and which Ray resources its
builds and timings hold. CUDA has two back ends: nvcc with a GPU, and the CPU emulation of the
CUDA execution model (gcc and the CPU worker) for proving kernels correct where there is no
GPU. Every call site (the command line, `autosched.tune`/`build`/`tune_task`, the model build,
the Ray fleet) asks `backend_for` instead of deciding on its own, so they cannot disagree; a new
back end is one record in `BACKENDS`.

The hardware fingerprint that keys tuning records is the target's (`Target.parse`, per target
kind in `autosched.target`); a back end's runner may refine it with the device it measures on
(`Runner.measured_target`: the GPU runner names its GPU).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from autosched.codegen.c import CRenderer
from autosched.codegen.cstyle import CStyleRenderer
from autosched.codegen.cuda import CudaRenderer
from autosched.codegen.cuda_emulate import EmulationRenderer
from autosched.codegen.gcc import target_flags
from autosched.compile.cuda import cuda_library
from autosched.compile.executor import c_library
from autosched.errors import AutoschedError
from autosched.measure.devices import cpu_device, gcc_toolchain, gpu_device, nvcc_toolchain
from autosched.measure.emulate import EMULATION_RUNNER, EmulationBuilder
from autosched.measure.gpu import GpuRunner
from autosched.measure.interface import Builder, Runner
from autosched.measure.local import LocalBuilder, LocalRunner, RunnerOptions
from autosched.measure.nvcc import NvccBuilder
from autosched.target import Target

#: (RunnerOptions) -> a runner a back end makes (and closes): LocalRunner, GpuRunner, or a test's double of one
RunnerFactory = Callable[[RunnerOptions], LocalRunner]
#: (graph, calls, kernels, renderer, weights, memory plan, binary target) -> (source, built library)
ModelLibrary = Callable[..., tuple[str, Path]]


def _same(target: Target) -> Target:
    """A back end whose binary runs on the target's own device."""
    return target


def _host(target: Target) -> Target:
    """A back end whose binary runs on this CPU, whatever the target (an emulation)."""
    return Target.parse("llvm")


@dataclass(frozen=True)
class Backend:
    """How one kind of target is compiled and measured.

    `binary_target` maps a target to the one the compiled binary runs on (the host CPU for the
    emulation, whose kernels are cuda code but whose program is a CPU's): compiler flags, the
    built model's ISA and the Ray resources follow it. `device_resource`/`toolchain_resource`
    name, from that binary target, the Ray resource a timing holds (its device) and the one a
    build holds (its compiler's slot). `gpus` is Ray's num_gpus per measuring actor (Ray then
    sets the actor's CUDA_VISIBLE_DEVICES to its GPU); where it is 0 the kernels run on the
    node's cores, so timings exclude the node's builds (a GPU's do not: a host build barely moves
    a GPU kernel's time, and the GPUs of one node would otherwise wait for each other).
    `emulated`: the kernels run in an emulation of the target on the CPU, which proves candidates
    correct; their costs are the static model's estimates, recorded under `Target.as_emulated`.
    """

    name: str
    target_kind: str
    renderer: type[CStyleRenderer]
    compiler: str  # the toolchain its builds and model libraries need: "gcc" or "nvcc"
    builder: type[LocalBuilder]  # its `build_one` builds one candidate in any process (a pool's, a Ray task's)
    runner: RunnerFactory
    runner_options: RunnerOptions | None  # None: the runner's defaults (this machine's cores)
    binary_target: Callable[[Target], Target]
    device_resource: Callable[[Target], str]
    toolchain_resource: Callable[[Target], str]
    gpus: int
    model_library: ModelLibrary
    source_suffix: str  # of a built model's source, written beside its library
    emulated: bool

    @property
    def on_host(self) -> bool:
        """Whether measured kernels run on the cores of the node that measures them."""
        return self.gpus == 0

    def device(self, target: Target) -> str:
        """The Ray resource of a device that may time `target`'s candidates."""
        return self.device_resource(self.binary_target(target))

    def toolchain(self, target: Target) -> str:
        """The Ray resource of a build slot for `target`'s candidates."""
        return self.toolchain_resource(self.binary_target(target))

    def flags(self, target: Target) -> tuple[str, ...]:
        """gcc flags of a binary for `target` (gcc back ends only: nvcc takes the arch)."""
        return target_flags(self.binary_target(target))

    def make_runner(self, options: RunnerOptions | None = None) -> LocalRunner:
        """A runner on this machine; GpuRunner raises GpuUnavailableError where there is no GPU."""
        return self.runner(options or self.runner_options or RunnerOptions())

    @contextlib.contextmanager
    def measuring(self, builder: Builder | None = None,
                  runner: Runner | None = None) -> Iterator[tuple[Builder, Runner]]:
        """The caller's builder and runner, or this back end's on this machine where none is
        given; a runner made here is closed after (one passed in stays the caller's)."""
        if runner is not None:
            yield builder or self.builder(), runner
            return
        made = self.make_runner()
        try:
            yield builder or self.builder(), made
        finally:
            made.close()


CPU = Backend(name="llvm", target_kind="llvm", renderer=CRenderer, compiler="gcc", builder=LocalBuilder,
              runner=LocalRunner, runner_options=None, binary_target=_same, device_resource=cpu_device,
              toolchain_resource=gcc_toolchain, gpus=0, model_library=c_library, source_suffix=".c",
              emulated=False)
CUDA = Backend(name="cuda", target_kind="cuda", renderer=CudaRenderer, compiler="nvcc", builder=NvccBuilder,
               runner=GpuRunner, runner_options=None, binary_target=_same, device_resource=gpu_device,
               toolchain_resource=nvcc_toolchain, gpus=1, model_library=cuda_library, source_suffix=".cu",
               emulated=False)
CUDA_EMULATION = Backend(name="cuda-emulate", target_kind="cuda", renderer=EmulationRenderer, compiler="gcc",
                         builder=EmulationBuilder, runner=LocalRunner, runner_options=EMULATION_RUNNER,
                         binary_target=_host, device_resource=cpu_device, toolchain_resource=gcc_toolchain, gpus=0,
                         model_library=c_library, source_suffix=".c", emulated=True)

#: back-end name -> record; the name of a target kind's own back end is the kind
BACKENDS: Mapping[str, Backend] = {b.name: b for b in (CPU, CUDA, CUDA_EMULATION)}
#: target kind -> the back end that runs its kernels in an emulation on this CPU
EMULATIONS: Mapping[str, Backend] = {b.target_kind: b for b in BACKENDS.values() if b.emulated}


def backend_for(target: Target | str, emulate: bool = False) -> Backend:
    """The back end of `target`, or with `emulate` the one running its kernels on this CPU."""
    target = Target.parse(target) if isinstance(target, str) else target
    if emulate:
        if target.kind not in EMULATIONS:
            kinds = " or ".join(sorted(EMULATIONS))
            raise AutoschedError(f"--emulate runs CUDA kernels on the CPU; target {target} is not a {kinds} target")
        return EMULATIONS[target.kind]
    try:
        return BACKENDS[target.kind]
    except KeyError:
        raise AutoschedError(f"no back end for target {target}; known: {', '.join(sorted(BACKENDS))}") from None


def renderer_for(name: str) -> CStyleRenderer:
    """A fresh renderer of the back end `name` ("llvm", "cuda", "cuda-emulate")."""
    try:
        return BACKENDS[name].renderer()
    except KeyError:
        raise AutoschedError(f"no code generator for back end {name!r}; known: {', '.join(sorted(BACKENDS))}") \
            from None


def device_resource(target: Target, emulate: bool = False) -> str:
    """The Ray resource of a device that may time `target`'s candidates."""
    return backend_for(target, emulate).device(target)


def toolchain_resource(target: Target, emulate: bool = False) -> str:
    """The Ray resource of a build slot for `target`'s candidates."""
    return backend_for(target, emulate).toolchain(target)


__all__ = ["BACKENDS", "CPU", "CUDA", "CUDA_EMULATION", "Backend", "backend_for", "device_resource",
           "renderer_for", "toolchain_resource"]
