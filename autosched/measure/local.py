"""Measurement on this machine: builds in parallel processes, runs one at a time in a child.

Build is not run: the builder lowers and compiles candidates in a process pool (it never runs
them); the runner hands each built kernel to a long-lived worker process that checks its output
against the task's reference and times it in C. A crash or a hang kills only the worker, which
is restarted for the next candidate.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from autosched.codegen import CodegenError, CompileError, CRenderer
from autosched.codegen.gcc import compile_c, target_flags
from autosched.errors import AutoschedError
from autosched.lower import lower
from autosched.lower.ir import PrimFunc
from autosched.measure.caches import CACHE_MODES, llc_bytes
from autosched.measure.fold import constant_inputs, fold_weights
from autosched.measure.interface import Builder, Runner
from autosched.measure.lifetime import die_with_parent, signals_deferred
from autosched.measure.record import BuildResult, ErrorKind, MeasureInput, MeasureResult, TaskLike
from autosched.schedule import ScheduleError
from autosched.tempdirs import temp_dir
from autosched.templates import get_template

#: (MeasureInput) -> (Schedule, argument tensors: inputs first, then outputs)
Instantiate = Callable[[MeasureInput], tuple]


def instantiate_from_template(inp: MeasureInput) -> tuple:
    """The registered template of the task's op and target, applied to the config."""
    template = get_template(inp.task.op, inp.target.kind)
    return template.apply(inp.task, inp.config, inp.target)


def _build_one(inp: MeasureInput, instantiate: Instantiate, cache_dir: str | None, compile_timeout: float) -> BuildResult:
    start = time.perf_counter()
    try:
        sched, args = instantiate(inp)
        args, folded = fold_weights(sched, args, inp.task)  # timed as a built model runs it
        func = lower(sched, args, "candidate")
        renderer = CRenderer()
        code = renderer.render(func)
        flags = target_flags(inp.target)
        pre = [(renderer.render(f.func), f.func, renderer.symbol(f.func), f.sources) for f in folded]
    except (AutoschedError, ScheduleError, CodegenError, ValueError, KeyError, IndexError, TypeError) as e:
        return BuildResult(None, ErrorKind.INSTANTIATION_ERROR, f"{type(e).__name__}: {e}", time.perf_counter() - start)
    return compile_candidate(code, func, renderer.symbol(func), flags, cache_dir, compile_timeout, start, pre)


def compile_candidate(code: str, func: PrimFunc, symbol: str, flags: Sequence[str], cache_dir: str | None,
                      timeout: float, start: float, folded: Sequence[tuple] = (), **fields: Any) -> BuildResult:
    """gcc-compile generated C into a library the worker loads; failures are results. `folded`:
    (code, func, symbol, sources) of each precomputed stage's kernel (`fold.fold_weights`), which
    the worker runs on the inputs first; they are listed in the manifest, with `fields`."""
    cache = Path(cache_dir) if cache_dir else None
    try:
        lib = compile_c(code, flags, cache_dir=cache, timeout=timeout)
        pre = [{"lib": str(compile_c(c, flags, cache_dir=cache, timeout=timeout)), "symbol": sym, "sources": list(src),
                "params": [{"name": b.name, "dtype": b.dtype, "shape": list(b.shape)} for b in f.params]}
               for c, f, sym, src in folded]
    except CompileError as e:
        kind = ErrorKind.COMPILE_TIMEOUT if "did not finish" in str(e) else ErrorKind.COMPILE_ERROR
        return BuildResult(None, kind, str(e), time.perf_counter() - start)
    manifest = lib.with_suffix(".json")
    write_manifest(manifest, func, symbol, lib=str(lib), **({"folded": pre} if pre else {}), **fields)
    return BuildResult(str(manifest), ErrorKind.NO_ERROR, "", time.perf_counter() - start)


def write_manifest(path: Path, func: PrimFunc, symbol: str, **fields) -> None:
    """What a runner needs to load a built candidate (symbol, parameters, `fields`), written
    atomically and only when it changes: parallel builders of identical code share it (one
    library built by two back ends, the plain emulation and the one with a static estimate,
    gets the latest's fields)."""
    params = [{"name": b.name, "dtype": b.dtype, "shape": list(b.shape)} for b in func.params]
    text = json.dumps({**fields, "symbol": symbol, "params": params})
    if path.exists() and path.read_text() == text:
        return
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class LocalBuilder(Builder):
    """Compiles candidates in `n_parallel` processes; each build may take `timeout` seconds.

    `build_one` builds one candidate (as C for a CPU, with gcc) in a child; other back ends'
    builders (nvcc, the CUDA emulation) replace it and keep the pool, the timeouts and the
    failure handling. It is public: a Ray task builds with the same function.
    """

    build_one = staticmethod(_build_one)

    def __init__(self, n_parallel: int | None = None, timeout: float = 60.0, cache_dir: Path | None = None,
                 instantiate: Instantiate = instantiate_from_template):
        self.n_parallel = n_parallel or os.cpu_count() or 1
        self.timeout, self.cache_dir, self.instantiate = timeout, cache_dir, instantiate

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        cache = str(self.cache_dir) if self.cache_dir else None
        # fork: templates registered at run time (tests, plugins) exist in the children too. A
        # Ctrl-C or a kill while the pool starts interrupts once `pool` is set (`signals_deferred`).
        pool, finished = None, False
        try:
            with signals_deferred():
                pool = multiprocessing.get_context("fork").Pool(self.n_parallel, die_with_parent, (os.getpid(),))
            pending = [pool.apply_async(self.build_one, (inp, self.instantiate, cache, self.timeout))
                       for inp in inputs]
            out = [self._result(p) for p in pending]
            finished = all(p.ready() for p in pending)
        finally:
            # a hung build, an error or Ctrl-C: kill the workers now, never wait on them at exit
            if pool is not None:
                if finished:
                    pool.close()
                else:
                    pool.terminate()
                pool.join()
        return out

    def _result(self, pending) -> BuildResult:
        try:
            return pending.get(timeout=self.timeout + 30)
        except multiprocessing.TimeoutError:
            return BuildResult(None, ErrorKind.COMPILE_TIMEOUT, f"building took longer than {self.timeout:.0f} s",
                               self.timeout)
        except Exception as e:  # noqa: BLE001 - a broken build process is one failed trial
            return BuildResult(None, ErrorKind.COMPILE_ERROR, f"{type(e).__name__}: {e}", 0.0)


#: the share of a rounding kernel's outputs that may differ from the reference beyond the
#: tolerance (`rounds`): a quantized model's kernel rounds its float sums to integer steps, and
#: sums added in another order than the reference's (Winograd, another tile) put a value near a
#: half on the other side of it, one step away. A QDQ ResNet-18's default 56x56 kernel failed
#: the check so ("got -246.11, expected -248.52": one step of 2.41) and no config of it could be
#: tuned. A wrong kernel misses far more than this share.
ROUNDING_OUTLIERS = 0.01


def rounds(task: TaskLike) -> bool:
    """Whether a task's kernel rounds floats to integers (Round, Floor or Ceil in its ops)."""
    ops = {task.op, *(e.op for e in getattr(task, "epilogue", ()))}
    return bool(ops & {"Round", "Floor", "Ceil"})


@dataclass(frozen=True)
class RunnerOptions:
    """How candidates are timed and checked."""
    repeat: int = 3
    min_repeat_ms: float = 40.0
    caches: str = "warm"          # the cache state each call is timed in: warm, cold or flushed (`caches.py`)
    flush_bytes: int = 0          # bytes written before each cold or flushed call (0: twice the last-level cache)
    timeout: float = 10.0         # seconds per candidate beyond its timing budget
    threads: int = os.cpu_count() or 1  # 0: the cores of the machine that times (a fleet node's own)
    rtol: float = 1e-3
    atol: float = 1e-4            # per unit of the reference output's largest magnitude (at least 1)
    stop_factor: float = 4.0      # stop timing a candidate once it is this much slower than the task's best

    def __post_init__(self) -> None:
        if self.caches not in CACHE_MODES:
            raise ValueError(f"unknown cache mode {self.caches!r}: expected one of {', '.join(CACHE_MODES)}")

    def flush(self) -> int:
        """Bytes written before each timed call (0: none, the warm mode)."""
        return 0 if self.caches == "warm" else self.flush_bytes or 2 * llc_bytes()


class LocalRunner(Runner):
    """Runs built candidates one at a time in a restartable worker process."""

    #: the worker's module (`python -m`); a device runner names its own, speaking the same protocol
    WORKER = "autosched.measure.worker"
    #: whether kernels run on this machine's cores, so that records say how many threads they had
    ON_HOST = True
    #: whether a batch's candidates are timed together, one repeat of each in turn (`_run_interleaved`)
    INTERLEAVED = True

    def __init__(self, options: RunnerOptions = RunnerOptions()):
        self.options = options
        self._proc: subprocess.Popen[str] | None = None
        self._dir = temp_dir("run")
        self._data: dict[str, str] = {}
        self._best: dict[str, float] = {}

    def time_in(self, caches: str) -> bool:
        self.options = replace(self.options, caches=caches)
        return True

    def flush_bytes(self) -> int:
        """Bytes written before each cold or flushed call: by default twice this machine's last-level cache."""
        return self.options.flush()

    # --- task data ----------------------------------------------------------------------
    def _data_file(self, task) -> str:
        if task.key not in self._data:
            inputs = task.random_inputs(0)
            outputs = task.reference(inputs)
            path = Path(self._dir.name) / f"task{len(self._data)}.npz"
            arrays = {f"in{i}": np.asarray(a, order="C") for i, a in enumerate(inputs)}  # 0-d stays 0-d
            arrays.update({f"out{i}": np.asarray(a, order="C") for i, a in enumerate(outputs)})
            np.savez(path, n_inputs=len(inputs), n_outputs=len(outputs), **arrays)  # type: ignore[arg-type]  # numpy's stub matches **arrays against allow_pickle: bool
            self._data[task.key] = str(path)
        return self._data[task.key]

    # --- worker ---------------------------------------------------------------------------
    def _worker(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            with signals_deferred():  # a Ctrl-C now interrupts once the worker is known, to be killed
                self._proc = subprocess.Popen([sys.executable, "-m", self.WORKER, str(os.getpid())],
                                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                              start_new_session=True)
        return self._proc

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
            self._proc = None

    def close(self) -> None:
        self._kill()
        self._dir.cleanup()

    def __enter__(self) -> LocalRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- running ----------------------------------------------------------------------------
    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]:
        if not self.INTERLEAVED or len(inputs) < 2:
            return [self._run_one(inp, b) for inp, b in zip(inputs, builds)]
        return self._run_interleaved(inputs, builds)

    def _request(self, inp: MeasureInput, build: BuildResult) -> dict[str, Any]:
        """What the worker needs to check and time one candidate."""
        o = self.options
        best = self._best.get(inp.task.key)
        # a target that rounds (cuda -precision=tf32, fp16, bf16) is checked within what its rounding implies
        rtol, atol = (max(mine, implied) for mine, implied in zip((o.rtol, o.atol), inp.target.tolerance))
        return {"manifest": build.artifact, "data": self._data_file(inp.task), "threads": self._threads(),
                "repeat": o.repeat, "min_repeat_ms": o.min_repeat_ms, "flush_bytes": self.flush_bytes(),
                "weights": constant_inputs(inp.task) if o.caches == "cold" else None,
                "stop_above": best * o.stop_factor if best and o.stop_factor else 0.0, "rtol": rtol, "atol": atol,
                "outliers": ROUNDING_OUTLIERS if rounds(inp.task) else 0.0}

    def _threads(self) -> int:
        return self.options.threads or os.cpu_count() or 1

    def _limit(self, candidates: int) -> float:
        """Seconds the worker may take to time `candidates` (beyond `timeout`)."""
        o = self.options
        return o.timeout + 3 * candidates * o.repeat * o.min_repeat_ms / 1e3

    def _exchange(self, req: dict[str, Any], limit: float, build_s: float) -> dict[str, Any] | MeasureResult:
        """The worker's reply to `req`, or the failure it came to: no reply within `limit` seconds
        (the worker is killed) or a dead worker (a kernel crashed it); either way the next
        request gets a fresh worker."""
        proc = self._worker()
        stdin, stdout = proc.stdin, proc.stdout
        if stdin is None or stdout is None:  # _worker always opens both pipes
            raise RuntimeError("the measurement worker has no stdin/stdout pipe")
        try:
            stdin.write(json.dumps(req) + "\n")
            stdin.flush()
            ready, _, _ = select.select([stdout], [], [], limit)
            line = stdout.readline() if ready else None
        except (BrokenPipeError, OSError):
            line = ""
        now = time.time()
        if line is None:
            self._kill()
            return MeasureResult.failure(ErrorKind.RUN_TIMEOUT, f"no result within {limit:.1f} s; worker restarted",
                                         build_s, now)
        if not line:
            code = proc.wait()
            self._proc = None
            why = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
            return MeasureResult.failure(ErrorKind.RUNTIME_ERROR, f"the kernel killed its worker ({why}); "
                                         "worker restarted", build_s, now)
        reply = json.loads(line)
        if "error" in reply:
            return MeasureResult.failure(ErrorKind[reply["error"]], reply["msg"], build_s, now)
        return reply

    def _timed(self, inp: MeasureInput, costs: Sequence[float], build_s: float) -> MeasureResult:
        result = MeasureResult(tuple(costs), ErrorKind.NO_ERROR, "", build_s, time.time(), caches=self.options.caches,
                               threads=self._threads() if self.ON_HOST else None)
        best = self._best.get(inp.task.key)
        self._best[inp.task.key] = min(result.cost, best or result.cost)
        return result

    def _run_one(self, inp: MeasureInput, build: BuildResult) -> MeasureResult:
        reply = self._exchange(self._request(inp, build), self._limit(1), build.build_s)
        return reply if isinstance(reply, MeasureResult) else self._timed(inp, reply["costs"], build.build_s)

    def _run_interleaved(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]:
        """Check every candidate one by one (a crash or a wrong answer is its own result), then
        time those that passed together, one repeat of each in turn (`worker.time_held`): the
        candidates of a batch then meet the host in the same states, and their repeats are
        spread over the batch. Each repeat is given `min_repeat_ms × (repeat + 1) / (2 × repeat)`,
        so that a batch takes as long as timing its candidates one by one did (each repeat then
        has its own calibration). A candidate whose check crashed the worker lost the others
        held so far, and a timing that failed as a whole loses them all: those are measured one
        by one instead."""
        o = self.options
        out: list[MeasureResult | None] = [None] * len(inputs)
        held: dict[int, float] = {}  # slot → its stop_above
        alone: list[int] = []
        for k, (inp, build) in enumerate(zip(inputs, builds)):
            req = {**self._request(inp, build), "hold": k}
            reply = self._exchange(req, o.timeout, build.build_s)
            if isinstance(reply, MeasureResult):
                out[k] = reply
                if self._proc is None:  # the worker died, and the kernels it held with it
                    alone += list(held)
                    held.clear()
            elif "held" in reply:
                held[k] = req["stop_above"]
            else:  # an emulated GPU kernel's static estimate
                out[k] = self._timed(inp, reply["costs"], build.build_s)
        if held:
            req = {"slots": {str(k): stop for k, stop in held.items()}, "repeat": o.repeat,
                   "min_repeat_ms": o.min_repeat_ms * (o.repeat + 1) / (2 * o.repeat), "flush_bytes": self.flush_bytes()}
            reply = self._exchange(req, self._limit(len(held)), 0.0)
            if isinstance(reply, MeasureResult):
                alone += list(held)
            else:
                for k in held:
                    out[k] = self._timed(inputs[k], reply["costs"][str(k)], builds[k].build_s)
        for k in sorted(alone):
            out[k] = self._run_one(inputs[k], builds[k])
        assert all(r is not None for r in out)
        return [r for r in out if r is not None]
