"""The op registry: every graph op has one record whose compute and default schedule build and
agree with numpy at other vector widths too (targets without AVX-512 schedule with 8 or 4 lanes)."""
import dataclasses

import numpy as np
import pytest
from isa import HOST
from ops_helpers import rand, run

from autosched import te
from autosched.graph.ir import Node, Op, Value
from autosched.opset.record import ComputeArgs, UnknownOpError
from autosched.opset.registry import IMPORTERS, OPS, lookup


def test_lookup_unknown_op_names_the_known_ones():
    with pytest.raises(UnknownOpError, match="Conv"):
        lookup("Convolution")


def test_registry_covers_every_graph_op():
    assert set(OPS) == set(Op)
    for record in OPS.values():
        assert lookup(record.op.value) is record
        assert all(callable(fn) for fn in (record.shape, record.reference, record.compute, record.schedule))
        assert (record.scalar is not None) == (record.kind.value == "elemwise")
    assert {"Conv", "MatMul", "Gemm", "Relu", "Flatten", "Squeeze", "Unsqueeze", "GlobalAveragePool"} <= set(IMPORTERS)


def _softmax_ref(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _conv_ref(x, w):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    return sum(np.einsum("nchw,oc->nohw", xp[:, :, i:i + 6, j:j + 24], w[:, :, i, j]) for i in range(3) for j in range(3))


_WINDOW = {"strides": (2, 2), "pads": (0, 0, 0, 0), "dilations": (1, 1)}
NARROW = {
    # op: (attributes, input shapes, numpy reference)
    Op.RELU: ({}, [(3, 37)], lambda x: np.maximum(x, 0)),
    Op.ADD: ({}, [(3, 37), (37,)], lambda x, y: x + y),
    Op.SOFTMAX: ({"axis": 1}, [(3, 5, 24)], _softmax_ref),
    Op.REDUCE_SUM: ({"axes": (0,), "keepdims": 0}, [(5, 24)], lambda x: x.sum(axis=0)),
    Op.TRANSPOSE: ({"perm": (1, 0)}, [(24, 7)], lambda x: x.T),
    Op.MAX_POOL: ({"kernel_shape": (2, 2), "ceil_mode": 0, **_WINDOW}, [(1, 2, 8, 48)],
                  lambda x: x.reshape(1, 2, 4, 2, 24, 2).max(axis=(3, 5))),
    Op.CONV: ({"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}, [(1, 4, 6, 24), (8, 4, 3, 3)],
              _conv_ref),
}


@pytest.mark.parametrize("lanes", [8, 4])
@pytest.mark.parametrize("op", sorted(NARROW, key=str))
def test_default_schedules_at_narrower_vector_widths(op, lanes):
    attrs, shapes, ref = NARROW[op]
    record = lookup(op)
    values = [Value(f"x{k}", s, "float32") for k, s in enumerate(shapes)]
    node = Node("n", op, tuple(v.name for v in values), ("y",), attrs)
    ((out_shape, _),) = record.shape(node, values)
    caps = dataclasses.replace(HOST.capabilities, vector_bytes=4 * lanes)
    xs = [te.placeholder(s, name=f"x{k}") for k, s in enumerate(shapes)]
    (out,) = record.compute(ComputeArgs(attrs, tuple(xs), (out_shape,), None, caps))
    data = [rand(*s) for s in shapes]
    got = run(out, xs, data, lambda t, vector_lanes: record.schedule([t], vector_lanes), HOST, lanes)
    np.testing.assert_allclose(got, ref(*[d.astype(np.float64) for d in data]), rtol=1e-4, atol=1e-5)
