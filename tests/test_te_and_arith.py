"""Tensor expressions and index arithmetic."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched import te
from autosched.lower import arith
from autosched.te.expr import BinOp, Const, Var


def test_compute_names_axes_from_the_lambda():
    a = te.placeholder((3, 4), name="a")
    b = te.compute((3, 4), lambda row, col: a[row, col] * 2.0, name="b")
    assert [ax.name for ax in b.op.axes] == ["row", "col"]
    assert b.dtype == "float32" and b.shape == (3, 4)


def test_dtype_promotion_and_integer_division_error():
    i = Var("i")
    assert (i + 1).dtype == "int32"
    assert (te.cast("float32", i) * 2.0).dtype == "float32"
    assert (Var("n", "int64") + i).dtype == "int64"
    with pytest.raises(TypeError, match="floor division"):
        _ = i / 2


def test_indexing_with_wrong_rank_names_the_tensor():
    a = te.placeholder((3, 4), name="weights")
    with pytest.raises(IndexError, match="weights"):
        te.compute((3,), lambda i: a[i])


def test_reduction_must_be_whole_body():
    a = te.placeholder((3, 4), name="a")
    k = te.reduce_axis(4, "k")
    with pytest.raises(ValueError, match="whole body"):
        te.compute((3,), lambda i: te.sum(a[i, k], k) + 1.0)


def test_bad_shapes_rejected():
    with pytest.raises(ValueError, match="negative"):
        te.placeholder((-1, 3))


def test_linear_form_cancels_split_terms():
    io, ii = Var("io"), Var("ii")
    e = (io * 8 + ii) + 3 - io * 8
    assert arith.as_int(arith.simplify(e - ii)) == 3
    ranges = {io: (0, 15), ii: (0, 7)}
    assert arith.simplify((io * 8 + ii) // 8, ranges) is io
    assert arith.simplify((io * 8 + ii) % 8, ranges) is ii


def _eval(e, env):
    """Python's own integer semantics, independent of the simplifier."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env[e]
    a, b = _eval(e.a, env), _eval(e.b, env)
    return {"add": a + b, "sub": a - b, "mul": a * b, "floordiv": a // b if b else 0,
            "floormod": a % b if b else 0, "min": min(a, b), "max": max(a, b)}[e.op]


X, Y = Var("x"), Var("y")
_leaf = st.sampled_from([X, Y]) | st.integers(-3, 9).map(lambda v: Const(v, "int32"))
_exprs = st.recursive(_leaf, lambda sub: st.one_of(
    st.tuples(st.sampled_from(["add", "sub", "min", "max"]), sub, sub).map(lambda t: BinOp(*t)),
    st.tuples(sub, st.integers(-4, 6)).map(lambda t: BinOp("mul", t[0], Const(t[1], "int32"))),
    st.tuples(st.sampled_from(["floordiv", "floormod"]), sub, st.integers(1, 9)).map(
        lambda t: BinOp(t[0], t[1], Const(t[2], "int32"))),
), max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(_exprs, st.integers(0, 11), st.integers(0, 5))
def test_simplify_preserves_value(e, x, y):
    ranges = {X: (0, 11), Y: (0, 5)}
    assert _eval(arith.simplify(e, ranges), {X: x, Y: y}) == _eval(e, {X: x, Y: y})


def test_bounds_and_comparisons():
    x, y = Var("x"), Var("y")
    ranges = {x: (0, 5), y: (0, 2)}
    assert arith.int_bound(x * 3 + y, ranges) == (0, 17)
    assert arith.int_bound(x % 4, ranges) == (0, 3)
    assert isinstance(arith.simplify(x * 3 + y < 18, ranges), Const)
    assert not isinstance(arith.simplify(x * 3 + y < 17, ranges), Const)


def test_symbolic_interval_keeps_outer_vars():
    outer, inner = Var("outer"), Var("inner")
    lo, hi = arith.symbolic_interval(outer * 4 + inner + 1, {inner: (0, 3)})
    ext = arith.simplify(hi - lo + 1)
    assert arith.as_int(ext) == 4


def test_a_vector_lane_leaves_floordiv_and_floormod_of_a_multiple():
    """(4x + lane) // 8 is (4x) // 8 and (4x + lane) % 8 is (4x) % 8 + lane for lanes 0..3: so a
    float4 copy of rows 8 wide, 4 floats a thread, reads contiguous lanes (the CUDA MatMul's A
    tile was copied with 4 scalar loads), and (4x) % 8 is 0 or 4."""
    x, lane = Var("x"), Var("lane")
    ranges = {x: (0, 15), lane: (0, 3)}
    div, mod = arith.simplify((x * 4 + lane) // 8, ranges), arith.simplify((x * 4 + lane) % 8, ranges)
    assert div.key() == arith.simplify((x * 4) // 8, ranges).key()
    assert arith.simplify(mod - lane, ranges).key() == arith.simplify((x * 4) % 8, ranges).key()
    assert arith.known_divisor((x * 4) % 8) == 4 and arith.int_bound((x * 4) % 8, ranges) == (0, 4)
    # a lane that reaches the next multiple of 4 is not pulled out
    wide = {x: (0, 15), lane: (0, 4)}
    assert lane in {v for v in _vars(arith.simplify((x * 4 + lane) // 8, wide))}


def _vars(e):
    if isinstance(e, Var):
        yield e
    elif isinstance(e, BinOp):
        yield from _vars(e.a)
        yield from _vars(e.b)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([2, 4, 8]), st.integers(1, 4), st.integers(-3, 3), st.integers(0, 7), st.integers(-9, 9),
       st.sampled_from(["floordiv", "floormod"]), st.integers(0, 11), st.integers(0, 7))
def test_pulling_a_small_remainder_out_of_floordiv_and_floormod_preserves_value(g, m, k, y_hi, const, op, x, y):
    e = BinOp(op, X * (g * k) + Y + Const(const, "int32"), Const(g * m, "int32"))
    ranges = {X: (0, 11), Y: (0, y_hi)}
    y = min(y, y_hi)
    assert _eval(arith.simplify(e, ranges), {X: x, Y: y}) == _eval(e, {X: x, Y: y})
