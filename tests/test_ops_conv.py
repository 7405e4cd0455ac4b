"""Conv2d against a numpy reference: strides, padding, dilation, groups, depthwise, epilogues."""
import numpy as np
import pytest
from isa import ISAS
from ops_helpers import rand, run

from autosched import ops, te
from autosched.compile.kernel import source
from autosched.ops.epilogue import add, bias_add, clip, relu
from autosched.ops.util import as_pads2d, as_pair


def conv_ref(x, w, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """Sum over the kernel window of shifted, strided input slices times the weights, per group."""
    top, left, bottom, right = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, c, h, wd = xp.shape
    oc, icg, kh, kw = w.shape
    oh = (h - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, oc, oh, ow))
    ocg = oc // groups
    for g in range(groups):
        for y in range(kh):
            for z in range(kw):
                y0, z0 = y * dilation[0], z * dilation[1]
                patch = xp[:, g * icg:(g + 1) * icg,
                           y0:y0 + stride[0] * (oh - 1) + 1:stride[0], z0:z0 + stride[1] * (ow - 1) + 1:stride[1]]
                out[:, g * ocg:(g + 1) * ocg] += np.einsum("nchw,oc->nohw", patch, w[g * ocg:(g + 1) * ocg, :, y, z])
    return out


CASES = {
    "1x1": ((1, 8, 5, 5), (16, 8, 1, 1), 1, 0, 1, 1),
    "3x3_pad1": ((2, 3, 7, 7), (4, 3, 3, 3), 1, 1, 1, 1),
    "stride2": ((1, 4, 9, 11), (6, 4, 3, 3), 2, 1, 1, 1),
    "stride2_7x7": ((1, 3, 17, 17), (8, 3, 7, 7), 2, 3, 1, 1),
    "dilation2": ((1, 3, 9, 9), (5, 3, 3, 3), 1, 2, 2, 1),
    "groups2": ((1, 4, 6, 7), (6, 2, 3, 3), 1, 1, 1, 2),
    "depthwise": ((1, 8, 7, 7), (8, 1, 3, 3), 1, 1, 1, 8),
    "depthwise_stride2_multiplier2": ((2, 4, 8, 8), (8, 1, 3, 3), 2, 1, 1, 4),
    "asymmetric_pads": ((1, 2, 5, 6), (3, 2, 3, 2), (1, 2), (0, 1, 2, 1), 1, 1),
    "odd_channels_wide_row": ((1, 3, 2, 127), (7, 3, 1, 3), 1, (0, 1), 1, 1),
    "vector_width": ((1, 16, 6, 32), (16, 16, 3, 3), 1, 1, 1, 1),
    "rectangular_kernel_stride": ((1, 2, 11, 10), (4, 2, 2, 5), (3, 1), 0, (1, 2), 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_conv2d_matches_numpy(name, cpu_target):
    xs, ws, stride, padding, dilation, groups = CASES[name]
    x, w = te.placeholder(xs, name="x"), te.placeholder(ws, name="w")
    dx, dw = rand(*xs), rand(*ws)
    y = ops.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    got = run(y, [x, w], [dx, dw], ops.schedule_conv2d, cpu_target)
    want = conv_ref(dx, dw, as_pair(stride, "stride"), as_pads2d(padding), as_pair(dilation, "dilation"), groups)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


XS, WS = (2, 6, 9, 10), (8, 3, 3, 3)  # groups=2, stride 2, padding 1: output 2 x 8 x 5 x 5


@pytest.mark.parametrize("epilogue", ["bias", "relu", "clip", "residual", "bias_relu_residual"])
def test_conv2d_epilogues(epilogue, cpu_target):
    x, w = te.placeholder(XS, name="x"), te.placeholder(WS, name="w")
    b, r = te.placeholder((8,), name="b"), te.placeholder((2, 8, 5, 5), name="r")
    dx, dw, db, dr = rand(*XS), rand(*WS), rand(8), rand(2, 8, 5, 5)
    base = conv_ref(dx, dw, (2, 2), (1, 1, 1, 1), (1, 1), 2)
    chains = {
        "bias": ([bias_add(b, 1)], [b], [db], base + db.reshape(1, 8, 1, 1)),
        "relu": ([relu], [], [], np.maximum(base, 0)),
        "clip": ([clip(0.0, 0.5)], [], [], np.clip(base, 0.0, 0.5)),
        "residual": ([add(r)], [r], [dr], base + dr),
        "bias_relu_residual": ([relu, add(r)], [b, r], [db, dr], np.maximum(base + db.reshape(1, 8, 1, 1), 0) + dr),
    }
    fns, extra, extra_data, want = chains[epilogue]
    bias = b if epilogue == "bias_relu_residual" else None
    y = ops.conv2d(x, w, bias, stride=2, padding=1, groups=2, epilogue=fns)
    got = run(y, [x, w] + extra, [dx, dw] + extra_data, ops.schedule_conv2d, cpu_target)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_default_schedule_is_register_tiled_simd(isa):
    lanes = ISAS[isa][2]
    """Output columns vectorized, channel rows unrolled in a local accumulator, tiles parallel."""
    x, w = te.placeholder((1, 16, 8, 32), name="x"), te.placeholder((16, 16, 3, 3), name="w")
    y = ops.conv2d(x, w, padding=1, epilogue=[relu])
    code = source(ops.schedule_conv2d(y, lanes), [x, w, y], "conv")
    assert f"f32x{lanes}" in code
    assert "#pragma GCC unroll 8" in code
    assert "#pragma omp parallel for" in code
    assert "conv2d_pad" in code  # padding computed at root, not inside the inner loop


def test_conv2d_rejects_inconsistent_shapes():
    x = te.placeholder((1, 6, 5, 5))
    with pytest.raises(ValueError, match="groups"):
        ops.conv2d(x, te.placeholder((4, 4, 3, 3)), groups=2)
    with pytest.raises(ValueError, match="does not fit"):
        ops.conv2d(x, te.placeholder((4, 6, 7, 7)))
    with pytest.raises(ValueError, match="padding"):
        ops.conv2d(x, te.placeholder((4, 6, 3, 3)), padding=(1, 2, 3))
