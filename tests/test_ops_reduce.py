"""Reductions against numpy over every kind of axis set, with and without keepdims."""
import numpy as np
import pytest

from autosched import ops, te
from autosched.kernel import source

from isa import ISAS
from ops_helpers import rand, run

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
    got = run(ops.REGISTRY[name].compute(x, axes, keepdims), [x], [data], ops.schedule_reduce, cpu_target)
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
