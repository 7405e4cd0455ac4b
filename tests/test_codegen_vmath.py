"""The vector exp/erf/sigmoid/tanh of the C back end against float64 math, on each ISA the host runs."""
import math
import re
import subprocess

import numpy as np
import pytest
from isa import HOST, ISAS
from ops_helpers import run

from autosched import te
from autosched.codegen import vmath
from autosched.compile.kernel import build_kernel, source
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
    # saturated and special values are exact; sigmoid saturates below ln FLT_MIN at the smallest
    # normal (times 1 + 5e-6, exp's error there) rather than form a subnormal
    rest = ~normal & ~np.isnan(want32)
    tiny = np.finfo(np.float32).tiny * (1 + 1e-5 if fn == "sigmoid" else 1)
    np.testing.assert_allclose(got[rest], want32[rest], rtol=0, atol=tiny)
    # no subnormal is formed: they cost a microcode assist each
    assert not np.any((got != 0) & (np.abs(got) < np.finfo(np.float32).tiny))


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_vector_math_is_vector_code(isa):
    """The helper is written in the ISA's vector type: no libm call lane by lane."""
    target, _, lanes = ISAS[isa]
    x = te.placeholder((64,), name="x")
    y = te.compute((64,), lambda i: te.erf(x[i]) + te.exp(x[i]) + te.tanh(x[i]), name="y")
    code = source(_schedule(y, lanes), [x, y], "k", target)
    assert all(f"v{fn}_f32x{lanes}(" in code for fn in ("erf", "exp", "tanh"))
    assert "erff(" not in code and "expf(" not in code and "tanhf(" not in code


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_min_max_and_sigmoid_clamps_are_single_instructions(tmp_path, isa):
    """A Relu6 and x·sigmoid(x), compiled for each ISA on any x86-64 host: min and max are
    MINPS/MAXPS in the target's registers, and sigmoid's clamps blend nothing (a compare and
    a blend each cost EfficientNet's swish-fused convolutions 4-8% on an EPYC Zen 3)."""
    target, register, lanes = ISAS[isa]
    x = te.placeholder((256,), name="x")
    relu6 = te.compute((256,), lambda i: te.max(te.min(x[i], te.const(6.0)), te.const(0.0)), name="r")
    swish = te.compute((256,), lambda i: x[i] * te.sigmoid(x[i]), name="s")
    for y in (relu6, swish):
        kern = build_kernel(_schedule(y, lanes), [x, y], "k", target=target, cache_dir=tmp_path)
        asm = subprocess.run(["objdump", "-d", str(kern.path)], capture_output=True, text=True, check=True).stdout
        assert re.search(rf"vminps\s+.*%{register}", asm) and re.search(rf"vmaxps\s+.*%{register}", asm)
        assert "blendv" not in asm
    # exp, erf and tanh, whose clamps name the same instructions, build for the ISA too
    y = te.compute((256,), lambda i: te.erf(x[i]) + te.exp(x[i]) + te.tanh(x[i]), name="y")
    kern = build_kernel(_schedule(y, lanes), [x, y], "k", target=target, cache_dir=tmp_path)
    asm = subprocess.run(["objdump", "-d", str(kern.path)], capture_output=True, text=True, check=True).stdout
    assert re.search(rf"vmaxps\s+.*%{register}", asm)


def test_min_max_outside_x86_compare_and_blend_with_the_same_rule():
    """Where no instruction is named (integers; the #else of another ISA), the helper is the
    compare and blend, whose rule MINPS/MAXPS share: the second operand where the compare is
    false, so a NaN as the second operand passes and one as the first does not."""
    src = vmath.minmax("min", "f32x4", "i32x4", "float32", 16)
    assert "__builtin_ia32_minps(a, b)" in src and "#else" in src
    generic = src.split("#else")[1].split("#endif")[0]
    assert "(a < b)" in generic and "(m & (i32x4)a) | (~m & (i32x4)b)" in generic
    assert "#if" not in vmath.minmax("max", "i32x8", "i32x8", "int32", 32)
    x = te.placeholder((64,), name="x")
    y = te.compute((64,), lambda i: te.max(te.const(0.0), te.min(te.const(6.0), x[i])), name="y")
    data = np.linspace(-10, 10, 64).astype(np.float32)
    data[[3, 40]] = np.nan
    got = run(y, [x], [data], _schedule, HOST)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(data))
    np.testing.assert_array_equal(got[~np.isnan(data)], np.clip(data[~np.isnan(data)], 0, 6))
