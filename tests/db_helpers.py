"""Tuning records made up for the database, report, progress and CLI tests: a fixed target
(not this host's, so stored fingerprints do not depend on the machine) and measured costs."""
from pathlib import Path

from autosched.measure import ErrorKind, MeasureInput, MeasureResult
from autosched.target import CpuInfo, Target
from autosched.templates import get_template

AVX512 = frozenset({"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"})
HERE = Target.parse("llvm", host=CpuInfo("Example CPU A", AVX512))


def measured(task, target, costs, t0=1000.0):
    """Records of `task` on `target`: config i gets costs[i] (None: a compile error)."""
    space = get_template(task.op, target.kind).space(task, target)
    out = []
    for i, cost in enumerate(costs):
        res = (MeasureResult((cost, cost), ErrorKind.NO_ERROR, "", 0.1, t0 + i) if cost is not None
               else MeasureResult.failure(ErrorKind.COMPILE_ERROR, "gcc: error", 0.1, t0 + i))
        out.append((MeasureInput(task, target, space.get(i)), res))
    return out


#: SQL dumps of tuning databases of earlier schema versions
FIXTURES = Path(__file__).parent / "fixtures"
