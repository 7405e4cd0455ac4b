"""The vector exp/erf/sigmoid/tanh of the C back end against float64 math, on each ISA the host runs."""
import math

import numpy as np
import pytest
from isa import ISAS
from ops_helpers import run

from autosched import te
from autosched.compile.kernel import source
from autosched.ops.util import vectorize_innermost
from autosched.schedule import create_schedule

N = 1 << 16
RANGES = {"exp": (-110.0, 95.0), "erf": (-6.0, 6.0), "sigmoid": (-110.0, 110.0), "tanh": (-30.0, 30.0)}
#: bounds the docstring of autosched.codegen.vmath states, with a margin of one ulp
MAX_ULP = {"exp": 2.0, "erf": 7.0, "sigmoid": 4.0, "tanh": 3.0}
SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 88.7, -87.0], np.float32)


def _reference(fn: str, x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if fn == "exp":
            return np.exp(x64)
        if fn == "sigmoid":
            return 1.0 / (1.0 + np.exp(-x64))
        if fn == "tanh":
            return np.tanh(x64)
        return np.array([math.erf(v) if not np.isnan(v) else np.nan for v in x64])


def _schedule(out, vector_lanes):
    s = create_schedule(out)
    vectorize_innermost(s[out], vector_lanes)
    return s


@pytest.mark.parametrize("fn", sorted(RANGES))
def test_vector_math_accuracy(fn, cpu_target):
    lo, hi = RANGES[fn]
    data = np.concatenate([SPECIALS, np.linspace(lo, hi, N - len(SPECIALS))]).astype(np.float32)
    x = te.placeholder((N,), name="x")
    y = te.compute((N,), lambda i: getattr(te, fn)(x[i]), name="y")
    got = run(y, [x], [data], _schedule, cpu_target)
    want = _reference(fn, data)
    with np.errstate(over="ignore"):
        want32 = want.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want32))
    normal = np.isfinite(want32) & (np.abs(want32) >= np.finfo(np.float32).tiny)
    ulps = np.abs(got[normal] - want[normal]) / np.spacing(np.abs(want32[normal]))
    assert ulps.max() <= MAX_ULP[fn]
    # saturated and special values are exact
    rest = ~normal & ~np.isnan(want32)
    np.testing.assert_allclose(got[rest], want32[rest], rtol=0, atol=np.finfo(np.float32).tiny)
    if fn == "exp":  # no subnormal is formed: they cost a microcode assist each
        assert not np.any(got[data < -87.3366])


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_vector_math_is_vector_code(isa):
    """The helper is written in the ISA's vector type: no libm call lane by lane."""
    target, _, lanes = ISAS[isa]
    x = te.placeholder((64,), name="x")
    y = te.compute((64,), lambda i: te.erf(x[i]) + te.exp(x[i]) + te.tanh(x[i]), name="y")
    code = source(_schedule(y, lanes), [x, y], "k", target)
    assert all(f"v{fn}_f32x{lanes}(" in code for fn in ("erf", "exp", "tanh"))
    assert "erff(" not in code and "expf(" not in code and "tanhf(" not in code
