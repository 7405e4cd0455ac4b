"""Reductions against numpy over every kind of axis set, with and without keepdims."""
import numpy as np
import pytest
from isa import ISAS
from ops_helpers import rand, run

from autosched import ops, te
from autosched.compile.kernel import build_kernel, source
from autosched.ops.reduce import ACCUMULATORS, REDUCE_LANES_TAG, REDUCE_PARTIALS_TAG

REDUCERS = {"reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max}


@pytest.mark.parametrize("name", sorted(REDUCERS))
@pytest.mark.parametrize("shape, axes, keepdims", [
    ((127,), None, False),
    ((7,), 0, True),
    ((3, 5, 7), 1, False),
    ((3, 5, 7), -1, True),
    ((3, 5, 7), (0, 2), False),
    ((2, 3, 4, 33), (1, 2), True),
    ((1, 3, 1), (0, 1, 2), True),
])
def test_reduce_matches_numpy(name, shape, axes, keepdims, cpu_target):
    x = te.placeholder(shape, name="x")
    data = rand(*shape)
    got = run(getattr(ops, name)(x, axes, keepdims), [x], [data], ops.schedule_reduce, cpu_target)
    np.testing.assert_allclose(got, REDUCERS[name](data, axis=axes, keepdims=keepdims), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_reduce_over_outer_axis_is_vectorized_along_the_kept_inner_axis(isa):
    lanes = ISAS[isa][2]
    x = te.placeholder((64, 48), name="x")
    y = ops.reduce_sum(x, 0)
    code = source(ops.schedule_reduce(y, lanes), [x, y], "colsum")
    assert f"f32x{lanes}" in code


def test_reduce_rejects_repeated_axes():
    with pytest.raises(ValueError, match="twice"):
        ops.reduce_sum(te.placeholder((3, 4)), (1, -1))


def _random_inner_reductions(n: int, seed: int) -> list[tuple]:
    """(op, shape, axes, keepdims, lanes) reducing the innermost axis and keeping another."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ndim = int(rng.integers(2, 5))
        shape = tuple(int(v) for v in rng.integers(1, 6, size=ndim - 1)) + (int(rng.choice([2, 4, 8, 16])) * int(rng.integers(1, 6)),)
        others = [d for d in range(ndim - 1) if rng.random() < 0.4][: ndim - 2]
        out.append((str(rng.choice(sorted(REDUCERS))), shape, tuple(others) + (ndim - 1,), bool(rng.random() < 0.5),
                    int(rng.choice([4, 8, 16]))))
    return out


@pytest.mark.parametrize("name, shape, axes, keepdims, lanes", _random_inner_reductions(20, 4))
def test_inner_axis_reduction_by_lanes_random(name, shape, axes, keepdims, lanes, cpu_target):
    x = te.placeholder(shape, name="x")
    data = rand(*shape, low=-5.0, high=5.0)
    y = getattr(ops, name)(x, axes, keepdims, lanes=lanes)
    got = run(y, [x], [data], ops.schedule_reduce, cpu_target, vector_lanes=lanes)
    np.testing.assert_allclose(got, REDUCERS[name](data, axis=axes, keepdims=keepdims), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_inner_axis_reduction_accumulates_vectors(isa):
    target, _, lanes = ISAS[isa]
    x = te.placeholder((64, 768), name="x")
    y = ops.reduce_max(x, 1, lanes=lanes)
    assert y.op.attrs["width"] == lanes
    code = source(ops.schedule_reduce(y, lanes), [x, y], "rowmax", target)
    assert f"max_f32x{lanes}(" in code and code.count("#pragma omp parallel") == 1


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_a_reduction_of_every_axis_accumulates_vectors(name, keepdims, cpu_target):
    """DynamicQuantizeLinear's range of a whole activation: in scalar order one chain of
    dependent operations (0.55 ms for BERT's 128 x 3072, Xeon), by lanes a vector one."""
    x = te.placeholder((6, 96), name="x")
    data = rand(6, 96, low=-1.0, high=1.0)
    y = getattr(ops, name)(x, None, keepdims, lanes=16)
    assert any(getattr(t.op, "tag", "") == REDUCE_LANES_TAG for t in te.post_order([y]))
    got = run(y, [x], [data], ops.schedule_reduce, cpu_target, vector_lanes=16)
    np.testing.assert_allclose(got, REDUCERS[name](data, axis=None, keepdims=keepdims), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("name", sorted(REDUCERS))
@pytest.mark.parametrize("shape", [(1, 4, 12, 12, 16), (2, 3, 5, 24), (1, 128, 96), (3, 2, 16), (1, 1, 7, 32)],
                         ids=lambda s: "x".join(map(str, s)))
def test_a_reduction_of_every_axis_in_rows_of_partials(shape, name, keepdims, cpu_target):
    """Rows of partials over the outer axes (a blocked map, a plain one, a transformer's
    activations, fewer rows than `PARTIAL_ROWS`), interleaved accumulators where an inner axis
    divides by them (no inner axis does in the second and the fourth shapes)."""
    x = te.placeholder(shape, name="x")
    data = rand(*shape, low=-5.0, high=5.0)
    y = getattr(ops, name)(x, None, keepdims, lanes=8)
    assert any(getattr(t.op, "tag", "") == REDUCE_PARTIALS_TAG for t in te.post_order([y]))
    got = run(y, [x], [data], ops.schedule_reduce, cpu_target, vector_lanes=8)
    np.testing.assert_allclose(got, REDUCERS[name](data, axis=None, keepdims=keepdims), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_a_reduction_of_every_axis_shares_its_rows_among_threads(isa):
    target, _, lanes = ISAS[isa]
    x = te.placeholder((1, 64 // lanes, 28, 28, lanes), name="x")
    y = ops.reduce_max(x, None, lanes=lanes)
    code = source(ops.schedule_reduce(y, lanes), [x, y], "range", target)
    assert code.count("#pragma omp parallel") == 1 and f"#pragma GCC unroll {ACCUMULATORS}" in code
    assert f"max_f32x{lanes}(" in code


@pytest.mark.parametrize("shape", [(1, 4, 12, 12, 16), (2, 3, 5, 24), (1, 7, 14, 14, 8)], ids=lambda s: "x".join(map(str, s)))
def test_a_range_is_the_maximum_and_the_minimum(shape, cpu_target):
    x = te.placeholder(shape, name="x")
    data = rand(*shape, low=-5.0, high=3.0)
    top, low = ops.reduce_range(x, 8)
    kernel = build_kernel(ops.schedule_reduce([top, low], 8), [x, top, low], "range", target=cpu_target)
    got = [np.zeros((), np.float32), np.zeros((), np.float32)]
    kernel(data, *got)
    assert (got[0], got[1]) == (data.max(), data.min())


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_a_range_reads_each_row_once_into_registers(isa):
    target, _, lanes = ISAS[isa]
    x = te.placeholder((1, 64 // lanes, 28, 28, lanes), name="x")
    top, low = ops.reduce_range(x, lanes)
    code = source(ops.schedule_reduce([top, low], lanes), [x, top, low], "range", target)
    assert code.count("#pragma omp parallel") == 1 and "reduce_range_partials_local[" in code
    assert sum("&x[" in line for line in code.splitlines()) == 1  # one statement: x or -x by the unrolled sign


def test_a_range_needs_whole_vectors_along_the_innermost_axis():
    with pytest.raises(ValueError, match="innermost"):
        ops.reduce_range(te.placeholder((3, 25), name="x"), 16)
