"""Checking and timing a built model against onnxruntime, the reference for correctness and speed.

Both sides get the same seeded inputs and the same thread count; latencies are measured in
alternating blocks of runs, so that noise on a shared machine lands on both alike while
neither runs beside the other's spinning thread pool, and medians are compared.
"""
from __future__ import annotations

import functools
import json
import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from autosched.errors import AutoschedError
from autosched.graph.ir import Graph
from autosched.graph.reference import random_inputs
from autosched.interrupts import check
from autosched.runtime import Model

log = logging.getLogger("autosched")
_NEWER_IR = re.compile(r"Unsupported model IR version: (?P<ir>\d+), max supported IR version: (?P<supported>\d+)")


@dataclass(frozen=True)
class OutputDiff:
    name: str
    max_abs: float
    max_rel: float
    ok: bool


@dataclass(frozen=True)
class Latency:
    autosched_ms: float
    onnxruntime_ms: float

    @property
    def ratio(self) -> float:
        """autosched's latency over onnxruntime's: below 1 is faster."""
        return self.autosched_ms / self.onnxruntime_ms


@dataclass(frozen=True)
class KernelTime:
    """One kernel of a build, or one node of onnxruntime's optimized graph, and its median time
    over `calls` timed calls."""
    op: str
    name: str
    ms: float
    calls: int


def onnxruntime_session(model_path: Path, threads: int, profile_prefix: Path | None = None):
    """A CPU session on `threads` threads; with `profile_prefix`, profiling into files that start so."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise AutoschedError(f"onnxruntime is needed to compare with it: {e}") from None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    if profile_prefix is not None:
        opts.enable_profiling = True
        opts.profile_file_prefix = str(profile_prefix)
    try:
        try:
            return ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
            if not (m := _NEWER_IR.search(str(e))):
                raise
            # onnx writes its newest IR version into every model it makes, and an onnxruntime
            # older than that onnx refuses the model even where no newer IR feature is used
            # (onnx 1.23 and onnxruntime 1.30). Relabelled, it loads, or fails on what it uses.
            model = onnx.load(str(model_path))
            model.ir_version = int(m.group("supported"))
            log.warning("%s: its IR version %s is newer than this onnxruntime's; the reference loads it as IR %s",
                        model_path, m.group("ir"), m.group("supported"))
            return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise AutoschedError(f"{model_path}: onnxruntime cannot load the model: {e} (`check --reference onnx` "
                             f"compares with ONNX's reference evaluator instead)") from None


#: opset 16's spellings of GridSample's modes, which ONNX's reference evaluator only knows by
#: opset 20's names
_GRID_SAMPLE_MODES = {b"bilinear": b"linear", b"bicubic": b"cubic"}


@dataclass(frozen=True)
class _Output:
    name: str


class ReferenceSession:
    """ONNX's reference evaluator (`onnx.reference`) behind onnxruntime's session interface, for
    `check` on models onnxruntime cannot load (Deformable DETR's GridSample on float64 grids). It
    is numpy, node by node: minutes for a model onnxruntime runs in milliseconds."""

    label = "ONNX's reference evaluator"

    def __init__(self, model_path: Path) -> None:
        from onnx.reference import ReferenceEvaluator

        try:
            model = onnx.load(str(model_path))
        except Exception as e:  # noqa: BLE001 - onnx raises its own exception types
            raise AutoschedError(f"{model_path}: cannot read the model: {e}") from None
        for node in model.graph.node:
            if node.op_type == "GridSample" and node.domain in ("", "ai.onnx"):
                for attr in node.attribute:
                    if attr.name == "mode":
                        attr.s = _GRID_SAMPLE_MODES.get(attr.s, attr.s)
        try:
            self._evaluator = ReferenceEvaluator(model)
        except Exception as e:  # noqa: BLE001 - the evaluator raises whatever its ops do
            raise AutoschedError(f"{model_path}: ONNX's reference evaluator cannot load the model: {e}") from None
        self._outputs = [_Output(o.name) for o in model.graph.output]

    def get_outputs(self) -> list[_Output]:
        return self._outputs

    def run(self, names: Sequence[str] | None, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return list(self._evaluator.run(list(names) if names else None, dict(feeds)))


def sample_inputs(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    return random_inputs(graph.inputs, seed)


def compare(model: Model, session, feeds: dict[str, np.ndarray], rtol: float, atol: float) -> list[OutputDiff]:
    """Per output: max absolute and relative error, and whether |a-b| <= atol + rtol·|b| everywhere
    (equal values, infinities too, differ by 0)."""
    ours = model.run(feeds)
    names = [o.name for o in session.get_outputs()]
    try:
        theirs = dict(zip(names, session.run(names, feeds)))
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise AutoschedError(f"{getattr(session, 'label', 'onnxruntime')} cannot run the model on these inputs "
                             f"(random integers may fall outside what they index: give such inputs with --inputs): "
                             f"{e}") from None
    diffs = []
    for name, got in ours.items():
        want = np.asarray(theirs[name])
        with np.errstate(invalid="ignore"):  # inf - inf where both are the same infinity
            err = np.where(got == want, 0.0, np.abs(got.astype(np.float64) - want.astype(np.float64)))
        rel = err / np.maximum(np.abs(want.astype(np.float64)), np.finfo(np.float32).tiny)
        ok = bool(np.all(err <= atol + rtol * np.abs(want))) and not np.isnan(got).any()
        diffs.append(OutputDiff(name, float(err.max(initial=0)), float(rel.max(initial=0)), ok))
    return diffs


def latency(model: Model, session, feeds: dict[str, np.ndarray], runs: int = 30, block: int = 10,
            settle_s: float = 0.15) -> Latency:
    """Median latency of each over `runs` runs, timed in alternating blocks (see `alternate`)."""
    [ours], theirs = latencies([model], session, feeds, runs, block, settle_s)
    return Latency(ours, theirs)


def latencies(models: Sequence[Model], session, feeds: dict[str, np.ndarray], runs: int = 30, block: int = 10,
              settle_s: float = 0.15, min_seconds: float = 0.0) -> tuple[list[float], float]:
    """Median milliseconds of each of `models` and of onnxruntime's `session`, all timed in one
    alternation (`alternate`): two builds compared on a shared machine see the same drift, which
    timing them one after the other (a 10-15% swing within minutes on 2 busy cores) does not."""
    *ours, theirs = joined(latency_rounds(models, session, feeds, runs, block, settle_s, min_seconds), len(models) + 1)
    return [1e3 * float(np.median(t)) for t in ours], 1e3 * float(np.median(theirs))


def latency_rounds(models: Sequence[Model], session, feeds: dict[str, np.ndarray], runs: int = 30, block: int = 10,
                   settle_s: float = 0.15, min_seconds: float = 0.0) -> list[list[list[float]]]:
    """`alternate_rounds` of each of `models` and, last, of onnxruntime's `session`, so that two
    builds' ratio can be taken round by round (`paired_ratio`)."""
    names = [o.name for o in session.get_outputs()]
    runners = []
    for model in models:
        ins = [np.ascontiguousarray(feeds[v["name"]]) for v in model.inputs]
        outs = [np.empty(v["shape"], np.dtype(v["dtype"])) for v in model.outputs]
        runners.append(functools.partial(model.run_into, ins, outs))
    return alternate_rounds([*runners, lambda: session.run(names, feeds)], runs, block, settle_s, min_seconds)


def kernel_times(model: Model, model_path: Path, threads: int, feeds: dict[str, np.ndarray], runs: int,
                 workdir: Path, block: int = 10, settle_s: float = 0.15) -> tuple[list[KernelTime], list[KernelTime]]:
    """Each kernel call of `model` and each node onnxruntime runs, median milliseconds over `runs`
    runs, the two alternated in blocks that start with untimed runs for `settle_s` seconds as in
    `alternate` (each kernel timed inside its model, in the state the model leaves its inputs);
    both ranked, slowest first. Alternated run by run instead, each ran beside the other's
    spinning pool threads: on 2 cores a ViT block's largest matmuls took 3.6 and 2.9 ms in
    place of 1.6 and 1.1. onnxruntime's nodes are those of its optimized graph (fused and
    renamed: a Conv with its BatchNormalization is named after the latter), so the two lists
    are not matched name by name. Its profile goes to `workdir`; of its runs, those timed are
    picked out by their `model_run` events."""
    session = onnxruntime_session(model_path, threads, workdir / "onnxruntime")
    names = [o.name for o in session.get_outputs()]
    ours: dict[tuple[str, str], list[float]] = {}
    ort_runs, timed = 0, set()

    def run_ours() -> None:
        model.profile(feeds, runs=1)

    def run_theirs() -> None:
        nonlocal ort_runs
        session.run(names, feeds)
        ort_runs += 1

    done = 0
    while done < runs:
        check()
        n = min(block, runs - done)
        _settle(run_ours, settle_s)
        for _ in range(n):
            for call in model.profile(feeds, runs=1):
                ours.setdefault((call.op, call.group), []).append(call.seconds)
        _settle(run_theirs, settle_s)
        for _ in range(n):
            timed.add(ort_runs)
            run_theirs()
        done += n
    with open(session.end_profiling()) as f:
        events = json.load(f)
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "Session" and e["name"] == "model_run"]
    windows = [w for i, w in enumerate(windows) if i in timed]
    theirs: dict[tuple[str, str], list[float]] = {}
    for e in events:
        if (e.get("cat") == "Node" and e["name"].endswith("_kernel_time")
                and any(lo <= e["ts"] <= hi for lo, hi in windows)):
            theirs.setdefault((e["args"].get("op_name", "?"), e["name"][:-len("_kernel_time")]), []).append(e["dur"] / 1e6)

    def ranked(times: dict[tuple[str, str], list[float]]) -> list[KernelTime]:
        rows = [KernelTime(op, name, 1e3 * float(np.median(t)), len(t)) for (op, name), t in times.items()]
        return sorted(rows, key=lambda r: -r.ms)
    return ranked(ours), ranked(theirs)


def alternate_rounds(runners: Sequence[Callable[[], object]], runs: int = 30, block: int = 10,
                     settle_s: float = 0.15, min_seconds: float = 0.0) -> list[list[list[float]]]:
    """Seconds of `runs` runs of each runner, timed in alternating blocks of `block` runs: per
    round, per runner, the seconds of its block (`alternate` joins each runner's blocks).

    Not run by run: after each run onnxruntime's pool threads spin-wait for more work, and
    OpenMP's do the same, so a run started right after another runtime's shares the cores
    with its spinning threads. On 2 cores the BERT layer took 5.7 ms alone and 8.6-27 ms for the
    first five or six runs after onnxruntime's (about 60 ms of them), so each block starts with
    untimed runs for `settle_s` seconds, until the other's threads have gone to sleep; what is
    timed is each runtime in the steady state a user running only it sees. Alternating blocks
    still expose all to the same drift of a shared machine.

    `min_seconds`: runs and blocks grow alike (as many rounds) until every runner's timed runs
    last at least that long, judged first from one run of each and then, should a loaded machine
    have made that run short of the rest, topped up by whole rounds until the timed runs do. 20 runs of a 0.6 ms block are 12 ms
    of timing, two blocks each side: on the 2-vCPU EPYC host an EfficientNet-style block's tuned
    build timed 1.22x its untuned one that way at a tuning checkpoint, and 0.96x in 60 runs of
    the same two builds.
    """
    if min_seconds > 0:
        fastest = min(_timed(run) for run in runners)
        scale = max(1, -(-min_seconds // (runs * fastest)) if fastest > 0 else 1)
        runs, block = int(runs * scale), int(block * scale)
    rounds: list[list[list[float]]] = []
    times: list[list[float]] = [[] for _ in runners]  # each runner's timed runs so far
    while len(times[0]) < runs or min(sum(out) for out in times) < min_seconds:
        # topping up, one round of as many blocks as the shortest runner still needs by its mean:
        # a first run 100x slower than the rest (cold caches, page faults) scaled the blocks of
        # a 10 us model to 0.5 ms of timing each, and 200 rounds of settling took 60 s
        n = (min(block, runs - len(times[0])) if len(times[0]) < runs else
             block * max(1, max(math.ceil((min_seconds - sum(out)) * len(out) / max(sum(out), 1e-9) / block)
                                for out in times)))
        rounds.append([[] for _ in runners])
        for run, out, block_times in zip(runners, times, rounds[-1]):
            _settle(run, settle_s)
            for _ in range(n):
                t0 = time.perf_counter()
                run()
                block_times.append(time.perf_counter() - t0)
                check()
            out.extend(block_times)
    return rounds


def alternate(runners: Sequence[Callable[[], object]], runs: int = 30, block: int = 10,
              settle_s: float = 0.15, min_seconds: float = 0.0) -> list[list[float]]:
    """Seconds of each runner's runs, timed as `alternate_rounds` times them."""
    return joined(alternate_rounds(runners, runs, block, settle_s, min_seconds), len(runners))


def joined(rounds: Sequence[Sequence[Sequence[float]]], runners: int) -> list[list[float]]:
    """Each of `runners` runners' blocks of `alternate_rounds`, one list per runner."""
    return [[t for r in rounds for t in r[i]] for i in range(runners)]


def paired_ratio(rounds: Sequence[Sequence[Sequence[float]]], a: int, b: int) -> float:
    """Runner `a`'s time over runner `b`'s: the median over rounds of the ratio of their blocks'
    medians. A round's blocks run within a second or two of each other, so a phase of the host
    (minutes long on the 2-vCPU EPYC guests: `measure/cores.py`) that begins or ends between
    rounds falls on both sides of each ratio, and one that changes within a round biases that
    round alone; the ratio of the whole runs' medians takes a phase for a difference between the
    runners whenever it covers more of one's blocks than of the other's. That way (two rounds of
    10 runs) a 1000-trial ResNet-18 build measured 0.78 of its untuned build's time in a run where
    onnxruntime's median went from 18 to 28 ms, and 1.12 and 1.00 when timed again minutes later."""
    return float(np.median([np.median(r[a]) / np.median(r[b]) for r in rounds]))


def paired_interval(rounds: Sequence[Sequence[Sequence[float]]], a: int, b: int,
                    level: float = 0.95) -> tuple[float, float]:
    """An interval that holds the median of the rounds' ratios (`paired_ratio`) with probability
    at least `level`, whatever their distribution: the order statistics the binomial law of
    ratios below the median puts it between. The host's noise is neither normal nor steady, so
    "faster" is claimed only where this interval lies below 1. Fewer than 6 rounds give their
    whole range, which holds the median at under 95%."""
    ratios = sorted(float(np.median(r[a]) / np.median(r[b])) for r in rounds)
    n, k, below = len(ratios), 0, 0.0  # below: P(Binomial(n, 1/2) <= k - 1)
    while below + math.comb(n, k) / 2**n <= (1 - level) / 2:
        below += math.comb(n, k) / 2**n
        k += 1
    k = max(k, 1)
    return ratios[k - 1], ratios[n - k]


#: rounds below which no verdict is given: the whole range of 5 holds the median at only 94%
VERDICT_ROUNDS = 6


def paired_verdict(rounds: Sequence[Sequence[Sequence[float]]], a: int, b: int, level: float = 0.95) -> str:
    """What a benchmark may say of build `a` against build `b`: "faster" or "slower" only where
    the interval of their paired ratio (`paired_interval`) excludes 1, "within noise" where it
    holds 1, and "too few rounds" below `VERDICT_ROUNDS`, whose interval does not reach `level`
    (one round's is a point, and would call two timings of one build different)."""
    if len(rounds) < VERDICT_ROUNDS:
        return "too few rounds"
    low, high = paired_interval(rounds, a, b, level)
    return "faster" if high < 1 else "slower" if low > 1 else "within noise"


def _timed(run: Callable[[], object]) -> float:
    """Seconds of one run."""
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def _settle(run: Callable[[], object], seconds: float) -> None:
    """Untimed runs for `seconds` (at least one), until the other runtime's threads sleep."""
    start = time.perf_counter()
    run()
    while time.perf_counter() - start < seconds:
        check()
        run()
