"""CPU templates: every config a tuner may draw builds a kernel that matches the task's reference.

Random configs go through the real pipeline (LocalBuilder compiles in parallel, LocalRunner
checks each output against `task.reference` in its worker), so a wrong schedule shows up as
WRONG_ANSWER and a schedule the lowering refuses as INSTANTIATION_ERROR.
"""
import re
import zlib

import numpy as np
import pytest
from isa import AVX2, AVX512, HOST, ISAS, RUN_TARGETS, runs_here
from task_helpers import (
    assert_matches_reference,
    attention_scores_task,
    blocked_conv_task,
    conv_task,
    gemm_task,
    matmul_task,
    softmax_task,
    viewed_attention_task,
)

from autosched.backend import renderer_for
from autosched.compile.kernel import source
from autosched.lower import lower
from autosched.measure import ErrorKind, MeasureInput, measure_with
from autosched.measure.local import LocalBuilder, LocalRunner, RunnerOptions
from autosched.space import ConfigError
from autosched.target import CpuInfo, Target
from autosched.templates import TemplateError, get_template, templates
from search_spaces.llvm.common import InvalidConfigError, max_accumulators
from search_spaces.llvm.conv2d_winograd import direct_values

TARGET = HOST

# name -> (task factory, template variant its space must come from)
TASKS = {
    "matmul_relu": (lambda: matmul_task((23, 37), (37, 45), relu=True), "matmul_packed_llvm"),
    "batched_matmul": (lambda: matmul_task((2, 9, 20), (2, 20, 33)), "matmul_packed_llvm"),
    "attention_scores": (lambda: attention_scores_task((1, 2), 9, 16, 20), "matmul_packed_llvm"),
    "attention_views": (lambda: viewed_attention_task(9, 3, 8), "matmul_packed_llvm"),
    "context_views": (lambda: viewed_attention_task(10, 2, 16, key=False), "matmul_packed_llvm"),
    "dense_bias": (lambda: gemm_task((7, 30), (19, 30), (19,), trans_b=1), "matmul_packed_llvm"),
    "gemm_trans_a_alpha_beta": (lambda: gemm_task((26, 11), (26, 40), (11, 40), trans_a=1, alpha=0.5, beta=2.0),
                                "matmul_packed_llvm"),
    "conv3x3_bias_relu": (lambda: conv_task((1, 8, 9, 11), (32, 8, 3, 3), pad=1, bias=True, epilogue="relu"),
                          "conv2d_nchwc_llvm"),
    "conv1x1_residual": (lambda: conv_task((1, 16, 7, 7), (32, 16, 1, 1), epilogue="residual"), "conv2d_nchwc_llvm"),
    "conv_stride2_few_channels": (lambda: conv_task((2, 3, 13, 13), (8, 3, 3, 3), stride=2, pad=1),
                                  "conv2d_nchwc_llvm"),
    # 29 channels: no whole vector divides them, blocks of whole vectors compute 32 (zero filters)
    "conv1x1_padded_blocks": (lambda: conv_task((1, 29, 5, 6), (29, 29, 1, 1), bias=True, epilogue="relu"),
                              "conv2d_nchwc_llvm"),
    "depthwise_bias": (lambda: conv_task((1, 16, 10, 12), (16, 1, 3, 3), pad=1, group=16, bias=True),
                       "conv2d_grouped_llvm"),
    "grouped_stride2": (lambda: conv_task((1, 8, 9, 9), (12, 4, 3, 3), stride=2, pad=1, group=2, epilogue="relu"),
                        "conv2d_grouped_llvm"),
    # what layout planning hands the tuner: blocked in and out, or plain in (a model's first layer)
    "blocked_conv3x3_residual": (lambda: blocked_conv_task((1, 16, 9, 11), (32, 16, 3, 3), 8, 16, pad=1, bias=True,
                                                           residual=True), "conv2d_nchwc_layout_llvm"),
    "blocked_conv_plain_input_stride2": (lambda: blocked_conv_task((1, 3, 13, 13), (16, 3, 3, 3), 0, 8, stride=2,
                                                                   pad=1), "conv2d_nchwc_layout_llvm"),
    "blocked_depthwise_stride2": (lambda: blocked_conv_task((1, 16, 11, 10), (16, 1, 3, 3), 8, 8, stride=2, pad=1,
                                                            depthwise=True, bias=True),
                                  "conv2d_nchwc_layout_llvm_depthwise"),
    # a region of a cut convolution, reading its window of the map in place
    "blocked_window_dilated_residual": (lambda: blocked_conv_task((1, 16, 13, 12), (16, 16, 2, 2), 8, 8, dilation=4,
                                                                  crop=(1, 2, 3, 1), bias=True, residual=True),
                                        "conv2d_nchwc_layout_llvm"),
    "blocked_grouped_residual": (lambda: blocked_conv_task((1, 32, 7, 9), (32, 8, 3, 3), 8, 8, pad=1, groups=4,
                                                           bias=True, residual=True), "conv2d_nchwc_layout_llvm"),
    "blocked_grouped_two_blocks_stride2": (lambda: blocked_conv_task((1, 64, 9, 8), (32, 16, 3, 3), 8, 8, stride=2,
                                                                     pad=1, groups=4), "conv2d_nchwc_layout_llvm"),
    # several groups per block: a shuffle repeats each group's input channel across its lanes
    "blocked_grouped_lanes_stride2": (lambda: blocked_conv_task((1, 32, 9, 8), (32, 4, 3, 3), 16, 16, stride=2,
                                                                pad=1, groups=8, bias=True), "conv2d_nchwc_layout_llvm"),
    "blocked_grouped_lanes_residual": (lambda: blocked_conv_task((1, 16, 7, 9), (16, 2, 3, 3), 8, 8, pad=1, groups=8,
                                                                 residual=True), "conv2d_nchwc_layout_llvm"),
    "blocked_grouped_lanes_1x1": (lambda: blocked_conv_task((1, 32, 5, 6), (32, 8, 1, 1), 16, 16, groups=4, bias=True),
                                  "conv2d_nchwc_layout_llvm"),
    # 32 input blocks of 1 MiB in all: tiles of one row prefetch the next tile's pixels
    "blocked_conv1x1_prefetched": (lambda: blocked_conv_task((1, 256, 32, 32), (16, 256, 1, 1), 8, 8, bias=True),
                                   "conv2d_nchwc_layout_llvm"),
    # an image as one row (flatten_pointwise), 700 KiB of input: tiles of any width, the last
    # shifted back, prefetched; the residual Add and Relu in the epilogue
    "blocked_conv1x1_one_row": (lambda: blocked_conv_task((1, 128, 1, 1369), (32, 128, 1, 1), 8, 8, bias=True,
                                                          residual=True), "conv2d_nchwc_layout_llvm"),
    # 13 columns: tiles of 2 to 8 columns leave a remainder, the last tile shifted back; 5
    # blocks of 8 channels, narrow on AVX-512, tile several blocks
    "blocked_conv1x1_13_wide": (lambda: blocked_conv_task((1, 32, 13, 13), (40, 32, 1, 1), 8, 8, bias=True),
                                "conv2d_nchwc_layout_llvm"),
    "blocked_conv3x3_13_wide": (lambda: blocked_conv_task((1, 16, 13, 13), (40, 16, 3, 3), 16, 8, pad=1,
                                                          residual=True), "conv2d_nchwc_layout_llvm"),
    "blocked_depthwise_residual": (lambda: blocked_conv_task((1, 32, 7, 9), (32, 1, 3, 3), 16, 16, pad=1,
                                                             depthwise=True, residual=True),
                                   "conv2d_nchwc_layout_llvm_depthwise"),
}
#: the knobs 3×3 stride-1 convolutions gain (tests/test_winograd.py), at the direct algorithm
DIRECT = direct_values()
# one task per template variant draws 20 configs in the fast suite; every task does under -m slow
PRIMARY = ("matmul_relu", "conv3x3_bias_relu", "depthwise_bias", "blocked_conv3x3_residual",
           "blocked_depthwise_stride2", "blocked_grouped_two_blocks_stride2", "blocked_grouped_lanes_stride2")


@pytest.fixture(scope="module")
def measure(tmp_path_factory):
    runner = LocalRunner(RunnerOptions(repeat=1, min_repeat_ms=0.2, timeout=20.0, stop_factor=0))
    yield measure_with(LocalBuilder(n_parallel=2, cache_dir=tmp_path_factory.mktemp("kernels")), runner)
    runner.close()


def _check_random_configs(name, n, measure, target=TARGET):
    make, variant = TASKS[name]
    task = make()
    template = get_template(task.op, "llvm")
    space = template.space(task, target)
    assert space.template == variant and space.size > n
    indices = [i for i in space.sample(4 * n, np.random.default_rng(zlib.crc32(name.encode())))
               if _accepted(template, task, space.get(i), target)][:n]
    assert len(indices) == n
    results = measure([MeasureInput(task, target, space.get(i)) for i in indices])
    bad = [(space.get(i).to_json()["knobs"], r.error_kind.name, r.error_msg[:300])
           for i, r in zip(indices, results) if not r.ok]
    assert not bad, bad


def _accepted(template, task, config, target):
    try:
        template.apply(task, config, target)
    except InvalidConfigError:
        return False
    return True


@pytest.mark.parametrize("name", PRIMARY)
def test_random_configs_are_correct(name, measure):
    _check_random_configs(name, 8, measure)


@pytest.mark.slow  # 40 s in all; the eight of each above stay in the default suite
@pytest.mark.parametrize("name", PRIMARY)
def test_twenty_random_configs_are_correct(name, measure):
    _check_random_configs(name, 20, measure)


@pytest.mark.skipif(HOST.isa == AVX2.isa, reason="the host is AVX2: the test above drew for it")
@pytest.mark.parametrize("name", PRIMARY)
def test_random_avx2_configs_are_correct(name, measure):
    """The AVX2 spaces (8-float vectors, 16 registers) are other spaces: draw from them too."""
    _check_random_configs(name, 8, measure, AVX2)


@pytest.mark.parametrize("name", sorted(set(TASKS) - set(PRIMARY)))
def test_random_configs_of_other_forms_are_correct(name, measure):
    _check_random_configs(name, 4, measure)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(TASKS) - set(PRIMARY)))
def test_twenty_random_configs_of_other_forms_are_correct(name, measure):
    _check_random_configs(name, 20, measure)


def test_templates_are_registered_for_the_anchor_ops():
    registered = templates()
    for op in ("MatMul", "Gemm", "Conv"):
        assert (op, "llvm") in registered
    with pytest.raises(TemplateError, match="no template for op 'Softmax'"):
        get_template(softmax_task((4, 8)).op, "llvm")


def test_space_is_a_pure_function_of_task_and_target():
    task = TASKS["conv3x3_bias_relu"][0]()
    template = get_template("Conv", "llvm")
    assert template.space(task, TARGET).fingerprint == template.space(conv_task((1, 8, 9, 11), (32, 8, 3, 3), pad=1,
                                                                                bias=True, epilogue="relu"),
                                                                      TARGET).fingerprint
    other = conv_task((1, 8, 9, 11), (16, 8, 3, 3), pad=1)
    assert template.space(other, TARGET) != template.space(task, TARGET)


def test_a_config_from_another_space_is_refused():
    template = get_template("MatMul", "llvm")
    small, large = matmul_task((8, 16), (16, 32)), matmul_task((64, 16), (16, 32))
    foreign = template.space(large, TARGET).get(0)
    with pytest.raises(ConfigError, match="not from matmul_packed_llvm's space"):
        template.apply(small, foreign, TARGET)


def test_narrow_vectors_follow_the_target():
    """An AVX2-only target (8 float lanes) gets 8-wide blocks and vectors."""
    from autosched.target import CpuInfo
    avx2 = Target.parse("llvm", host=CpuInfo("test", frozenset({"avx2", "fma"})))
    assert avx2.isa == AVX2.isa == "x86_64-avx2" and avx2.capabilities.vector_registers == 16
    task = TASKS["conv3x3_bias_relu"][0]()
    assert get_template("Conv", "llvm").space(task, avx2).knob("oc_bn").values == (8, 16, 32)
    assert get_template("MatMul", "llvm").space(matmul_task((8, 64), (64, 64)), avx2).knob("nr").values == (8, 16, 24, 32)


@pytest.mark.parametrize("isa", sorted(ISAS))
@pytest.mark.parametrize("name, values", [
    ("matmul_relu", {"mr": 6, "nr": 2, "mb": 1, "tile_k": [1, 37, 1], "tile_order": ["j", "i"], "parallel_depth": 2,
                     "pack_a": True}),
    ("matmul_relu", {"mr": 6, "nr": 2, "mb": 1, "tile_k": [1, 37, 1], "tile_order": ["j", "i"], "parallel_depth": 2,
                     "pack_a": False}),
    ("conv3x3_bias_relu", {"oc_bn": 2, "layout": "nchwc", "ic_bn": 8, "reduce_order": ["ico", "kh", "kw", "ici"],
                           "unroll_kw": False, "tile_ow": [1, 11], "tile_oh": 1, "pad": "root",
                           "outer_order": ["oc", "oh", "ow"], "parallel_depth": 3, **DIRECT}),
])
def test_register_tiles_become_simd_and_threads(name, values, isa):
    """The fast configs the benchmark finds are in each ISA's space (two vectors of columns or
    channels: `nr` and `oc_bn` are given in vectors here): full-width accumulators, OpenMP tiles."""
    target, _, lanes = ISAS[isa]
    task = TASKS[name][0]()
    template = get_template(task.op, "llvm")
    values = {**values, **{k: values[k] * lanes for k in ("nr", "oc_bn") if k in values}}
    sched, args = template.apply(task, template.space(task, target).from_values(values), target)
    code = renderer_for("llvm").render(lower(sched, args, "k"))
    assert f"f32x{lanes}" in code and "#pragma omp parallel for" in code
    assert [a.name for a in args[:-1]] == [v.name for v in task.input_values]


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_products_of_activations_pack_their_panels_in_the_parallel_loop(isa):
    """Attention's batched products of two activations offer `pack_at`: their fallback packs each
    batch element's panels inside the parallel loop over the batch, into a buffer of that
    iteration (no root copy loops, no workspace), and both places compute the reference. A
    product whose B is a weight (packed once by the build) has no such knob, and one whose panels
    of one batch element outgrow PER_TILE_PANEL_BYTES packs at root."""
    from search_spaces.llvm.matmul import PER_TILE_PANEL_BYTES
    target, _, lanes = ISAS[isa]
    template = get_template("MatMul", "llvm")
    assert "pack_at" not in {k.name for k in template.space(TASKS["batched_matmul"][0](), target).knobs}
    large = viewed_attention_task(1024, 2, 64, key=False)  # P·V: 1024 x 64 panels of B, 256 KiB
    assert 1024 * 64 * 4 > PER_TILE_PANEL_BYTES and template.fallback(large, target)["pack_at"] == "root"
    for name in ("attention_views", "context_views"):
        task = TASKS[name][0]()
        fallback = template.fallback(task, target)
        assert fallback["pack_at"] == "tile" and fallback["parallel_depth"] == 2
        sched, args = template.apply(task, fallback, target)
        code = renderer_for("llvm").render(lower(sched, args, "k"))
        loop = code.index("#pragma omp parallel for")
        assert code.count("#pragma omp parallel for") == 1 and "autosched_workspace()" not in code
        assert re.search(r"float \w+_packed\[\d+\]", code[loop:]), code
        for pack_at in ("root", "tile"):
            values = {k.name: k.values[d] for k, d in zip(fallback.space.knobs, fallback.digits)}
            config = fallback.space.from_values({**values, "pack_at": pack_at})
            if runs_here(target):
                assert_matches_reference(task, *template.apply(task, config, target), target)


@pytest.mark.parametrize("isa, limit", [("avx2", 32), ("avx512", 64)])
def test_oversized_register_tiles_are_refused_before_compiling(measure, isa, limit):
    """4 rows × 28 columns × 4 vectors of channels would be 448 accumulators; the limit counts
    the target's registers (twice 16 ymm, twice 32 zmm)."""
    target, _, lanes = ISAS[isa]
    assert max_accumulators(target) == limit
    task = conv_task((1, 64, 8, 28), (64, 64, 3, 3), pad=1)
    template = get_template("Conv", "llvm")
    space = template.space(task, target)
    values = {"oc_bn": 4 * lanes, "layout": "nchw", "ic_bn": 4 * lanes, "reduce_order": ["ico", "kh", "kw", "ici"],
              "unroll_kw": True, "tile_ow": [1, 28], "tile_oh": 4, "pad": "inline", "outer_order": ["oc", "oh", "ow"],
              "parallel_depth": 2, **DIRECT}
    config = space.from_values(values)
    with pytest.raises(InvalidConfigError, match=f"448 vector accumulators exceeds {limit} .*{target.isa}"):
        template.apply(task, config, target)
    (result,) = measure([MeasureInput(task, target, config)])
    assert result.error_kind is ErrorKind.INSTANTIATION_ERROR and result.build_s < 5


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_fallback_configs_are_in_the_space_and_correct(measure, target):
    """Untuned builds use the conv and matmul templates' fallback configs: each must be a point
    of the task's space, fit the target's registers (accumulators, the weight or B vectors and
    the broadcast input) and compute the right answer for every shape its variant sees;
    depthwise and grouped convolutions in NCHW keep the op library's schedule (None)."""
    inputs = []
    lanes = target.capabilities.lanes(4)
    for name, (make, variant) in TASKS.items():
        task = make()
        config = get_template(task.op, "llvm").fallback(task, target)
        if variant.startswith("conv2d_grouped"):
            assert config is None, name
            continue
        assert config.space == get_template(task.op, "llvm").space(task, target)
        if variant == "matmul_packed_llvm":
            vectors, rows = -(-config["nr"] // lanes), config["mr"]
        elif variant == "conv2d_nchwc_llvm":
            vectors, rows = -(-config["oc_bn"] // lanes), config["tile_ow"][1]
        else:  # the layout's blocks are at most one vector each
            vectors = config["tile_oc"] if any(k.name == "tile_oc" for k in config.space.knobs) else 1
            rows = config["tile_ow"][1]
        assert vectors * rows + vectors + 1 <= target.capabilities.vector_registers, name
        inputs.append(MeasureInput(task, target, config))
    assert len(inputs) == sum(not variant.startswith("conv2d_grouped") for _, variant in TASKS.values())
    results = measure(inputs)
    assert [r.error_kind for r in results] == [ErrorKind.NO_ERROR] * len(inputs), [r.error_msg for r in results]


@pytest.mark.parametrize("make", [TASKS["dense_bias"][0], lambda: matmul_task((96, 96), (96, 80))],
                         ids=["dense_bias", "matmul_in_place"])
def test_matmul_fallback_is_the_op_library_schedule(make):
    """An untuned matmul runs the op library's default schedule, and the tuner's first trial is
    that schedule in the template's space: the fallback must take the default's register tile,
    packing and loop order, or a tune could end slower than the untuned build (it did on the
    MLP before the fallback existed). Same tile, and both give numpy's answer; the two lower
    differently only in unit loops the template's extra splits leave."""
    from autosched.compile.model import library_kernel
    from autosched.ops.matmul import MATMUL_TAG
    task = make()
    template = get_template(task.op, "llvm")
    for target in RUN_TARGETS:
        config = template.fallback(task, target)
        schedule, args = library_kernel(task, target)
        packing = next(s.op for s in schedule.stages if s.op.tag == MATMUL_TAG).attrs["packing"]
        assert (config["mr"], config["nr"], config["pack_a"]) == (packing.mr, packing.nr, packing.pack_a), target
        assert config["mb"] == 1 and config["tile_k"][0] == config["tile_k"][2] == 1
        assert config["tile_order"] == ("j", "i")
        assert_matches_reference(task, *template.apply(task, config, target), target)
        assert_matches_reference(task, schedule, args, target)


def test_a_long_attentions_scores_run_row_blocks_outermost():
    """Whisper's 1500-frame Q.K^T (64-deep, 36 MB of scores): row blocks outside column panels,
    so each thread writes whole rows (7.9 -> 6.1 ms in the model), and numpy's answer on a
    smaller product of the same kind; BERT's 128 tokens, its context product and a weight
    product keep column panels outermost."""
    template = get_template("MatMul", "llvm")
    for target in RUN_TARGETS:
        assert template.fallback(viewed_attention_task(1500, 4, 64), target)["tile_order"] == ("i", "j")
        for kept in (viewed_attention_task(128, 12, 64), viewed_attention_task(1500, 4, 64, key=False),
                     matmul_task((1500, 256), (256, 1024))):
            assert template.fallback(kept, target)["tile_order"] == ("j", "i")
    task = viewed_attention_task(40, 2, 8)
    fallback = template.fallback(task, HOST)
    values = {k.name: fallback[k.name] for k in fallback.space.knobs}
    config = fallback.space.from_values({**values, "tile_order": ("i", "j")})
    assert_matches_reference(task, *template.apply(task, config, HOST), HOST)


def test_intel_avx512_fallback_blocks_the_reduction_of_a_wide_deep_matmul():
    """BERT's FFN down on Intel's AVX-512 cores: the 8 × 48 tile, k in 12 blocks of 256 unrolled by
    4, and numpy's answer; on AMD's the default tile over the whole reduction."""
    task = matmul_task((128, 3072), (3072, 768))
    template = get_template("MatMul", "llvm")
    config = template.fallback(task, AVX512)
    assert (config["mr"], config["nr"], tuple(config["tile_k"]), config["pack_a"]) == (8, 48, (12, 64, 4), False)
    amd = Target.parse("llvm", host=CpuInfo("AMD EPYC 9R45", AVX512.capabilities.flags, vendor="amd"))
    other = template.fallback(task, amd)
    assert (other["mr"], other["nr"], tuple(other["tile_k"])) == (8, 32, (1, 3072, 1))
    if "avx512f" in HOST.capabilities.flags:
        assert_matches_reference(task, *template.apply(task, config, AVX512), AVX512)


def test_intel_avx512_fallback_shifts_the_last_row_tile_of_the_wide_tile():
    """20 rows, which 8 does not divide, of a wide deep product on Intel's AVX-512 cores: the
    8 x 48 tile reads A in place, its last row tile moved back over rows the one before computed
    (it fell back to 8 x 32 over the whole reduction: Mixer-B's 196 x 512 . 512 x 2048 ran 1.15x
    slower so); no padded copy of A, and numpy's answer."""
    task = matmul_task((20, 384), (384, 256))
    template = get_template("MatMul", "llvm")
    config = template.fallback(task, AVX512)
    assert (config["mr"], config["nr"], tuple(config["tile_k"]), config["pack_a"]) == (8, 48, (3, 32, 4), False)
    assert "a_rows" not in source(*template.apply(task, config, AVX512), "k", AVX512)
    if "avx512f" in HOST.capabilities.flags:
        assert_matches_reference(task, *template.apply(task, config, AVX512), AVX512)


def test_a_product_of_rows_no_tile_divides_reads_a_in_place():
    """197 tokens (ViT's): attention's softmax(QKᵀ)·V has one column panel of 64, where packing A
    would copy it for nothing, and reads it in place in 6-row tiles; with AVX-512's 32 registers
    a wider product reads it in place in the usual 8 × 32 tile, where it was packed in 6 × 32
    (ViT-S's MLP and projections ran 0.80-0.96 of that time, summed kernels 0.92, EPYC Zen 4, 2
    threads; AVX2's 6 × 16 in place ran as fast as packed on an EPYC Zen 3, 197 × 384 · 384 ×
    1536 in 1.53-1.70 against 1.53-1.80 ms). Either way the last row tile ends at
    row 197, moved back over rows the one before computed: no padded copy of A, and numpy's
    answer."""
    task = matmul_task((2, 197, 197), (2, 197, 64))
    template = get_template("MatMul", "llvm")
    config = template.fallback(task, AVX512)
    assert (config["mr"], config["nr"], config["pack_a"]) == (6, 64, False)
    wide_task = matmul_task((2, 197, 197), (2, 197, 256))
    wide = template.fallback(wide_task, AVX512)
    assert (wide["mr"], wide["nr"], wide["pack_a"]) == (8, 32, False)
    assert "a_rows" not in source(*template.apply(wide_task, wide, AVX512), "k", AVX512)  # A not padded
    narrow = template.fallback(wide_task, AVX2)
    assert (narrow["mr"], narrow["nr"], narrow["pack_a"]) == (6, 16, False)
    if "avx512f" in HOST.capabilities.flags:
        assert_matches_reference(wide_task, *template.apply(wide_task, wide, AVX512), AVX512)
    if "avx512f" in HOST.capabilities.flags:
        assert_matches_reference(task, *template.apply(task, config, AVX512), AVX512)
    narrow = matmul_task((2, 197, 197), (2, 197, 32))  # AVX2: 16 registers leave 2 rows of 4 vectors
    config = template.fallback(narrow, AVX2)
    assert (config["mr"], config["nr"], config["pack_a"]) == (2, 32, False)
    assert_matches_reference(narrow, *template.apply(narrow, config, AVX2), AVX2)


@pytest.mark.parametrize("n, isa, want", [(36, "avx512", (8, 16)), (40, "avx512", (8, 16)), (48, "avx512", (8, 48)),
                                         (20, "avx2", (8, 8)), (24, "avx2", (4, 24))])
def test_a_narrow_product_whose_last_vector_is_partial_takes_panels_of_one_vector(n, isa, want):
    """Attention's probabilities times V of a head width that is not whole vectors (a
    conformer's 36, AVX-512): one panel of three vectors, the third partial, ran 5-6x slower
    than panels of one vector (0.12 against 0.023 ms in the model, EPYC Zen 4, 2 threads); whole
    vectors keep the one panel (AVX2's 4 x 24 beats 8 x 8)."""
    target = {"avx512": AVX512, "avx2": AVX2}[isa]
    task = matmul_task((4, 100, 100), (4, 100, n))
    template = get_template("MatMul", "llvm")
    config = template.fallback(task, target)
    assert (config["mr"], config["nr"], config["pack_a"]) == (*want, False)
    if isa == "avx2" or "avx512f" in HOST.capabilities.flags:
        assert_matches_reference(task, *template.apply(task, config, target), target)


def test_untuned_build_of_a_conv_uses_the_fallback_config():
    from autosched.compile.model import default_kernel
    task = TASKS["conv3x3_bias_relu"][0]()
    template = get_template(task.op, "llvm")
    render = renderer_for("llvm").render
    untuned = default_kernel(task, TARGET)
    assert render(lower(*untuned, "k")) == render(lower(*template.apply(task, template.fallback(task, TARGET), TARGET),
                                                        "k"))
    assert_matches_reference(task, *untuned, TARGET)


def test_matmul_candidates_are_timed_with_their_weights_packed_ahead(tmp_path):
    """A dense layer's weight (and Gemm's bias) are marked on the task (`weight_inputs`), and
    the builder precomputes the weight's B panels as a model build does: the candidate reads
    them as an argument and the worker packs them before timing. A matmul of two activations
    (attention's scores) is marked with nothing and still packs B at every call."""
    import json
    from pathlib import Path
    dense, scores = TASKS["dense_bias"][0](), TASKS["attention_views"][0]()
    assert dict(dense.attrs)["weight_inputs"] == (1, 2) and "weight_inputs" not in dict(scores.attrs)
    template = get_template("Gemm", "llvm")
    config = template.space(dense, TARGET).from_values({**template.fallback(dense, TARGET).to_json()["knobs"],
                                                        "pack_a": True})
    builds = LocalBuilder(n_parallel=1, cache_dir=tmp_path).build(
        [MeasureInput(dense, TARGET, config),
         MeasureInput(scores, TARGET, get_template("MatMul", "llvm").fallback(scores, TARGET))])
    dense_manifest, scores_manifest = (json.loads(Path(b.artifact).read_text()) for b in builds)
    (folded,) = dense_manifest["folded"]
    assert folded["sources"] == [1] and folded["params"][-1]["shape"][-1] == config["nr"]  # B in nr-wide panels
    assert "folded" not in scores_manifest
    results = measure_with(LocalBuilder(n_parallel=1, cache_dir=tmp_path), LocalRunner(RunnerOptions(repeat=1)))(
        [MeasureInput(dense, TARGET, config)])
    assert results[0].error_kind is ErrorKind.NO_ERROR, results[0].error_msg


@pytest.mark.parametrize("tile_ow, blocks_innermost", [((8, 7), True), ((14, 4), False)])
def test_register_tiles_that_would_spill_put_the_output_blocks_innermost(tile_ow, blocks_innermost):
    """A 2 x 7 tile with its output blocks outermost needs 14 accumulators and 7 live broadcasts
    on AVX2's 16 registers, and spilled; with the blocks innermost each broadcast dies at once.
    A 2 x 4 tile fits either way and keeps the blocks outermost (faster for ResNet-18's)."""
    task = blocked_conv_task((1, 32, 6, 56), (32, 32, 1, 1), 8, 8)
    template = get_template(task.op, "llvm")
    space = template.space(task, AVX2)
    fallback = template.fallback(task, AVX2)
    config = space.from_values({**{k.name: fallback[k.name] for k in space.knobs}, "tile_oc": 2, "tile_ow": tile_ow,
                                "outer_order": ("oh", "ow", "oc")})
    code = source(*template.apply(task, config, AVX2), "k", AVX2)
    reduction = code[code.index("for (int32_t icb"):]
    pixels, blocks = (reduction.index(f"for (int32_t {v} = 0") for v in ("z", "o"))
    assert (pixels < blocks) == blocks_innermost


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_rows_without_a_small_divisor_tile_with_a_shifted_last_tile(isa):
    """SqueezeNet's classifier: 1000 channels in 125 blocks of 8, 13 x 13 pixels. With exact
    divisors only, its tiles were 1 or 13 columns, and the fallback took 1 (11 GFLOP/s on a
    Xeon); now the last column tile moves back to end at the row's end (a `min` in its start),
    and on AVX-512 the 8-channel blocks, half a vector each, tile 5 at a time. AVX2's one block
    takes the whole row of 13 (`_sixteen_register_tile`: 0.83 of 1 x 5's time in SqueezeNet)."""
    target, _, lanes = ISAS[isa]
    task = blocked_conv_task((1, 512, 13, 13), (1000, 512, 1, 1), 16, 8, bias=True)
    template = get_template(task.op, "llvm")
    space = template.space(task, target)
    widths = {k.name: k for k in space.knobs}["tile_ow"].values
    assert (3, 5) in widths and (13, 1) in widths
    fallback = template.fallback(task, target)
    assert (fallback["tile_oc"], fallback["tile_ow"]) == ((5, (3, 5)) if lanes == 16 else (1, (1, 13)))
    shifted = space.from_values({**{k.name: fallback[k.name] for k in space.knobs}, "tile_ow": (3, 5)})
    code = source(*template.apply(task, shifted, target), "k", target)
    assert "min(" in code
    # widths with a divisor of 4 to 8 columns keep exact tiles, and the spaces of their records
    wide = blocked_conv_task((1, 64, 56, 56), (64, 64, 1, 1), 16, 16)
    assert all(o * i == 56 for o, i in {k.name: k for k in template.space(wide, target).knobs}["tile_ow"].values)


def test_a_tie_between_register_tiles_of_blocks_goes_to_the_larger():
    """A classifier of 63 blocks of 16 channels (AVX-512): 1 and 3 blocks are as far from two
    vectors; on SqueezeNet's 13x13 map 3 blocks by 7 columns was the tuner's best, 1 block by 7
    ran 1.5x slower. A row the tile divides (14) keeps it; 13 columns, which 2 x 7 does not
    divide, now take one block by the whole row (`_dividing_row_tile`: 0.78-0.79 ms against
    0.82-0.85 for 3 x 2 x 7, EPYC Zen 4, 2 threads, alone)."""
    template = get_template("ConvNCHWc", "llvm")
    wide = template.fallback(blocked_conv_task((1, 512, 14, 14), (1008, 512, 1, 1), 16, 16, bias=True), AVX512)
    assert (wide["tile_oc"], wide["tile_ow"]) == (3, (2, 7))
    odd = template.fallback(blocked_conv_task((1, 512, 13, 13), (1008, 512, 1, 1), 16, 16, bias=True), AVX512)
    assert (odd["tile_oc"], odd["tile_ow"]) == (1, (1, 13))


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_channels_no_vector_divides_compute_in_padded_whole_vectors(isa):
    """ShuffleNetV2's 58 channels ran in blocks of 29 lanes (57 GFLOP/s on AVX-512): the space
    now also has the whole vectors that pad the channels least (zero filters), the fallback
    takes them, and the padded channels never reach the output. Counts that would pad by more
    than a quarter keep their divisors only."""
    target, _, lanes = ISAS[isa]
    task = TASKS["conv1x1_padded_blocks"][0]()
    template = get_template(task.op, "llvm")
    space = template.space(task, target)
    blocks = {k.name: k for k in space.knobs}["oc_bn"].values
    assert set(blocks) == {1, 29} | ({8, 16, 32} if lanes == 8 else {16, 32})
    fallback = template.fallback(task, target)
    assert fallback["oc_bn"] % lanes == 0
    code = source(*template.apply(task, fallback, target), "k", target)
    assert f"f32x{lanes}" in code
    if runs_here(target):
        for block in (lanes, 32):
            values = {k.name: fallback[k.name] for k in space.knobs} | {"oc_bn": block}
            assert_matches_reference(task, *template.apply(task, space.from_values(values), target), target)
    few = conv_task((1, 8, 5, 6), (10, 8, 1, 1))
    assert {k.name: k for k in template.space(few, AVX512).knobs}["oc_bn"].values == (1, 2, 5, 10)


#: ConvNCHWc tasks on maps wide enough for register tiles beyond the registers
WIDE_CONVS = {
    "pointwise_28x28": lambda: blocked_conv_task((1, 64, 28, 28), (128, 64, 1, 1), 8, 8),
    "conv3x3_28x28": lambda: blocked_conv_task((1, 32, 28, 28), (64, 32, 3, 3), 8, 8, pad=1),
    "depthwise_56x56": lambda: blocked_conv_task((1, 32, 56, 56), (32, 1, 3, 3), 8, 8, pad=1, depthwise=True),
}


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
@pytest.mark.parametrize("name", sorted(WIDE_CONVS))
def test_the_templates_check_refuses_exactly_what_apply_refuses(name, target):
    """`valid` (what tuners propose through) and `apply` agree on every sampled config: the
    check refuses the register tiles `apply` would, and no other."""
    task = WIDE_CONVS[name]()
    template = get_template(task.op, "llvm")
    space = template.space(task, target)
    refused = 0
    for index in space.sample(min(space.size, 200), np.random.default_rng(0)):
        config = space.get(index)
        try:
            template.apply(task, config, target)
            built = True
        except InvalidConfigError:
            built = False
        assert template.valid(task, config, target) == built, config.index
        refused += not built
    assert refused > 0  # the spaces do hold tiles beyond the registers


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
@pytest.mark.parametrize("name", ["conv3x3_28x28", "pointwise_28x28"])
def test_a_configs_canonical_config_generates_the_same_kernel(name, target):
    """`canonical` (what tuners measure for a proposal) changes only knobs the config's algorithm
    ignores: the same code, one config per kernel, the fallback its own canonical config."""
    task = WIDE_CONVS[name]()
    template = get_template(task.op, "llvm")
    space = template.space(task, target)
    fallback = template.fallback(task, target)
    assert template.canonical(task, fallback, target) == fallback
    kernels: dict[int, str] = {}
    for index in space.sample(min(space.size, 16), np.random.default_rng(1)):
        config = space.get(index)
        if not template.valid(task, config, target):
            continue
        canonical = template.canonical(task, config, target)
        assert template.canonical(task, canonical, target) == canonical
        code = source(*template.apply(task, config, target), "k", target)
        assert code == source(*template.apply(task, canonical, target), "k", target), config.index
        assert kernels.setdefault(canonical.index, code) == code
    if "algorithm" in {k.name for k in space.knobs}:  # Winograd configs apart in direct knobs only: one
        values = {**{k.name: fallback[k.name] for k in space.knobs}, "algorithm": "winograd_4", "wino_tile_t": 4}
        other = {**values, "tile_ow": space.knob("tile_ow").values[0], "tile_oc": space.knob("tile_oc").values[-1]}
        a, b = space.from_values(values), space.from_values(other)
        assert a != b and template.canonical(task, a, target) == template.canonical(task, b, target)
