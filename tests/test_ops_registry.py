"""The registry: every op name maps to a compute and a default schedule that build and agree
with numpy at other vector widths too (targets without AVX-512 schedule with 8 or 4 lanes)."""
import numpy as np
import pytest

from autosched import ops, te

from isa import HOST
from ops_helpers import rand, run


def test_lookup_unknown_op_names_the_known_ones():
    with pytest.raises(KeyError, match="conv2d"):
        ops.lookup("convolution")


def test_registry_covers_the_library():
    expected = {"conv2d", "matmul", "dense", "gemm", "batch_norm", "max_pool2d", "avg_pool2d", "global_avg_pool2d",
                "global_max_pool2d", "softmax", "layer_norm", "reduce_sum", "reduce_mean", "reduce_max", "pad",
                "transpose", "reshape", "concat", "slice", "relu", "leaky_relu", "clip", "sigmoid", "tanh", "exp",
                "log", "sqrt", "erf", "gelu", "hard_sigmoid", "hard_swish", "neg", "abs", "cast", "add", "sub", "mul",
                "div", "pow", "maximum", "minimum"}
    assert set(ops.REGISTRY) == expected
    for entry in ops.REGISTRY.values():
        assert callable(entry.compute) and callable(entry.schedule)


def _softmax_ref(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


NARROW = {
    # name: (args builder over placeholders, input shapes, numpy reference)
    "relu": (lambda x: (x,), [(3, 37)], lambda x: np.maximum(x, 0)),
    "add": (lambda x, y: (x, y), [(3, 37), (37,)], lambda x, y: x + y),
    "softmax": (lambda x: (x, 1), [(3, 5, 24)], _softmax_ref),
    "reduce_sum": (lambda x: (x, 0), [(5, 24)], lambda x: x.sum(axis=0)),
    "transpose": (lambda x: (x, (1, 0)), [(24, 7)], lambda x: x.T),
    "max_pool2d": (lambda x: (x, 2, 2), [(1, 2, 8, 48)], lambda x: x.reshape(1, 2, 4, 2, 24, 2).max(axis=(3, 5))),
}


@pytest.mark.parametrize("lanes", [8, 4])
@pytest.mark.parametrize("name", sorted(NARROW) + ["conv2d"])
def test_default_schedules_at_narrower_vector_widths(name, lanes):
    if name == "conv2d":
        x, w = te.placeholder((1, 4, 6, 24), name="x"), te.placeholder((8, 4, 3, 3), name="w")
        dx, dw = rand(1, 4, 6, 24), rand(8, 4, 3, 3)
        got = run(ops.conv2d(x, w, padding=1), [x, w], [dx, dw], ops.schedule_conv2d, HOST, lanes)
        xp = np.pad(dx.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        want = sum(np.einsum("nchw,oc->nohw", xp[:, :, i:i + 6, j:j + 24], dw[:, :, i, j])
                   for i in range(3) for j in range(3))
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
        return
    build, shapes, ref = NARROW[name]
    xs = [te.placeholder(s, name=f"x{k}") for k, s in enumerate(shapes)]
    data = [rand(*s) for s in shapes]
    entry = ops.lookup(name)
    got = run(entry.compute(*build(*xs)), xs, data, entry.schedule, HOST, lanes)
    np.testing.assert_allclose(got, ref(*[d.astype(np.float64) for d in data]), rtol=1e-4, atol=1e-5)
