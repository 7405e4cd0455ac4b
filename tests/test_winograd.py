"""Winograd convolution: the generated matrices, the op against a float64 direct convolution, the
template's algorithm knob (random configs per ISA through the real builder and runner), and the
weight transform leaving the model's run time.

Tolerance: max |y - y64| ≤ 3e-5 · max |y64| (float32 kernel against a float64 numpy direct
convolution). Winograd's rounding error is larger than the direct algorithm's because the
transforms mix inputs with coefficients up to 8 (F(4,3)) before the channel sums; the float32
simulation below measures ≤ 1e-6 (F(2,3)) and ≤ 5e-6 (F(4,3), points 0, ±1, 2, -1/2) of max |y|
at up to 512 channels, and these tests use at most 24 channels, so 3e-5 leaves a 6× margin while
still catching any wrong coefficient (which errs by O(1) of max |y|). The tuner's runner checks
with its own, looser, rtol 1e-3 / atol 1e-4 · max |y|.
"""
import zlib
from fractions import Fraction

import numpy as np
import pytest
from isa import ISAS, runs_here
from task_helpers import conv_task

from autosched import te
from autosched.backend import renderer_for
from autosched.compile.kernel import build_kernel
from autosched.compile.model import _plan_kernel
from autosched.lower import lower
from autosched.measure import MeasureInput, measure_with
from autosched.measure.local import LocalBuilder, LocalRunner, RunnerOptions
from autosched.ops import winograd
from autosched.schedule import Attach, create_schedule
from autosched.templates import get_template
from search_spaces.llvm import conv2d_winograd as wino
from search_spaces.llvm.common import InvalidConfigError

TOLERANCE = 3e-5
TEXTBOOK_F4 = (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2))


def _direct64(x: np.ndarray, w: np.ndarray, pad: int, dilation: tuple[int, int] = (1, 1)) -> np.ndarray:
    dh, dw = dilation
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = xp.shape[2] - 2 * dh, xp.shape[3] - 2 * dw
    y = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for kh in range(3):
        for kw in range(3):
            y += np.einsum("nchw,oc->nohw", xp[:, :, kh * dh:kh * dh + oh, kw * dw:kw * dw + ow],
                           w[:, :, kh, kw].astype(np.float64))
    return y


def _float32_winograd(x: np.ndarray, w: np.ndarray, m: int, points=None) -> np.ndarray:
    """Valid (unpadded) Winograd convolution in numpy with every stage rounded to float32: how
    the error bounds in autosched/ops/winograd.py were measured. H - 2 and W - 2 divide by m."""
    at, g, bt = (a.astype(np.float32) for a in winograd.winograd_matrices(m, points))
    alpha, (n, _, h, wd) = m + 2, x.shape
    th, tw = (h - 2) // m, (wd - 2) // m
    u = np.einsum("ek,ockl,nl->enoc", g, w.astype(np.float32), g).astype(np.float32)
    tiles = np.stack([np.stack([x[:, :, i * m:i * m + alpha, j * m:j * m + alpha] for j in range(tw)], 2)
                      for i in range(th)], 2).astype(np.float32)
    v = np.einsum("ei,nctsij,qj->eqncts", bt, tiles, bt).astype(np.float32)
    mm = np.einsum("eqoc,eqncts->eqnots", u, v).astype(np.float32)
    y = np.einsum("ie,eqnots,jq->notsij", at, mm, at).astype(np.float32)
    return y.transpose(0, 1, 2, 4, 3, 5).reshape(n, -1, th * m, tw * m)


def _rel_error(y: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(y - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("m", winograd.TILE_SIZES)
def test_generated_matrices_satisfy_the_correlation_identity(m):
    at, g, bt = winograd.winograd_matrices(m)
    assert at.shape == (m, m + 2) and g.shape == (m + 2, 3) and bt.shape == (m + 2, m + 2)
    rng = np.random.default_rng(m)
    for _ in range(5):
        d, k = rng.standard_normal(m + 2), rng.standard_normal(3)
        np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), np.correlate(d, k, "valid"), rtol=0, atol=1e-12)


def test_f2_matrices_are_the_papers():
    at, _, bt = winograd.winograd_matrices(2)
    assert at.tolist() == [[1, 1, 1, 0], [0, 1, -1, 1]]
    assert np.abs(bt).tolist() == [[1, 0, 1, 0], [0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 0, 1]]


def test_chosen_f4_points_round_less_than_the_textbook_points():
    """The documented choice: 0, ±1, 2, -1/2 against 0, ±1, ±2, same data (float32 simulation)."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 128, 18, 18)), rng.standard_normal((32, 128, 3, 3))
    ref = _direct64(x, w, 0)
    chosen = _rel_error(_float32_winograd(x, w, 4), ref)
    textbook = _rel_error(_float32_winograd(x, w, 4, TEXTBOOK_F4), ref)
    f2 = _rel_error(_float32_winograd(x, w, 2), ref)
    assert chosen < textbook and chosen < 1e-5 and f2 < 2e-6


def test_f6_rounds_within_the_checks_tolerance():
    """F(6×6)'s bound in search_spaces/llvm/conv2d_winograd.py (`algorithms`): about five times
    F(4)'s error at 512 channels and below the model check's 1e-4 of max |y|."""
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 512, 14, 14)), rng.standard_normal((32, 512, 3, 3))
    ref = _direct64(x, w, 0)
    f4, f6 = (_rel_error(_float32_winograd(x, w, m), ref) for m in (4, 6))
    assert f4 < f6 < 5e-5


# (N, C, H, W, OC, pad, ic_bn, oc_bn): odd sizes, partial tiles, channel counts not multiples of 16
SHAPES = [(1, 6, 7, 9, 10, 1, 3, 5), (2, 12, 11, 10, 6, 2, 4, 3), (1, 8, 5, 5, 8, 0, 8, 8),
          (1, 24, 9, 13, 20, 1, 6, 4), (1, 5, 6, 6, 3, 2, 5, 1)]


@pytest.mark.parametrize("m", winograd.TILE_SIZES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_op_matches_float64_direct_convolution(m, shape):
    """The NCHW wrapper (pack, Winograd, unpack) with bias, at the op library's plain schedule."""
    n, c, h, wd, oc, pad, ic_bn, oc_bn = shape
    x, w, b = te.placeholder((n, c, h, wd), name="x"), te.placeholder((oc, c, 3, 3), name="w"), te.placeholder((oc,), name="b")
    out = winograd.conv2d_winograd(x, w, b, pad, m=m, ic_bn=ic_bn, oc_bn=oc_bn)
    kernel = build_kernel(create_schedule(out), [x, w, b, out], "winograd")
    rng = np.random.default_rng(zlib.crc32(repr(shape).encode()))
    xs, ws, bs = (rng.standard_normal(s).astype(np.float32) for s in ((n, c, h, wd), (oc, c, 3, 3), (oc,)))
    y = np.empty(out.shape, np.float32)
    kernel(xs, ws, bs, y)
    assert _rel_error(y, _direct64(xs, ws, pad) + bs[None, :, None, None]) <= TOLERANCE


def test_blocked_op_takes_and_gives_nchwc_with_a_blocked_epilogue():
    n, c, h, wd, oc, bi, bo = 1, 8, 7, 7, 12, 4, 6
    x = te.placeholder((n, c // bi, h, wd, bi), name="x")
    w, b = te.placeholder((oc, c, 3, 3), name="w"), te.placeholder((oc,), name="b")
    relu = lambda v, i: te.max(v, te.const(0.0, v.dtype))  # noqa: E731
    out = winograd.conv2d_winograd_nchwc(x, w, b, 1, m=4, oc_bn=bo, epilogue=(relu,))
    assert out.shape == (n, oc // bo, h, wd, bo)
    kernel = build_kernel(create_schedule(out), [x, w, b, out], "winograd_nchwc")
    rng = np.random.default_rng(1)
    xs, ws, bs = (rng.standard_normal(s).astype(np.float32) for s in ((n, c, h, wd), (oc, c, 3, 3), (oc,)))
    y = np.empty(out.shape, np.float32)
    kernel(np.ascontiguousarray(xs.reshape(n, c // bi, bi, h, wd).transpose(0, 1, 3, 4, 2)), ws, bs, y)
    ref = np.maximum(_direct64(xs, ws, 1) + bs[None, :, None, None], 0)
    got = y.transpose(0, 1, 4, 2, 3).reshape(n, oc, h, wd)
    assert _rel_error(got, ref) <= TOLERANCE


@pytest.mark.parametrize("count, wanted, tile", [(16, 12, 8), (16, 14, 8), (196, 16, 14), (196, 7, 7), (100, 7, 5),
                                                (81, 7, 7), (1369, 7, 7), (361, 12, 12), (4, 16, 4)])
def test_gemm_tiles_keep_divisors_of_at_least_half_the_wanted_tile(count, wanted, tile):
    """The first four are the shipped records' tiles (16 tiles of ResNet-18's 7×7 maps under
    F(2) and of its 14×14 ones under F(4), 196 of its 56×56 ones): they mean what they did when
    only divisors were taken."""
    assert winograd.gemm_tile(count, wanted) == tile


@pytest.mark.parametrize("n, multiple, padded", [(1, 8, 16), (1, 4, 9), (1, 16, 9), (2, 16, 18)])
def test_the_tile_count_rounds_up_to_the_register_tile(n, multiple, padded):
    """F(2) on 6×6 outputs: 9 tiles an image. The repeats of the last tile feed GEMM rows the
    output transform never reads; a divisor of at least half the wanted tile, or more tiles
    wanted than there are, leaves the count whole."""
    c, bi, bo, oc = 8, 4, 4, 8
    x = te.placeholder((n, c // bi, 6, 6, bi), name="x")
    w, b = te.placeholder((oc, c, 3, 3), name="w"), te.placeholder((oc,), name="b")
    out = winograd.conv2d_winograd_nchwc(x, w, b, 1, m=2, oc_bn=bo, tile_multiple=multiple)
    sched = create_schedule(out)
    assert next(st for st in sched.stages if st.op.tag == winograd.GEMM_TAG).op.shape[3] == padded
    kernel = build_kernel(sched, [x, w, b, out], "winograd_rounded")
    rng = np.random.default_rng(multiple)
    xs, ws, bs = (rng.standard_normal(s).astype(np.float32) for s in ((n, c, 6, 6), (oc, c, 3, 3), (oc,)))
    y = np.empty(out.shape, np.float32)
    kernel(np.ascontiguousarray(xs.reshape(n, c // bi, bi, 6, 6).transpose(0, 1, 3, 4, 2)), ws, bs, y)
    got = y.transpose(0, 1, 4, 2, 3).reshape(n, oc, 6, 6)
    assert _rel_error(got, _direct64(xs, ws, 1) + bs[None, :, None, None]) <= TOLERANCE


#: n, c, h, w, oc, pad, dilation, m: outputs that are whole phases of whole tiles, phases of
#: different lengths (13 rows at dilation 3), partial tiles, and dilation along one axis only
DILATED = [(1, 8, 12, 12, 8, 2, (2, 2), 4), (1, 8, 13, 11, 12, 3, (3, 3), 4), (2, 8, 9, 10, 8, 2, (2, 2), 2),
           (1, 8, 10, 9, 8, 1, (2, 2), 2), (1, 8, 16, 15, 8, 2, (2, 1), 4)]


@pytest.mark.parametrize("shape", DILATED, ids=lambda s: "x".join(map(str, s[:5])) + f"_d{s[6][0]}{s[6][1]}_m{s[7]}")
def test_dilated_convolutions_run_per_phase(shape):
    """A dilated convolution's tiles are cut per phase (every d-th row and column); the op at
    its plain schedule against the float64 direct convolution, the output in channel blocks."""
    n, c, h, wd, oc, pad, dilation, m = shape
    bi = bo = 4
    x = te.placeholder((n, c // bi, h, wd, bi), name="x")
    w, b = te.placeholder((oc, c, 3, 3), name="w"), te.placeholder((oc,), name="b")
    out = winograd.conv2d_winograd_nchwc(x, w, b, pad, dilation, m=m, oc_bn=bo)
    kernel = build_kernel(create_schedule(out), [x, w, b, out], "winograd_dilated")
    rng = np.random.default_rng(zlib.crc32(repr(shape).encode()))
    xs, ws, bs = (rng.standard_normal(s).astype(np.float32) for s in ((n, c, h, wd), (oc, c, 3, 3), (oc,)))
    y = np.empty(out.shape, np.float32)
    kernel(np.ascontiguousarray(xs.reshape(n, c // bi, bi, h, wd).transpose(0, 1, 3, 4, 2)), ws, bs, y)
    ref = _direct64(xs, ws, pad, dilation) + bs[None, :, None, None]
    got = y.transpose(0, 1, 4, 2, 3).reshape(ref.shape)
    assert _rel_error(got, ref) <= TOLERANCE


def test_ineligible_convolutions_are_refused():
    x = te.placeholder((1, 2, 8, 8, 4), name="x")
    with pytest.raises(ValueError, match="only 3x3"):
        winograd.conv2d_winograd_nchwc(x, te.placeholder((8, 8, 5, 5), name="w"), m=2, oc_bn=4)
    with pytest.raises(ValueError, match="tile size 3"):
        winograd.conv2d_winograd_nchwc(x, te.placeholder((8, 8, 3, 3), name="w"), m=3, oc_bn=4)


# --- the template --------------------------------------------------------------------------------

TEMPLATE = get_template("Conv", "llvm")
TASK = dict(x_shape=(1, 12, 9, 11), w_shape=(24, 12, 3, 3), pad=1, bias=True, epilogue="residual")


def test_only_eligible_convolutions_get_the_algorithm_knob(cpu_target):
    def knobs(task):
        return {k.name for k in TEMPLATE.space(task, cpu_target).knobs}
    assert {"algorithm", "wino_tile_t", "wino_gemm_order"} <= knobs(conv_task((1, 8, 9, 9), (16, 8, 3, 3), pad=1))
    assert "algorithm" in knobs(conv_task((1, 8, 9, 9), (16, 8, 3, 3), pad=2, dilation=2))
    for other in (conv_task((1, 8, 9, 9), (16, 8, 1, 1)), conv_task((1, 8, 9, 9), (16, 8, 3, 3), stride=2, pad=1),
                  conv_task((1, 8, 9, 9), (8, 1, 3, 3), pad=1, group=8)):
        assert "algorithm" not in knobs(other)
    task = conv_task((1, 8, 9, 9), (16, 8, 3, 3), pad=1)
    assert TEMPLATE.space(task, cpu_target).knob("algorithm").values == ("direct", "winograd_2", "winograd_4")
    assert TEMPLATE.fallback(task, cpu_target)["algorithm"] == "direct"


@pytest.mark.parametrize("x_shape, dilation, f6", [((1, 8, 12, 12), 1, True), ((1, 8, 12, 11), 1, False),
                                                   ((1, 8, 24, 24), 2, True), ((1, 8, 22, 24), 2, False)])
def test_f6_is_offered_on_maps_of_two_whole_tiles_a_side(cpu_target, x_shape, dilation, f6):
    """Per phase of a dilated convolution: 22 rows at dilation 2 are phases of 11."""
    task = conv_task(x_shape, (16, 8, 3, 3), pad=dilation, dilation=dilation)
    assert ("winograd_6" in TEMPLATE.space(task, cpu_target).knob("algorithm").values) == f6
    assert wino.algorithms((12, 12), (1, 1))[-1] == "winograd_6" and "winograd_6" not in wino.algorithms((7, 7), (1, 1))


def _winograd_configs(task, target, n: int, seed: int, algorithms=("winograd_2", "winograd_4")) -> list:
    space = TEMPLATE.space(task, target)
    out = []
    for i in space.sample(40 * n, np.random.default_rng(seed)):
        config = space.get(i)
        if config["algorithm"] not in algorithms:  # direct: tests/test_templates_llvm.py draws those
            continue
        try:
            TEMPLATE.apply(task, config, target)
        except InvalidConfigError:
            continue
        out.append(config)
        if len(out) == n:
            break
    return out


@pytest.fixture(scope="module")
def measure(tmp_path_factory):
    runner = LocalRunner(RunnerOptions(repeat=1, min_repeat_ms=0.2, timeout=20.0, stop_factor=0))
    yield measure_with(LocalBuilder(n_parallel=2, cache_dir=tmp_path_factory.mktemp("kernels")), runner)
    runner.close()


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_random_winograd_configs_are_correct(isa, measure):
    _check_random_winograd_configs(isa, 8, measure)


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_random_winograd_configs_of_dilated_tasks_are_correct(isa, measure):
    """The NCHW template's unpacking takes m·d rows at a time: a row of tiles of every phase."""
    _check_random_winograd_configs(isa, 6, measure, {**TASK, "pad": 2, "dilation": 2})


@pytest.mark.slow  # 14 s on an AVX2 host; the eight above stay in the default suite
@pytest.mark.parametrize("isa", sorted(ISAS))
def test_twenty_random_winograd_configs_are_correct(isa, measure):
    _check_random_winograd_configs(isa, 20, measure)


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_random_f6_configs_are_correct(isa, measure):
    """F(6×6) on a map of two whole tiles a side (14×13: partial tiles too)."""
    _check_random_winograd_configs(isa, 4, measure, {**TASK, "x_shape": (1, 12, 14, 13)}, ("winograd_6",))


def _check_random_winograd_configs(isa: str, n: int, measure, task_args: dict = TASK,
                                   algorithms=("winograd_2", "winograd_4")) -> None:
    """Built for each ISA's target (its lanes and registers) on any host; run where the host can."""
    target, register, lanes = ISAS[isa]
    task = conv_task(**task_args)
    configs = _winograd_configs(task, target, n, zlib.crc32(isa.encode()), algorithms)
    assert len(configs) == n
    assert {c["algorithm"] for c in configs} == set(algorithms)
    for config in configs[:3]:
        code = renderer_for("llvm").render(lower(*TEMPLATE.apply(task, config, target), "k"))
        assert "#pragma omp parallel for" in code  # vectors: 24 channels give blocks of 6, 8, 12, 24
    if not runs_here(target):
        pytest.skip(f"the host cannot run {isa} code (generated and rendered above)")
    results = measure([MeasureInput(task, target, c) for c in configs])
    bad = [(c.to_json()["knobs"], r.error_kind.name, r.error_msg[:300]) for c, r in zip(configs, results) if not r.ok]
    assert not bad, bad


def test_winograd_outputs_within_the_stated_tolerance_at_template_schedules(cpu_target):
    """The runner's check is looser than the stated bound: check the bound on scheduled kernels too."""
    if not runs_here(cpu_target):
        pytest.skip("host cannot run this ISA")
    task = conv_task(**TASK)
    inputs = task.random_inputs(0)
    ref = task.reference(inputs)
    ref = ref[0] if isinstance(ref, (list, tuple)) else ref
    for config in _winograd_configs(task, cpu_target, 4, 7):
        kernel = build_kernel(*TEMPLATE.apply(task, config, cpu_target), "k", target=cpu_target)
        y = np.empty(task.out_shapes[0], np.float32)
        kernel(*inputs, y)
        assert _rel_error(y, ref) <= TOLERANCE, config.to_json()["knobs"]


def test_every_sampled_config_of_the_space_builds_or_is_refused_by_name(cpu_target):
    """The tuner draws from the whole space (both algorithms): each draw lowers and renders, or
    is an InvalidConfigError (a register tile over the target's limit)."""
    task = conv_task((1, 16, 14, 14), (32, 16, 3, 3), pad=1, bias=True, epilogue="relu")
    space = TEMPLATE.space(task, cpu_target)
    built = 0
    for i in space.sample(30, np.random.default_rng(3)):
        try:
            sched, args = TEMPLATE.apply(task, space.get(i), cpu_target)
        except InvalidConfigError:
            continue
        code = renderer_for("llvm").render(lower(sched, args, "k"))
        assert f"f32x{cpu_target.capabilities.lanes(4)}" in code  # vector widths are the target's
        built += 1
    assert built >= 15


@pytest.mark.parametrize("algorithm", ["winograd_2", "winograd_4"])
def test_the_weight_transform_is_computed_at_build_time(algorithm, cpu_target):
    """A model build precomputes the weight-only frontier: for Winograd that is the transformed
    weights U, so the kernel reads U and never the raw weights."""
    task = conv_task((1, 8, 9, 9), (16, 8, 3, 3), pad=1, bias=True)
    space = TEMPLATE.space(task, cpu_target)
    config = space.from_values({**TEMPLATE.fallback(task, cpu_target).to_json()["knobs"], "algorithm": algorithm})
    sched, args = TEMPLATE.apply(task, config, cpu_target)
    weights = next(i for i, v in enumerate(task.input_values) if v.shape == (16, 8, 3, 3))
    plan = _plan_kernel(sched, args, (weights, 2), "k")
    (_, sources), = plan.folded
    assert sources == [weights]
    assert [st.op.tag for st in sched.stages if st.attach is Attach.PRECOMPUTED] == [winograd.WEIGHT_TAG]
    assert not plan.used[weights]  # the kernel no longer reads the OIHW weights


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_fallback_picks_winograd_for_wide_layers_and_is_correct(isa, measure):
    """Untuned builds run Winograd where both channel counts are whole vectors (≥ 32): F(4) on
    maps of at least 16, F(2) down to 8; F(2) where they are not whole vectors but at least 16
    (HRNet's 18 and 36, Res2Net's 26); fewer channels, whole vectors below 32 and 7×7 maps keep
    the direct algorithm."""
    target, _, lanes = ISAS[isa]
    wide, small = conv_task((1, 32, 18, 17), (64, 32, 3, 3), pad=1, bias=True, epilogue="relu"), \
        conv_task((1, 64, 9, 8), (32, 64, 3, 3), pad=1, epilogue="residual")
    odd = conv_task((1, 26, 12, 11), (26, 26, 3, 3), pad=1, bias=True, epilogue="relu")
    assert TEMPLATE.fallback(conv_task((1, 64, 7, 7), (64, 64, 3, 3), pad=1), target)["algorithm"] == "direct"
    configs = [TEMPLATE.fallback(t, target) for t in (wide, small, odd)]
    assert [c["algorithm"] for c in configs] == ["winograd_4", "winograd_2", "winograd_2"]
    for config in configs[:2]:
        assert config["oc_bn"] % lanes == 0 and config["ic_bn"] % lanes == 0
    for channels, pad in ((12, "root"), (16, "inline")):  # too few; whole vectors below 32
        config = TEMPLATE.fallback(conv_task((1, channels, 9, 9), (channels, channels, 3, 3), pad=1), target)
        # a direct kernel of channels no vector divides pads its input in a copy of its own
        assert (config["algorithm"], config["pad"]) == ("direct", pad)
    if not runs_here(target):
        pytest.skip(f"the host cannot run {isa} code")
    results = measure([MeasureInput(t, target, c) for t, c in zip((wide, small, odd), configs)])
    assert all(r.ok for r in results), [r.error_msg[:300] for r in results]


def test_the_blocked_schedule_serves_an_nchwc_computation(cpu_target):
    """`schedule_winograd` on `conv2d_winograd_nchwc` (what an NCHW[x]c template will call),
    with a blocked epilogue inlined into the output transform."""
    if not runs_here(cpu_target):
        pytest.skip("host cannot run this ISA")
    lanes = cpu_target.capabilities.lanes(4)
    n, c, h, wd, oc, bi, bo = 1, 2 * lanes, 9, 10, 2 * lanes, lanes, lanes
    task = conv_task((n, c, h, wd), (oc, c, 3, 3), pad=1)
    space = TEMPLATE.space(task, cpu_target)
    for algorithm, pad in (("winograd_2", "root"), ("winograd_4", "inline")):
        config = space.from_values({**TEMPLATE.fallback(task, cpu_target).to_json()["knobs"], "algorithm": algorithm,
                                    "pad": pad, "oc_bn": bo})
        x = te.placeholder((n, c // bi, h, wd, bi), name="x")
        w, b = te.placeholder((oc, c, 3, 3), name="w"), te.placeholder((oc,), name="b")
        relu = lambda v, i: te.max(v, te.const(0.0, v.dtype))  # noqa: E731
        out = winograd.conv2d_winograd_nchwc(x, w, b, 1, m=wino.tile_size(config), oc_bn=bo, epilogue=(relu,))
        s = create_schedule(out)
        wino.schedule_winograd(s, config, cpu_target, lanes, blocked_out=out)
        kernel = build_kernel(s, [x, w, b, out], "winograd_nchwc", target=cpu_target)
        assert f"f32x{lanes}" in kernel.source and "#pragma omp parallel for" in kernel.source
        rng = np.random.default_rng(2)
        xs, ws, bs = (rng.standard_normal(sh).astype(np.float32) for sh in ((n, c, h, wd), (oc, c, 3, 3), (oc,)))
        y = np.empty(out.shape, np.float32)
        kernel(np.ascontiguousarray(xs.reshape(n, c // bi, bi, h, wd).transpose(0, 1, 3, 4, 2)), ws, bs, y)
        ref = np.maximum(_direct64(xs, ws, 1) + bs[None, :, None, None], 0)
        assert _rel_error(y.transpose(0, 1, 4, 2, 3).reshape(n, oc, h, wd), ref) <= TOLERANCE, algorithm


# --- the ConvNCHWc template (layout planning's tasks) ---------------------------------------------

def test_blocked_conv_tasks_get_winograd_when_their_input_is_blocked(cpu_target):
    from task_helpers import blocked_conv_task
    template = get_template("ConvNCHWc", "llvm")
    lanes = cpu_target.capabilities.lanes(4)

    def knobs(task):
        return {k.name for k in template.space(task, cpu_target).knobs}
    c = max(32, 2 * lanes)  # the fallback wants >= 32 channels
    wide = blocked_conv_task((1, c, 14, 14), (c, c, 3, 3), lanes, lanes, pad=1, bias=True)
    assert "algorithm" in knobs(wide)
    assert template.fallback(wide, cpu_target)["algorithm"] == "winograd_2"  # 14 wide: F(2)
    assert "algorithm" not in knobs(blocked_conv_task((1, 3, 13, 13), (16, 3, 3, 3), 0, 8, pad=1))  # plain input
    assert "algorithm" not in knobs(blocked_conv_task((1, 16, 9, 9), (16, 16, 3, 3), 8, 8, stride=2, pad=1))


@pytest.mark.parametrize("dilation", [1, 2, 3])
@pytest.mark.parametrize("isa", sorted(ISAS))
def test_random_winograd_configs_of_blocked_conv_tasks_are_correct(isa, dilation, measure):
    """Dilated tasks too: 9 and 11 outputs split into phases of different lengths."""
    from task_helpers import blocked_conv_task
    target, _, lanes = ISAS[isa]
    template = get_template("ConvNCHWc", "llvm")
    task = blocked_conv_task((1, 16, 9, 11), (32, 16, 3, 3), 8, 16, pad=dilation, bias=True, residual=True,
                             dilation=dilation)
    space = template.space(task, target)
    position = space.position("algorithm")
    configs = [space.get(i) for i in space.sample(200, np.random.default_rng(5))
               if space.get(i).digits[position] != 0][:12]
    configs.append(template.fallback(task, target))
    if not runs_here(target):
        for config in configs:
            renderer_for("llvm").render(lower(*template.apply(task, config, target), "k"))
        pytest.skip(f"the host cannot run {isa} code (generated and rendered above)")
    results = measure([MeasureInput(task, target, c) for c in configs])
    bad = [(c.to_json()["knobs"], r.error_kind.name, r.error_msg[:300]) for c, r in zip(configs, results) if not r.ok]
    assert not bad, bad


def test_tuning_times_the_kernel_a_built_model_runs(tmp_path, cpu_target):
    """The builder precomputes the weight-only frontier as the build does (measure/fold.py):
    the candidate takes the transformed weights as an argument and its manifest names the
    kernel that computes them, which the worker runs before checking and timing."""
    import json
    from pathlib import Path
    task = conv_task(**TASK)
    (config,) = _winograd_configs(task, cpu_target, 1, 11)
    (build,) = LocalBuilder(n_parallel=1, cache_dir=tmp_path).build([MeasureInput(task, cpu_target, config)])
    manifest = json.loads(Path(build.artifact).read_text())
    (folded,) = manifest["folded"]
    alpha = wino.tile_size(config) + 2
    assert folded["sources"] == [1] and folded["params"][-1]["shape"][:2] == [alpha, alpha]
    assert len(manifest["params"]) == len(task.input_values) + 2  # + the output, + the transformed weights


def test_a_fleet_built_candidate_carries_its_precomputed_stages(tmp_path, monkeypatch):
    """A build shipped between Ray nodes (`BuiltKernel`) brings its precomputed stages' kernels,
    and the installed copy measures correctly."""
    pytest.importorskip("ray")
    from autosched.measure.ray import BuiltKernel
    target = ISAS["avx2"][0]
    if not runs_here(target):
        pytest.skip("host cannot run AVX2 code")
    task = conv_task(**TASK)
    (config,) = _winograd_configs(task, target, 1, 12)
    inp = MeasureInput(task, target, config)
    (build,) = LocalBuilder(n_parallel=1, cache_dir=tmp_path / "here").build([inp])
    shipped = BuiltKernel.from_manifest(build.artifact)
    assert len(shipped.folded) == 1
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "there"))
    installed = shipped.install()
    assert str(tmp_path / "there") in installed
    with LocalRunner(RunnerOptions(repeat=1, min_repeat_ms=0.2, timeout=20.0, stop_factor=0)) as runner:
        (result,) = runner.run([inp], [type(build)(installed, build.error_kind, "", build.build_s)])
    assert result.ok, result.error_msg
