"""Elementwise operators against numpy: unary math, activations, broadcasting binary ops."""
import math

import numpy as np
import pytest
from isa import ISAS
from ops_helpers import rand, run

from autosched import ops, te
from autosched.compile.kernel import source
from autosched.ops.elementwise import contiguous_suffix

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _hard_sigmoid(x, alpha=0.2, beta=0.5):
    return np.clip(alpha * x + beta, 0.0, 1.0)


UNARY = {
    "relu": (ops.relu, lambda x: np.maximum(x, 0)),
    "leaky_relu": (lambda x: ops.leaky_relu(x, 0.1), lambda x: np.where(x >= 0, x, 0.1 * x)),
    "leaky_relu_steep": (lambda x: ops.leaky_relu(x, 3.0), lambda x: np.where(x >= 0, x, 3.0 * x)),
    "clip": (lambda x: ops.clip(x, -0.25, 0.5), lambda x: np.clip(x, -0.25, 0.5)),
    "clip_low_only": (lambda x: ops.clip(x, lo=0.0), lambda x: np.maximum(x, 0.0)),
    "sigmoid": (ops.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "tanh": (ops.tanh, np.tanh),
    "exp": (ops.exp, np.exp),
    "log": (ops.log, lambda x: np.log(x)),
    "sqrt": (ops.sqrt, lambda x: np.sqrt(x)),
    "erf": (ops.erf, _erf),
    "gelu": (ops.gelu, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
    "gelu_tanh": (lambda x: ops.gelu(x, "tanh"),
                  lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    "hard_sigmoid": (ops.hard_sigmoid, _hard_sigmoid),
    "hard_swish": (ops.hard_swish, lambda x: x * _hard_sigmoid(x, 1 / 6, 0.5)),
    "neg": (ops.neg, np.negative),
    "abs": (ops.abs, np.abs),
}
POSITIVE_ONLY = {"log", "sqrt"}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", [(1,), (7,), (127,), (2, 3, 5, 4)])
def test_unary_matches_numpy(name, shape, cpu_target):
    fn, ref = UNARY[name]
    x = te.placeholder(shape, name="x")
    data = rand(*shape, low=0.05, high=4.0) if name in POSITIVE_ONLY else rand(*shape, low=-4.0, high=4.0)
    got = run(fn(x), [x], [data], ops.schedule_elementwise, cpu_target)
    np.testing.assert_allclose(got, ref(data.astype(np.float64)), rtol=1e-4, atol=1e-5)


#: the math library's trigonometric and hyperbolic functions, each on its domain
LIBM = {"tan": (np.tan, -1.5, 1.5), "asin": (np.arcsin, -0.99, 0.99), "acos": (np.arccos, -0.99, 0.99),
        "atan": (np.arctan, -9.0, 9.0), "sinh": (np.sinh, -4.0, 4.0), "cosh": (np.cosh, -4.0, 4.0),
        "asinh": (np.arcsinh, -9.0, 9.0), "acosh": (np.arccosh, 1.0, 9.0), "atanh": (np.arctanh, -0.99, 0.99)}


@pytest.mark.parametrize("name", sorted(LIBM))
def test_math_library_functions_match_numpy(name, cpu_target):
    """Vectorized lane by lane (no vector routine of ours): 127 elements, a vector tail."""
    from autosched.te.expr import LIBM_UNARY, call

    assert set(LIBM) == set(LIBM_UNARY)
    ref, low, high = LIBM[name]
    x = te.placeholder((127,), name="x")
    y = te.compute(x.shape, lambda i: call(name, x[i]), name=name)
    data = rand(127, low=low, high=high)
    got = run(y, [x], [data], ops.schedule_elementwise, cpu_target)
    np.testing.assert_allclose(got, ref(data.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_cast_truncates_toward_zero_like_numpy(cpu_target):
    x = te.placeholder((3, 7), name="x")
    data = rand(3, 7, low=-9.0, high=9.0)
    got = run(ops.cast(x, "int32"), [x], [data], ops.schedule_elementwise, cpu_target)
    np.testing.assert_array_equal(got, data.astype(np.int32))


def test_cast_int_to_float(cpu_target):
    x = te.placeholder((127,), dtype="int32", name="x")
    data = np.arange(-60, 67, dtype=np.int32)
    got = run(ops.cast(x, "float32"), [x], [data], ops.schedule_elementwise, cpu_target)
    np.testing.assert_array_equal(got, data.astype(np.float32))


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "pow": np.power, "maximum": np.maximum, "minimum": np.minimum,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_broadcasting(name, cpu_target):
    a = te.placeholder((3, 5, 7), name="a")
    b = te.placeholder((5, 1), name="b")
    da, db = rand(3, 5, 7, low=0.5, high=2.0), rand(5, 1, low=0.5, high=2.0)
    got = run(ops.elementwise.BINARY_OPS[name](a, b), [a, b], [da, db], ops.schedule_elementwise, cpu_target)
    np.testing.assert_allclose(got, BINARY[name](da, db), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sa, sb", [
    ((127,), (127,)),
    ((1,), (7,)),
    ((4, 1), (1, 6)),
    ((2, 3, 4, 5), (3, 1, 1)),
    ((2, 1, 4, 16), (3, 1, 16)),
    ((6, 1), (6, 32)),
    ((64, 32), (32,)),
    ((), (3,)),
    ((), ()),
])
def test_add_broadcast_shapes(sa, sb, cpu_target):
    a, b = te.placeholder(sa, name="a"), te.placeholder(sb, name="b")
    da, db = rand(*sa), rand(*sb)
    got = run(ops.add(a, b), [a, b], [da, db], ops.schedule_elementwise, cpu_target)
    np.testing.assert_allclose(got, da + db, rtol=1e-6)


def test_python_number_operands(cpu_target):
    x = te.placeholder((3, 7), name="x")
    data = rand(3, 7)
    np.testing.assert_allclose(run(ops.mul(x, 2.5), [x], [data], ops.schedule_elementwise, cpu_target), data * 2.5, rtol=1e-6)
    np.testing.assert_allclose(run(ops.sub(1.0, x), [x], [data], ops.schedule_elementwise, cpu_target), 1.0 - data, rtol=1e-6)


def test_integer_div_floors_like_numpy(cpu_target):
    a = te.placeholder((2, 7), dtype="int32", name="a")
    b = te.placeholder((7,), dtype="int32", name="b")
    da = np.arange(-7, 7, dtype=np.int32).reshape(2, 7)
    db = np.array([3, -2, 5, 1, -4, 2, 7], dtype=np.int32)
    np.testing.assert_array_equal(run(ops.div(a, b), [a, b], [da, db], ops.schedule_elementwise, cpu_target), da // db)


def test_binary_rejects_mismatched_operands():
    with pytest.raises(ValueError, match="do not broadcast"):
        ops.add(te.placeholder((3, 4)), te.placeholder((5,)))
    with pytest.raises(TypeError, match="dtypes differ"):
        ops.add(te.placeholder((3,)), te.placeholder((3,), dtype="int32"))


def test_contiguous_suffix_groups_uniformly_broadcast_axes():
    # every input full or broadcast over the whole suffix
    assert contiguous_suffix((2, 3, 4, 5), [(2, 3, 4, 5), (3, 1, 1)]) == 2
    assert contiguous_suffix((2, 3, 4, 5), [(2, 3, 4, 5), (2, 3, 4, 5)]) == 0
    assert contiguous_suffix((4, 6), [(4, 1), (1, 6)]) == 1
    assert contiguous_suffix((6, 1), [(6, 1)]) == 0


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_schedule_emits_simd_for_divisible_and_broadcast_shapes(isa):
    lanes = ISAS[isa][2]
    a, b = te.placeholder((64, 3, 32), name="a"), te.placeholder((3, 1), name="b")
    out = ops.add(a, b)
    code = source(ops.schedule_elementwise(out, lanes), [a, b, out], "add")
    assert f"f32x{lanes}" in code and "#pragma omp parallel for" in code


def test_a_tiny_kernel_runs_on_the_calling_thread():
    """Below SERIAL_WORK stores, waking the thread pool costs about what the work does (an LSTM
    step's gate ops on 128 elements: a 50-step 2-layer LSTM ran 1.46 -> 1.01 ms without it)."""
    a = te.placeholder((4, 32), name="a")
    out = ops.relu(a)
    code = source(ops.schedule_elementwise(out, 16), [a, out], "relu")
    assert "f32x16" in code and "#pragma omp parallel" not in code


def test_float64_ops_named_like_libm_functions_compile(cpu_target):
    """The kernel and its output are both called `sqrt`; the body calls libm's sqrt."""
    x = te.placeholder((7,), dtype="float64", name="x")
    data = np.linspace(0.5, 4.0, 7)
    np.testing.assert_allclose(run(ops.sqrt(x), [x], [data], ops.schedule_elementwise, cpu_target), np.sqrt(data), rtol=1e-12)


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_half_precision_scalars_broadcast_into_vectors_on_every_isa(isa, tmp_path):
    """A _Float16 scalar (a constant, a broadcast operand) in vector code: without native FP16
    arithmetic (AVX2, Zen 4) gcc computes it in float and refuses to narrow it into a _Float16
    vector, so it is splat through a float vector. Compiled for each ISA wherever this runs."""
    from autosched.codegen.gcc import compile_c, target_flags

    target, _, lanes = ISAS[isa]
    a, b = te.placeholder((64, 32), "float16", name="a"), te.placeholder((1,), "float16", name="b")
    out = te.compute((64, 32), lambda i, j: (a[i, j] * b[0] + te.const(2.0, "float16")) / b[0], name="out")
    code = source(ops.schedule_elementwise(out, lanes * 2), [a, b, out], "half", target)
    assert f"f16x{lanes * 2}" in code and "__builtin_convertvector" in code
    compile_c(code, target_flags(target), cache_dir=tmp_path)


@pytest.mark.parametrize("isa", sorted(ISAS))
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_eight_bit_casts_convert_whole_vectors_on_every_isa(isa, dtype, tmp_path):
    """float32 to 8-bit integers and back (a quantized model's activations): gcc converts those
    lane by lane unless they pass through 32-bit (and 16-bit) lanes. The kernel's assembly, for
    each ISA wherever this runs, has vector conversions and no scalar ones; run where it can be."""
    import subprocess

    from autosched.codegen.gcc import target_flags

    target, _, lanes = ISAS[isa]
    x = te.placeholder((64, 32), "float32", name="x")
    q = te.compute((64, 32), lambda i, j: te.cast(dtype, x[i, j]), name="q")
    out = te.compute((64, 32), lambda i, j: te.cast("float32", q[i, j]) * te.const(0.5, "float32"), name="out")
    code = source(ops.schedule_elementwise(out, lanes), [x, out], "cast8", target)
    path = tmp_path / "cast8.c"
    path.write_text(code)
    flags = [f for f in target_flags(target) if f != "-shared"]
    asm = subprocess.run(["gcc", *flags, "-S", "-o", "-", str(path)], check=True, capture_output=True, text=True).stdout
    assert "cvttps2dq" in asm and "cvtdq2ps" in asm
    assert "cvttss2si" not in asm and "cvtsi2ss" not in asm


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_a_quantizing_chain_runs_float_vectors_of_one_register(isa, tmp_path):
    """x / scale, rounded, plus the zero point, clipped and cast to uint8 (what a dynamically
    quantized model computes before each product): vectorized by the float32 it computes in, not
    by the bytes it writes. At 64 lanes of float gcc compiled its clamps and the narrowing lane by
    lane (vcomiss and vpinsrb), 1.6 ns an element."""
    import subprocess

    from autosched.codegen.gcc import target_flags
    from autosched.compute import default_schedule, task_compute
    from autosched.graph.builder import GraphBuilder
    from autosched.graph.ir import Op
    from autosched.task import extract_tasks

    target, _, lanes = ISAS[isa]
    b = GraphBuilder()
    scaled = b.node(Op.DIV, [b.input("x", (64, 784)), b.input("scale", ())])
    shifted = b.node(Op.ADD, [b.node(Op.ROUND, [scaled]), b.constant("zero", np.array(3.0, np.float32))])
    b.output(b.node(Op.CAST, [b.node(Op.CLIP, [shifted], min=0.0, max=255.0)], to="uint8"))
    (task,) = extract_tasks(b.build()).tasks
    args, outs = task_compute(task, target.capabilities)
    code = source(default_schedule(task, outs, target.capabilities), args + outs, "quantize", target)
    assert f"f32x{lanes} " in code and f"f32x{4 * lanes} " not in code
    path = tmp_path / "quantize.c"
    path.write_text(code)
    flags = [f for f in target_flags(target) if f != "-shared"]
    asm = subprocess.run(["gcc", *flags, "-S", "-o", "-", str(path)], check=True, capture_output=True, text=True).stdout
    kernel = asm[asm.index("quantize._omp_fn"):] if "quantize._omp_fn" in asm else asm
    assert "vcomiss" not in kernel and "vpinsrb" not in kernel
