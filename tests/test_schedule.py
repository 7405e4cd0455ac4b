"""Schedule primitives preserve semantics, and misuse is reported with the stage and axis.

The property tests draw random schedules (splits that do and don't divide, reorders, fuses,
annotations, local accumulators computed at random loops) of a matmul and a convolution,
build each with gcc, and compare with numpy.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from isa import ISAS

from autosched import te
from autosched.compile.kernel import build_kernel, source
from autosched.lower import lower
from autosched.schedule import ScheduleError, create_schedule

RNG = np.random.default_rng(0)


def _matmul(m, n, k):
    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    r = te.reduce_axis(k, "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], r), name="C")
    return a, b, c


def _conv(n, ci, h, w, co, kh, kw, stride, pad):
    x = te.placeholder((n, ci, h, w), name="X")
    wt = te.placeholder((co, ci, kh, kw), name="W")
    ph, pw = h + 2 * pad, w + 2 * pad
    xp = te.compute((n, ci, ph, pw), lambda b, c, y, z: te.select(
        (y >= pad) & (y < h + pad) & (z >= pad) & (z < w + pad), x[b, c, y - pad, z - pad], 0.0), name="Xpad")
    oh, ow = (ph - kh) // stride + 1, (pw - kw) // stride + 1
    rc, ry, rx = te.reduce_axis(ci, "rc"), te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")
    y = te.compute((n, co, oh, ow), lambda b, f, i, j: te.sum(
        xp[b, rc, i * stride + ry, j * stride + rx] * wt[f, rc, ry, rx], [rc, ry, rx]), name="Y")
    return x, wt, xp, y


def _conv_ref(x, w, stride, pad):
    n, ci, h, wd = x.shape
    co, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, co, oh, ow), np.float64)
    for dy in range(kh):
        for dx in range(kw):
            patch = xp[:, :, dy:dy + stride * oh:stride, dx:dx + stride * ow:stride]
            out += np.einsum("nchw,fc->nfhw", patch, w[:, :, dy, dx])
    return out


@st.composite
def matmul_schedules(draw):
    m, n, k = draw(st.sampled_from([(7, 13, 5), (16, 32, 8), (33, 17, 9), (1, 19, 3)]))
    return (m, n, k), draw(st.fixed_dictionaries({
        "fi": st.integers(1, 9), "fj": st.integers(1, 20), "fk": st.integers(1, 6),
        "order": st.permutations(range(4)), "fuse": st.booleans(), "parallel": st.booleans(),
        "cache": st.booleans(), "vec": st.booleans(), "unroll": st.booleans(), "nparts": st.booleans(),
    }))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(matmul_schedules())
def test_random_matmul_schedules_match_numpy(case):
    (m, n, k), p = case
    a, b, c = _matmul(m, n, k)
    s = create_schedule(c)
    cl = s.cache_write(c, "local") if p["cache"] else None
    stage = s[c]
    i, j = stage.op.axes
    io, ii = stage.split(i, nparts=p["fi"]) if p["nparts"] else stage.split(i, p["fi"])
    jo, ji = stage.split(j, p["fj"])
    if cl is None:
        (kk,) = stage.op.reduce_axes
        ko, ki = stage.split(kk, p["fk"])
        loops = [io, jo, ko, ii]
        stage.reorder(*[loops[x] for x in p["order"]], ki, ji)
        if p["vec"]:
            stage.vectorize(ji)
        if p["unroll"]:
            stage.unroll(ki)
        if p["fuse"] and stage.leaf_axes.index(io) + 1 == stage.leaf_axes.index(jo):
            f = stage.fuse(io, jo)
            if p["parallel"]:
                stage.parallel(f)
    else:
        stage.reorder(io, jo, ii, ji)
        outer = stage.fuse(io, jo) if p["fuse"] else jo
        if p["parallel"]:
            stage.parallel(outer)
        if p["vec"]:
            stage.vectorize(ji)
        s.compute_at(s[cl], stage, outer)
        ci, cj = s[cl].op.axes
        (ck,) = s[cl].op.reduce_axes
        ko, ki = s[cl].split(ck, p["fk"])
        s[cl].reorder(ko, ci, ki, cj)
        if p["unroll"]:
            s[cl].unroll(ki)
        if p["vec"]:
            s[cl].vectorize(cj)
    kern = build_kernel(s, [a, b, c], "mm")
    av = RNG.standard_normal((m, k)).astype(np.float32)
    bv = RNG.standard_normal((k, n)).astype(np.float32)
    cv = np.full((m, n), np.nan, np.float32)
    kern(av, bv, cv)
    np.testing.assert_allclose(cv, av @ bv, rtol=1e-4, atol=1e-4)


@st.composite
def conv_schedules(draw):
    shape = draw(st.sampled_from([(1, 3, 7, 7, 4, 3, 3, 1, 1), (1, 4, 9, 6, 5, 3, 3, 2, 1), (2, 2, 5, 5, 3, 1, 1, 1, 0)]))
    return shape, draw(st.fixed_dictionaries({
        "fco": st.integers(1, 5), "fw": st.integers(1, 8), "inline_pad": st.booleans(), "cache": st.booleans(),
        "at": st.sampled_from(["b", "fo", "i"]), "vec": st.booleans(), "unroll_rx": st.booleans(),
    }))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_schedules())
def test_random_conv_schedules_match_numpy(case):
    (n, ci, h, w, co, kh, kw, stride, pad), p = case
    x, wt, xp, y = _conv(n, ci, h, w, co, kh, kw, stride, pad)
    s = create_schedule(y)
    if p["inline_pad"]:
        s.compute_inline(xp)
    yl = s.cache_write(y, "local") if p["cache"] else None
    stage = s[y]
    b, f, i, j = stage.op.axes
    fo, fi = stage.split(f, p["fco"])
    jo, ji = stage.split(j, p["fw"])
    stage.reorder(b, fo, i, jo, fi, ji)
    if p["vec"] and yl is not None:  # without a cache stage the reduction loops stay innermost
        stage.vectorize(ji)
    target_axis = {"b": b, "fo": fo, "i": i}[p["at"]]
    if yl is not None:
        s.compute_at(s[yl], stage, target_axis)
        rc, ry, rx = s[yl].op.reduce_axes
        if p["unroll_rx"]:
            s[yl].unroll(rx)
    elif not p["inline_pad"]:
        s.compute_at(s[xp], stage, target_axis)
    kern = build_kernel(s, [x, wt, y], "conv")
    xv = RNG.standard_normal(x.shape).astype(np.float32)
    wv = RNG.standard_normal(wt.shape).astype(np.float32)
    yv = np.full(y.shape, np.nan, np.float32)
    kern(xv, wv, yv)
    np.testing.assert_allclose(yv, _conv_ref(xv, wv, stride, pad), rtol=1e-4, atol=1e-4)


# --- misuse ------------------------------------------------------------------------------

def test_split_axis_of_another_stage():
    a, b, c = _matmul(4, 4, 4)
    d = te.compute((4, 4), lambda i, j: c[i, j] + 1.0, name="D")
    s = create_schedule(d)
    with pytest.raises(ScheduleError, match=r"stage D, axis i: the axis does not belong"):
        s[d].split(s[c].op.axes[0], 2)


def test_reorder_axis_fused_away():
    a, b, c = _matmul(4, 4, 4)
    s = create_schedule(c)
    i, j = s[c].op.axes
    s[c].fuse(i, j)
    with pytest.raises(ScheduleError, match=r"stage C, axis j: the axis was already split or fused away"):
        s[c].reorder(j, i)


def test_vectorize_reduction_axis():
    a, b, c = _matmul(4, 4, 4)
    s = create_schedule(c)
    with pytest.raises(ScheduleError, match=r"stage C, axis k: cannot vectorize a reduction axis"):
        s[c].vectorize(s[c].op.reduce_axes[0])


def test_vectorize_split_of_reduction_axis():
    a, b, c = _matmul(4, 4, 8)
    s = create_schedule(c)
    _, ki = s[c].split(s[c].op.reduce_axes[0], 4)
    with pytest.raises(ScheduleError, match="loop-carried"):
        s[c].vectorize(ki)


def test_compute_at_stage_that_does_not_consume():
    x = te.placeholder((8,), name="x")
    p = te.compute((8,), lambda i: x[i] * 2.0, name="P")
    q = te.compute((8,), lambda i: x[i] + 1.0, name="Q")
    r = te.compute((8,), lambda i: p[i] + q[i], name="R")
    s = create_schedule(r)
    with pytest.raises(ScheduleError, match=r"stage P, axis i: compute_at target Q does not read"):
        s.compute_at(s[p], s[q], s[q].op.axes[0])


def test_compute_at_an_outer_loop_of_the_readers_consumer():
    """A panel copy computed at a batch loop of the output, read by an accumulator computed at
    the tile loops inside it: the copy covers the batch element's panels (bound inference
    through the accumulator's reads), not one tile's, nor the whole tensor."""
    batch, m, n, k = 3, 10, 12, 5
    a = te.placeholder((batch, m, k), name="A")
    b = te.placeholder((batch, k, n), name="B")
    bp = te.compute((batch, n, k), lambda z, j, r: b[z, r, j], name="BP")  # B's columns, k contiguous
    r = te.reduce_axis(k, "r")
    c = te.compute((batch, m, n), lambda z, i, j: te.sum(a[z, i, r] * bp[z, j, r], r), name="C")
    y = te.compute((batch, m, n), lambda z, i, j: c[z, i, j] + 1.0, name="Y")
    s = create_schedule(y)
    s[c].set_scope("local")
    z, i, j = s[y].op.axes
    io, ii = s[y].split(i, 4)  # the last row tile is partial: the panel still covers every row's reads
    s[y].parallel(z)
    s.compute_at(s[c], s[y], io)
    s.compute_at(s[bp], s[y], z)
    code = source(s, [a, b, y])
    assert "float BP[60]" in code  # one batch element's n x k panel
    kern = build_kernel(s, [a, b, y], "panel_at_batch")
    av = RNG.standard_normal((batch, m, k)).astype(np.float32)
    bv = RNG.standard_normal((batch, k, n)).astype(np.float32)
    yv = np.zeros((batch, m, n), np.float32)
    kern(av, bv, yv)
    np.testing.assert_allclose(yv, av @ bv + 1.0, rtol=1e-5, atol=1e-5)


def test_compute_at_a_loop_none_of_whose_stages_read_the_tensor():
    x = te.placeholder((8,), name="x")
    p = te.compute((8,), lambda i: x[i] * 2.0, name="P")
    q = te.compute((8,), lambda i: p[i] + 1.0, name="Q")
    r = te.compute((8,), lambda i: x[i] - 1.0, name="R")
    out = te.compute((8,), lambda i: q[i] + r[i], name="O")
    s = create_schedule(out)
    s.compute_at(s[r], s[out], s[out].op.axes[0])
    with pytest.raises(ScheduleError, match=r"compute_at target R does not read this stage's tensor, nor does"):
        s.compute_at(s[p], s[r], s[r].op.axes[0])


def test_vectorize_non_innermost_fails_at_lowering():
    a, b, c = _matmul(4, 8, 4)
    s = create_schedule(c)
    i, j = s[c].op.axes
    s[c].vectorize(i)
    with pytest.raises(ScheduleError, match=r"stage C, axis i: only the innermost loop"):
        lower(s, [a, b, c])


def test_fuse_needs_adjacent_axes_and_cache_write_first():
    x = te.placeholder((4, 4, 4), name="x")
    y = te.compute((4, 4, 4), lambda i, j, k: x[i, j, k] + 1.0, name="Y")
    s = create_schedule(y)
    i, j, k = s[y].op.axes
    with pytest.raises(ScheduleError, match="adjacent"):
        s[y].fuse(i, k)
    s[y].split(i, 2)
    with pytest.raises(ScheduleError, match="cache_write must come before"):
        s.cache_write(y, "local")


def test_missing_argument_is_named():
    a, b, c = _matmul(4, 4, 4)
    s = create_schedule(c)
    with pytest.raises(ScheduleError, match="input B is read but not among"):
        lower(s, [a, c])


def test_cache_read_into_local_copy():
    a, b, c = _matmul(8, 8, 8)
    s = create_schedule(c)
    bl = s.cache_read(b, "local", [s[c]])
    i, j = s[c].op.axes
    s.compute_at(s[bl], s[c], i)
    kern = build_kernel(s, [a, b, c], "mm_cache_read")
    av, bv = RNG.standard_normal((8, 8)).astype(np.float32), RNG.standard_normal((8, 8)).astype(np.float32)
    cv = np.zeros((8, 8), np.float32)
    kern(av, bv, cv)
    np.testing.assert_allclose(cv, av @ bv, rtol=1e-4, atol=1e-4)


def test_inline_and_pragma_auto_unroll():
    x = te.placeholder((6, 5), name="x")
    t = te.compute((6, 5), lambda i, j: te.exp(x[i, j]), name="T")
    u = te.compute((6, 5), lambda i, j: t[i, j] * 2.0 + 1.0, name="U")
    s = create_schedule(u)
    s.compute_inline(t)
    s[u].pragma(s[u].op.axes[0], "auto_unroll_max_step", 8)
    func = lower(s, [x, u])
    assert "# unroll" in repr(func) and "exp(" in repr(func)
    kern = build_kernel(s, [x, u], "inline")
    xv = RNG.standard_normal((6, 5)).astype(np.float32)
    uv = np.zeros((6, 5), np.float32)
    kern(xv, uv)
    np.testing.assert_allclose(uv, np.exp(xv) * 2 + 1, rtol=1e-5)


def test_precomputed_stage_becomes_an_argument():
    x = te.placeholder((8,), name="x")
    w = te.placeholder((8,), name="w")
    w2 = te.compute((8,), lambda i: w[7 - i] * 2.0, name="w2")
    y = te.compute((8,), lambda i: x[i] + w2[i], name="y")
    s = create_schedule(y)
    s.precompute(w2)
    with pytest.raises(ScheduleError, match="w2 is precomputed but not among"):
        lower(s, [x, y])
    func = lower(s, [x, y, w2])  # w itself is no longer needed
    assert "w2[" in repr(func) and "w[" not in repr(func)
    kern = build_kernel(s, [x, y, w2], "uses_precomputed")
    xv, w2v, yv = np.arange(8, dtype=np.float32), np.full(8, 10, np.float32), np.zeros(8, np.float32)
    kern(xv, yv, w2v)
    np.testing.assert_array_equal(yv, xv + 10)
    with pytest.raises(ScheduleError, match="output"):
        s.precompute(y)


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_shifted_split_keeps_the_last_tile_in_vectors(isa):
    """197 columns in vectors: the last tile starts early instead of overhanging, so the C back
    end emits no scalar edge loop, and the points both tiles cover are written twice alike."""
    target, _, lanes = ISAS[isa]
    x = te.placeholder((3, 197), name="x")
    y = te.compute((3, 197), lambda i, j: te.exp(x[i, j]) * 2.0, name="y")
    s = create_schedule(y)
    _, inner = s[y].split(s[y].op.axes[1], lanes, shift=True)
    s[y].vectorize(inner)
    code = source(s, [x, y], "k", target)
    assert f"vexp_f32x{lanes}(" in code and "expf(" not in code and "omp simd" not in code


def test_shifted_split_computes_every_point():
    x = te.placeholder((5, 13), name="x")
    y = te.compute((5, 13), lambda i, j: x[i, j] * 3.0 + 1.0, name="y")
    s = create_schedule(y)
    outer, inner = s[y].split(s[y].op.axes[1], 4, shift=True)
    s[y].vectorize(inner)
    s[y].parallel(s[y].fuse(s[y].op.axes[0], outer))
    data = np.random.default_rng(0).standard_normal((5, 13)).astype(np.float32)
    out = np.full((5, 13), np.nan, np.float32)
    build_kernel(s, [x, y], "k")(data, out)
    np.testing.assert_allclose(out, data * 3.0 + 1.0, rtol=1e-6)


def test_shifted_split_is_refused_where_points_accumulate():
    x = te.placeholder((4, 13), name="x")
    k = te.reduce_axis(13, "k")
    y = te.compute((4,), lambda i: te.sum(x[i, k], k), name="y")
    s = create_schedule(y)
    with pytest.raises(ScheduleError, match="shifted split"):
        s[y].split(s[y].op.axes[0], 3, shift=True)
    z = te.compute((4, 13), lambda i, j: x[i, j], name="z")
    s = create_schedule(z)
    with pytest.raises(ScheduleError, match="shifted split takes factor"):
        s[z].split(s[z].op.axes[0], nparts=2, shift=True)


def test_a_buffer_too_large_for_the_stack_is_still_its_readers():
    """A stage computed at a loop whose region exceeds the stack limit is heap-allocated in a block
    of its own (`codegen/c.py`); the loop's body that reads it must be inside that block. Before,
    only the stage's own nest was, and gcc refused the reader ("undeclared")."""
    rows, cols = 3, 70_000  # 280 KB of float32 per row: over the 256 KB stack limit
    x = te.placeholder((rows, cols), name="x")
    t = te.compute((rows, cols), lambda i, j: x[i, j] * 2.0, name="T")
    y = te.compute((rows, cols), lambda i, j: t[i, cols - 1 - j] + 1.0, name="Y")
    s = create_schedule(y)
    s.compute_at(s[t], s[y], s[y].op.axes[0])
    code = source(s, [x, y], "k")
    assert "aligned_alloc" in code  # on the heap: gcc refuses the build below if Y reads T out of scope
    data = RNG.standard_normal((rows, cols)).astype(np.float32)
    out = np.zeros((rows, cols), np.float32)
    build_kernel(s, [x, y], "k")(data, out)
    np.testing.assert_allclose(out, data[:, ::-1] * 2.0 + 1.0, rtol=1e-6)
