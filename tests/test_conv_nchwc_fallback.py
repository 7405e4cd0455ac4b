"""The ConvNCHWc template's untuned tiles on AVX-512 cores, against the generic ones
(search_spaces/llvm/conv2d_nchwc.py `_window_tile`, conv2d_winograd.py `blocked_fallback_values`
on Intel's): which tasks get them, which cores keep the generic tile, and that they compute
the convolution (checked by the runner against the numpy reference where the host
runs AVX-512; rendered for every target anywhere)."""
from __future__ import annotations

import re
import subprocess

import pytest
from isa import runs_here
from task_helpers import blocked_conv_task

from autosched.backend import renderer_for
from autosched.compile.kernel import build_kernel
from autosched.lower import lower
from autosched.measure import MeasureInput, measure_with
from autosched.measure.local import LocalBuilder, LocalRunner, RunnerOptions
from autosched.target import CpuInfo, Target
from autosched.templates import get_template
from search_spaces.llvm.conv2d_nchwc import _spills

INTEL = Target.parse("llvm -mcpu=skylake-avx512")
INTEL_AVX2 = Target.parse("llvm -mcpu=haswell")
AMD = Target.parse("llvm -mcpu=znver3 -mattr=+avx512f")  # AVX-512 named on an AMD core (Zen 4's ISA class)
#: a Zen 5 host (cpuinfo family 26), which gcc 12 cannot name: its values and rendered code only
ZEN5_HOST = CpuInfo("AMD EPYC 9R45", frozenset({"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"}),
                    vendor="amd", family=26)
ZEN5 = Target.parse("llvm", host=ZEN5_HOST)
#: a Zen 4 host (cpuinfo family 25 with AVX-512), which gcc 12 cannot name either
ZEN4 = Target.parse("llvm", host=CpuInfo("AMD EPYC 9R14", ZEN5_HOST.flags, vendor="amd", family=25))
TEMPLATE = get_template("ConvNCHWc", "llvm")
#: ResNet-18's stride-2 3x3 layers and a 3x3 layer of its 56x56 stage, channels in blocks of 16
STRIDE2_56 = blocked_conv_task((1, 64, 56, 56), (128, 64, 3, 3), 16, 16, stride=2, pad=1, bias=True)
STRIDE2_28 = blocked_conv_task((1, 128, 28, 28), (256, 128, 3, 3), 16, 16, stride=2, pad=1, bias=True)
STRIDE2_14 = blocked_conv_task((1, 256, 14, 14), (512, 256, 3, 3), 16, 16, stride=2, pad=1, bias=True)
WIDE_3X3 = blocked_conv_task((1, 64, 56, 56), (64, 64, 3, 3), 16, 16, pad=1, bias=True, residual=True)


def _assembly(task, config, target, tmp_path) -> str:
    """`objdump -d` of the config's kernel built for `target` (on any x86-64 host)."""
    kern = build_kernel(*TEMPLATE.apply(task, config, target), "k", target=target, cache_dir=tmp_path)
    return subprocess.run(["objdump", "-d", str(kern.path)], capture_output=True, text=True, check=True).stdout


def _tile(task, target) -> tuple:
    c = TEMPLATE.fallback(task, target)
    return c["tile_oc"], c["tile_oh"], c["tile_ow"][1], c["unroll_kw"]


@pytest.fixture(scope="module")
def measure(tmp_path_factory):
    runner = LocalRunner(RunnerOptions(repeat=1, min_repeat_ms=0.2, timeout=30.0, stop_factor=0))
    yield measure_with(LocalBuilder(n_parallel=2, cache_dir=tmp_path_factory.mktemp("kernels")), runner)
    runner.close()


def test_amd_avx512_is_named_as_amd():
    assert AMD.capabilities.vendor == "amd" and AMD.capabilities.vector_registers == 32
    assert INTEL.capabilities.vendor == "intel" and INTEL.capabilities.vector_registers == 32


@pytest.mark.parametrize("target", [INTEL, AMD], ids=["intel-avx512", "amd-avx512"])
def test_avx512_window_tiles_fill_28_accumulators_with_pixels_first(target):
    """56->28: 1 block x 4 rows x 7 columns; 28->14: 1 x 2 x 14; 14->7 (7 columns, 1 row): 4 blocks x 7;
    kw unrolled in each, on both vendors' AVX-512 cores."""
    assert _tile(STRIDE2_56, target) == (1, 4, 7, True)
    assert _tile(STRIDE2_28, target) == (1, 2, 14, True)
    assert _tile(STRIDE2_14, target) == (4, 1, 7, True)


def test_avx2_cores_keep_the_generic_tile():
    """16 vector registers leave no room for 28 accumulators: one row of up to 8 columns, kw rolled."""
    for task in (STRIDE2_56, STRIDE2_28):
        _, tile_oh, columns, unroll = _tile(task, INTEL_AVX2)
        assert (tile_oh, unroll) == (1, False) and columns <= 8


def test_avx2_rows_of_7_and_14_columns_take_seven_columns(measure):
    """ResNet-18's 7- and 14-wide layers on AVX2 (blocks of 8): the generic tile, two blocks by at
    most 6 columns, would be 2 x 1 on a row of 7 (the 512-channel 3x3 ran 7.6-10.4 ms so, 3.4 in
    1 x 7, EPYC Zen 3) and 2 x 2 on 14. A blocked input takes 2 x 7, the blocks innermost; a
    plain input one block by 7. All compute the convolution where the host runs AVX2."""
    layer4 = blocked_conv_task((1, 512, 7, 7), (512, 512, 3, 3), 8, 8, pad=1, bias=True, residual=True)
    to14 = blocked_conv_task((1, 128, 28, 28), (256, 128, 3, 3), 8, 8, stride=2, pad=1, bias=True)
    plain = blocked_conv_task((1, 3, 7, 7), (64, 3, 3, 3), 0, 8, pad=1)
    assert _tile(layer4, INTEL_AVX2) == (2, 1, 7, False) and _tile(to14, INTEL_AVX2) == (2, 1, 7, False)
    assert _tile(plain, INTEL_AVX2) == (1, 1, 7, False)
    if runs_here(INTEL_AVX2):
        results = measure([MeasureInput(t, INTEL_AVX2, TEMPLATE.fallback(t, INTEL_AVX2)) for t in (layer4, to14, plain)])
        assert all(r.ok for r in results), [r.error_msg[:300] for r in results]


#: ResNeXt's 1x1 256 -> 512 on 28x28, channels in blocks of 8: 784 KiB of input, 512 KiB of weights
RESNEXT_1X1 = blocked_conv_task((1, 256, 28, 28), (512, 256, 1, 1), 8, 8, bias=True, residual=True)


def test_avx2_blocked_tiles_take_seven_columns_with_the_blocks_innermost(measure, tmp_path):
    """16 registers: two blocks by 7 columns, in the fewest column tiles and of those the
    narrowest (a row of 17: 3 tiles of 6, not of 7), the blocks innermost; compiled for
    -mcpu=haswell on any host, its reduction step issues 14 ymm FMAs and touches no zmm
    register (13 accumulators in registers, one on the stack). A prime number of
    blocks, one per tile, takes 14 columns, and so does a plain input in one block (first
    layers: 111 columns here, in 8 tiles). AVX-512's 32 registers keep 8 columns."""
    config = TEMPLATE.fallback(RESNEXT_1X1, INTEL_AVX2)
    assert _tile(RESNEXT_1X1, INTEL_AVX2) == (2, 1, 7, False) and _spills(2, config, INTEL_AVX2)
    asm = _assembly(RESNEXT_1X1, config, INTEL_AVX2, tmp_path)
    assert "%zmm" not in asm and len(re.findall(r"vfmadd\w*ps\s[^\n]*%ymm", asm)) >= 14
    row17 = blocked_conv_task((1, 128, 16, 16), (256, 128, 2, 2), 8, 8, pad=1)
    assert _tile(row17, INTEL_AVX2)[2] == 6
    plain = blocked_conv_task((1, 3, 224, 224), (64, 3, 3, 3), 0, 8, stride=2)
    assert _tile(plain, INTEL_AVX2) == (1, 1, 14, False)
    regnet = blocked_conv_task((1, 104, 28, 28), (104, 104, 1, 1), 8, 8, bias=True)  # 13 blocks: one per tile
    assert _tile(regnet, INTEL_AVX2) == (1, 1, 14, False) and not _spills(1, TEMPLATE.fallback(regnet, INTEL_AVX2), INTEL_AVX2)
    wide = blocked_conv_task((1, 256, 28, 28), (512, 256, 1, 1), 16, 16, bias=True)
    assert _tile(wide, INTEL)[2] == _tile(wide, AMD)[2] == 7  # the row's widest tile of at most 8
    if runs_here(INTEL_AVX2):
        results = measure([MeasureInput(t, INTEL_AVX2, TEMPLATE.fallback(t, INTEL_AVX2)) for t in (RESNEXT_1X1, regnet, plain)])
        assert all(r.ok for r in results), [r.error_msg[:300] for r in results]


def test_avx2_rows_tiled_in_five_or_six_columns_take_them(measure):
    """Two blocks by 7 columns leave one weight vector in memory on 16 registers; where the row
    tiles in 5 or 6 columns (exactly or with a shifted last tile) the fallback takes those: a
    1x1 layer on 42x42 ran 169 -> 192 GFLOP/s, DeepLab's 33x33 ones 129 -> 174 (EPYC Zen 3,
    2 threads). Rows whose tiles below 7 columns are 4 or fewer keep 7. Shifted 6-column tiles
    compute the convolution where the host runs AVX2."""
    deeplab = blocked_conv_task((1, 1024, 33, 33), (256, 1024, 1, 1), 8, 8, bias=True)
    exact = blocked_conv_task((1, 256, 42, 42), (256, 256, 3, 3), 8, 8, pad=1, bias=True, residual=True)
    odd = blocked_conv_task((1, 64, 35, 35), (64, 64, 1, 1), 8, 8)
    assert _tile(deeplab, INTEL_AVX2) == (2, 1, 6, False) and TEMPLATE.fallback(deeplab, INTEL_AVX2)["tile_ow"] == (6, 6)
    assert _tile(exact, INTEL_AVX2) == (2, 1, 6, False) and _tile(odd, INTEL_AVX2) == (2, 1, 5, False)
    for width in (7, 14, 28, 56):
        assert _tile(blocked_conv_task((1, 64, width, width), (64, 64, 1, 1), 8, 8), INTEL_AVX2)[2] == 7
    if runs_here(INTEL_AVX2):
        small = blocked_conv_task((1, 64, 33, 33), (32, 64, 1, 1), 8, 8, bias=True, residual=True)
        results = measure([MeasureInput(t, INTEL_AVX2, TEMPLATE.fallback(t, INTEL_AVX2)) for t in (small, exact)])
        assert all(r.ok for r in results), [r.error_msg[:300] for r in results]


@pytest.mark.parametrize("target", [INTEL_AVX2, INTEL, AMD], ids=["avx2", "intel-avx512", "amd-avx512"])
def test_rows_outermost_where_the_input_outweighs_the_weights(target, tmp_path):
    """Each thread re-reads the operand its outer loop does not index: rows outermost where the
    input is the larger (ResNeXt's 1x1), the blocks of output channels where the weights are
    (ResNet-18's layer4); depthwise and grouped layers read only their own channels and keep
    the blocks outermost, on every target. The rows-first tile compiles to the target's FMAs."""
    block = 8 if target is INTEL_AVX2 else 16
    rows, blocks = ("oh", "oc", "ow"), ("oc", "oh", "ow")
    layer4 = blocked_conv_task((1, 512, 7, 7), (512, 512, 3, 3), block, block, pad=1)
    depthwise = blocked_conv_task((1, 144, 56, 56), (144, 1, 3, 3), block, block, pad=1, depthwise=True)
    grouped = blocked_conv_task((1, 256, 28, 28), (256, 64, 3, 3), block, block, pad=1, groups=4)
    resnext = blocked_conv_task((1, 256, 28, 28), (512, 256, 1, 1), block, block, bias=True)
    config = TEMPLATE.fallback(resnext, target)
    assert config["outer_order"] == rows
    register = "%ymm" if target is INTEL_AVX2 else "%zmm"  # compiled for the target on any host
    assert len(re.findall(rf"vfmadd\w*ps\s[^\n]*{register}", _assembly(resnext, config, target, tmp_path))) >= 14
    for task in (layer4, depthwise, grouped):
        assert TEMPLATE.fallback(task, target)["outer_order"] == blocks, task.shapes


def test_one_by_one_plain_input_and_grouped_convolutions_keep_the_generic_tile():
    one = blocked_conv_task((1, 64, 56, 56), (128, 64, 1, 1), 16, 16, stride=2)
    plain = blocked_conv_task((1, 3, 56, 56), (64, 3, 3, 3), 0, 16, stride=2, pad=1)
    grouped = blocked_conv_task((1, 128, 28, 28), (128, 32, 3, 3), 16, 16, pad=1, groups=4)
    for task in (one, plain, grouped):
        tile_oc, tile_oh, columns, unroll = _tile(task, AMD)
        assert _tile(task, INTEL) == (tile_oc, tile_oh, columns, unroll), task.shapes
        assert (tile_oh, unroll) == (1, False) and columns <= 8, task.shapes


def _first_layers(lanes: int) -> dict:
    """Models' first layers, a plain image of 3 channels: MobileNetV2's (72 multiply-adds per input
    element), SqueezeNet's (144, unpadded), a VGG-style one (576) and ResNet-18's (784)."""
    return {
        "mobilenet_v2": blocked_conv_task((1, 3, 224, 224), (32, 3, 3, 3), 0, lanes, stride=2, pad=1, bias=True),
        "squeezenet": blocked_conv_task((1, 3, 224, 224), (64, 3, 3, 3), 0, lanes, stride=2, bias=True),
        "vgg": blocked_conv_task((1, 3, 224, 224), (64, 3, 3, 3), 0, lanes, pad=1, bias=True),
        "resnet18": blocked_conv_task((1, 3, 224, 224), (64, 3, 7, 7), 0, lanes, stride=2, pad=3, bias=True),
    }


def test_zen5_first_layers_pad_in_the_loads():
    """On Zen 5 cores: MobileNetV2's first layer unrolls kw in the generic tile; the others take
    one row of 14 columns by 2 blocks, kw rolled; all pad in the loads (SqueezeNet's has no
    padding). Intel with AVX-512 keeps the generic tile, padding at root, and so does Zen 4 but
    for MobileNetV2's, which unrolls kw and pads in the loads there too (16-register targets:
    `test_sixteen_registers_pad_few_multiply_add_first_layers_in_the_loads`)."""
    assert ZEN5.capabilities.core == "znver5" and ZEN5.capabilities.vector_registers == 32
    values = {name: (c["tile_oc"], c["tile_oh"], c["tile_ow"][1], c["pad"], c["unroll_kw"])
              for name, c in ((name, TEMPLATE.fallback(task, ZEN5)) for name, task in _first_layers(16).items())}
    assert values == {"mobilenet_v2": (2, 1, 8, "inline", True), "squeezenet": (2, 1, 14, "none", False),
                      "vgg": (2, 1, 14, "inline", False), "resnet18": (2, 1, 14, "inline", False)}
    for target in (INTEL, AMD):
        for task in _first_layers(target.capabilities.lanes(4)).values():
            config = TEMPLATE.fallback(task, target)
            assert config["pad"] in ("root", "none") and not config["unroll_kw"], (target, task.shapes)
    # Zen 4: MobileNetV2's unrolls kw and pads in the loads in the generic tile, the others as on AMD above
    assert ZEN4.capabilities.core == "znver4" and ZEN4.capabilities.vector_registers == 32
    zen4 = {name: (c["tile_oc"], c["tile_oh"], c["tile_ow"], c["pad"], c["unroll_kw"])
            for name, c in ((name, TEMPLATE.fallback(task, ZEN4)) for name, task in _first_layers(16).items())}
    generic = {name: (c["tile_oc"], c["tile_oh"], c["tile_ow"], c["pad"], c["unroll_kw"])
               for name, c in ((name, TEMPLATE.fallback(task, AMD)) for name, task in _first_layers(16).items())}
    assert zen4["mobilenet_v2"] == (*generic["mobilenet_v2"][:3], "inline", True)
    assert {n: v for n, v in zen4.items() if n != "mobilenet_v2"} == {n: v for n, v in generic.items() if n != "mobilenet_v2"}
    for task in _first_layers(16).values():
        source = renderer_for("llvm").render(lower(*TEMPLATE.apply(task, TEMPLATE.fallback(task, ZEN5), ZEN5), "k"))
        assert "f32x16" in source


@pytest.mark.parametrize("target", [INTEL_AVX2, Target.parse("llvm -mattr=-avx512f", host=ZEN5_HOST)],
                         ids=["haswell", "zen5-avx2"])
def test_sixteen_registers_pad_few_multiply_add_first_layers_in_the_loads(target, measure):
    """MobileNetV2's first layer (72 multiply-adds per input element) and a 3 -> 16 stem (36) pad
    in the loads, kw unrolled, one block by 8 columns; the others keep their tile, padding at
    root (or none); the two compute the convolution."""
    layers = {**_first_layers(8), "stem16": blocked_conv_task((1, 3, 224, 224), (16, 3, 3, 3), 0, 8, stride=2,
                                                              pad=1, bias=True)}
    configs = {name: TEMPLATE.fallback(task, target) for name, task in layers.items()}
    values = {name: (c["tile_oc"], c["tile_ow"][1], c["pad"], c["unroll_kw"]) for name, c in configs.items()}
    assert values["mobilenet_v2"] == values["stem16"] == (1, 8, "inline", True)
    for name in ("squeezenet", "vgg", "resnet18"):
        assert values[name][2:] in (("root", False), ("none", False)), name
    if runs_here(target):
        results = measure([MeasureInput(layers[name], target, configs[name]) for name in ("mobilenet_v2", "stem16")])
        assert all(r.ok for r in results), [r.error_msg[:300] for r in results]


def test_zen5_first_layers_compute_the_convolution(measure):
    """Zen 5's configs, built for AVX-512 on an AMD core that gcc 12 names (the same space), and
    checked by the runner against the numpy reference where the host runs AVX-512."""
    if not runs_here(AMD):
        pytest.skip("the host cannot run AVX-512 code (rendered in the test above)")
    inputs = []
    for task in _first_layers(16).values():
        zen5 = TEMPLATE.fallback(task, ZEN5)
        space = TEMPLATE.space(task, AMD)
        inputs.append(MeasureInput(task, AMD, space.from_values({k.name: zen5[k.name] for k in space.knobs})))
    results = measure(inputs)
    assert all(r.ok for r in results), [r.error_msg[:300] for r in results]


def test_winograd_tiles_hold_16_accumulators_on_full_width_512_bit_pipes():
    """F(4) on 56x56 has 196 tiles: 14 per register tile on Intel and Zen 5 (16 at most), 7
    elsewhere; on every target the output blocks run innermost among the GEMM's parallel items.
    Where 16 would pad the tile count (49 tiles of 28x28 under F(4) and of 14x14 under F(2):
    to 64), the register tile is the one that pads it least (7), and 112x112's 784 tiles take 16."""
    intel, zen5, amd = (TEMPLATE.fallback(WIDE_3X3, t) for t in (INTEL, ZEN5, AMD))
    assert intel["algorithm"] == zen5["algorithm"] == amd["algorithm"] == "winograd_4"
    assert (intel["wino_tile_t"], zen5["wino_tile_t"], amd["wino_tile_t"]) == (14, 14, 7)
    for shape, weights, algorithm, tile_t in (((1, 128, 28, 28), (128, 128, 3, 3), "winograd_4", 7),
                                              ((1, 256, 14, 14), (256, 256, 3, 3), "winograd_2", 7),
                                              ((1, 64, 112, 112), (64, 64, 3, 3), "winograd_4", 16)):
        for target in (INTEL, ZEN5):
            config = TEMPLATE.fallback(blocked_conv_task(shape, weights, 16, 16, pad=1), target)
            assert (config["algorithm"], config["wino_tile_t"]) == (algorithm, tile_t), (shape, target)
    avx2 = TEMPLATE.fallback(WIDE_3X3, INTEL_AVX2)
    assert avx2["wino_tile_t"] == 7  # 16 ymm registers: no room
    assert {c["wino_gemm_order"] for c in (intel, zen5, amd, avx2)} == {"tile_outer"}


def test_small_maps_of_many_channels_where_the_pipes_are_half_width(measure):
    """On Zen 4's AVX-512 and on AVX2, layers of at least 128 channels both ways take F(2) on 7x7
    maps (ResNet-18's layer4: 0.78-0.84 of the direct kernel's time in the model on a Zen 4), with
    8 of their 16 tiles per register tile where 32 registers hold them (the cap of 7 leaves 4);
    where 7 divide the tile count it stays, and 14x14 maps keep F(2). Full-width 512-bit pipes
    (Intel, Zen 5) keep direct; few channels, maps below 7x7 and dilated phases keep the general
    rules everywhere. The direct knobs keep their values. The F(2) fallback computes the
    convolution where the host runs it."""
    def fallback(shape, weights, block, target, **kw):
        return TEMPLATE.fallback(blocked_conv_task(shape, weights, block, block, pad=1, **kw), target)

    for target, block in ((AMD, 16), (INTEL_AVX2, 8)):
        layer4 = fallback((1, 512, 7, 7), (512, 512, 3, 3), block, target, bias=True, residual=True)
        assert layer4["algorithm"] == "winograd_2", target
        assert layer4["wino_tile_t"] == (8 if target is AMD else 7)
        assert layer4["outer_order"] == ("oc", "oh", "ow")  # the direct knobs as before
        layer3 = fallback((1, 256, 14, 14), (256, 256, 3, 3), block, target)
        assert (layer3["algorithm"], layer3["wino_tile_t"]) == ("winograd_2", 7)
        assert fallback((1, 64, 112, 112), (64, 64, 3, 3), block, target)["wino_tile_t"] == 7  # 784 tiles
        assert fallback((1, 128, 7, 7), (32, 128, 3, 3), block, target)["algorithm"] == "direct"  # DenseNet's
        assert fallback((1, 128, 14, 14), (32, 128, 3, 3), block, target)["algorithm"] == "winograd_2"
        assert fallback((1, 512, 6, 6), (512, 512, 3, 3), block, target)["algorithm"] == "direct"
        assert fallback((1, 512, 14, 14), (512, 512, 3, 3), block, target, dilation=2)["algorithm"] == "direct"
    for target in (INTEL, ZEN5):
        assert fallback((1, 512, 7, 7), (512, 512, 3, 3), 16, target)["algorithm"] == "direct", target
    task = blocked_conv_task((1, 256, 7, 7), (128, 256, 3, 3), 16, 16, pad=1, bias=True, residual=True)
    config = TEMPLATE.fallback(task, AMD)
    assert config["algorithm"] == "winograd_2"
    if runs_here(AMD):
        results = measure([MeasureInput(task, AMD, config)])
        assert all(r.ok for r in results), [r.error_msg[:300] for r in results]


#: rows the window tile's widths do not divide: DCGAN's 64 -> 16 phase onto 33x33 (one block
#: out), a DeepLab region of 12x9 outputs reading its window of a 33x33 map
ROW_33 = blocked_conv_task((1, 64, 32, 32), (16, 64, 2, 2), 16, 16, pad=1, bias=True)
ROW_9 = blocked_conv_task((1, 256, 33, 33), (64, 256, 2, 3), 16, 16, dilation=12, crop=(0, 0, 9, 0), bias=True)


@pytest.mark.parametrize("target", [INTEL, AMD], ids=["intel-avx512", "amd-avx512"])
def test_avx512_window_tiles_of_rows_they_do_not_divide_recompute_few_columns(target):
    """The tile of the most accumulators that count the row's columns per tile, not the tile's
    width: one block by 2 x 17 of 33 columns (2 x 28 had computed 23 columns twice: 0.065 ->
    0.045 ms, EPYC Zen 5, 1 thread), and 2 blocks by 4 rows by 3 x 3 of 9 columns (0.135 ms in
    one block by 4 rows by 2 x 7, 0.093 by 2 x 5, 0.076 so)."""
    assert _tile(ROW_33, target) == (1, 1, 17, True)
    assert _tile(ROW_9, target) == (2, 4, 3, True)


#: rows of 19 and 17 columns that the generic tiles (2 blocks x 3 x 7, 3 blocks x 2 x 9) do not divide
POINTWISE_19 = blocked_conv_task((1, 128, 19, 19), (64, 128, 1, 1), 16, 16, bias=True)
STRIDE2_17 = blocked_conv_task((1, 64, 35, 35), (64, 64, 3, 3), 16, 16, stride=2, bias=True)
POINTWISE_14 = blocked_conv_task((1, 128, 14, 14), (64, 128, 1, 1), 16, 16, bias=True)
POINTWISE_38 = blocked_conv_task((1, 64, 38, 38), (32, 64, 1, 1), 16, 16, bias=True)


@pytest.mark.parametrize("target", [INTEL, AMD], ids=["intel-avx512", "amd-avx512"])
def test_avx512_rows_the_tile_does_not_divide_take_one_block_by_a_dividing_tile(target):
    """1x1 1024 -> 1024 on 19x19 3.71-3.78 -> 3.39-3.46 ms, 3x3 stride 2 onto 17x17 2.63-2.66 ->
    2.49-2.51 (EPYC Zen 4, 2 threads, alone); rows the tile divides keep it, as do 16 registers."""
    assert _tile(POINTWISE_19, target) == (1, 1, 19, False)
    assert _tile(STRIDE2_17, target) == (1, 1, 17, True)
    assert _tile(POINTWISE_14, target)[2] == 7
    assert _tile(POINTWISE_19, INTEL_AVX2)[2] != 19
    # wider 1x1 rows: the widest divisor up to 28 (512 -> 256 on 38x38 1.76-1.90 -> 1.68-1.72 ms);
    # a window's wider rows keep `_window_tile`'s measured choice
    assert _tile(POINTWISE_38, target) == (1, 1, 19, False)
    assert _tile(ROW_33, target) == (1, 1, 17, True)


@pytest.mark.parametrize("target", [INTEL, AMD], ids=["intel-avx512", "amd-avx512"])
def test_avx512_fallbacks_compute_the_convolution(measure, target):
    tasks = (STRIDE2_56, STRIDE2_14, WIDE_3X3, ROW_33, ROW_9, POINTWISE_19, STRIDE2_17, POINTWISE_38)
    inputs = [MeasureInput(task, target, TEMPLATE.fallback(task, target)) for task in tasks]
    if not runs_here(target):
        for inp in inputs:
            assert "f32x16" in renderer_for("llvm").render(lower(*TEMPLATE.apply(inp.task, inp.config, target), "k"))
        pytest.skip("the host cannot run AVX-512 code (rendered above)")
    results = measure(inputs)
    assert all(r.ok for r in results), [r.error_msg[:300] for r in results]


def _lanes_tasks(block: int) -> list:
    """ResNeXt's 3x3 layers in blocks of `block`, with their channels per group: 32 groups of 4
    at 56x56, and of 8 at 28x28 where that is less than a block."""
    tasks = [(blocked_conv_task((1, 128, 56, 56), (128, 4, 3, 3), block, block, pad=1, groups=32, bias=True), 4)]
    if block > 8:
        tasks.append((blocked_conv_task((1, 256, 28, 28), (256, 8, 3, 3), block, block, pad=1, groups=32, bias=True), 8))
    return tasks


@pytest.mark.parametrize("target", [INTEL, AMD, INTEL_AVX2], ids=["intel-avx512", "amd-avx512", "avx2"])
def test_several_groups_per_block_get_one_block_by_one_row_and_a_shuffled_input(target):
    """One block by 14 columns (at most 12 with 16 registers), the group's channels outermost,
    kw unrolled; the input vector is one load of the block and a shuffle with a constant
    pattern plus the reduction step, not a gather lane by lane."""
    lanes = 16 if target.capabilities.vector_registers == 32 else 8
    for task, groups in _lanes_tasks(lanes):
        config = TEMPLATE.fallback(task, target)
        assert (config["tile_oc"], config["tile_oh"]) == (1, 1)
        assert config["tile_ow"][1] == 14 if lanes == 16 else 6 <= config["tile_ow"][1] <= 12
        assert tuple(config["reduce_order"]) == ("ico", "ici", "kh", "kw") and config["unroll_kw"]
        source = renderer_for("llvm").render(lower(*TEMPLATE.apply(task, config, target), "k"))
        pattern = ", ".join(str(lane // groups * groups) for lane in range(lanes))
        assert f"__builtin_shuffle(*(f32x{lanes}*)&conv2d_pad[" in source
        assert f"((i32x{lanes}){{{pattern}}} + (int32_t)(icb))" in source


def test_several_groups_per_block_compute_the_convolution(measure):
    """Checked by the runner against the numpy reference, on this host's own ISA."""
    target = Target.parse("llvm")
    tasks = [task for task, _ in _lanes_tasks(target.capabilities.lanes(4))]
    results = measure([MeasureInput(task, target, TEMPLATE.fallback(task, target)) for task in tasks])
    assert all(r.ok for r in results), [r.error_msg[:300] for r in results]


#: RegNet's 3x3 layers of 64 channels a group: downsampling 112 -> 56 (2 groups) and 28 -> 14
#: (8 groups), and a stride-1 one
REGNET_STRIDED = [blocked_conv_task((1, 128, 112, 112), (128, 64, 3, 3), 16, 16, stride=2, pad=1, groups=2, bias=True),
                  blocked_conv_task((1, 512, 28, 28), (512, 64, 3, 3), 16, 16, stride=2, pad=1, groups=8, bias=True)]
REGNET_SAME = blocked_conv_task((1, 512, 14, 14), (512, 64, 3, 3), 16, 16, pad=1, groups=8, bias=True)


@pytest.mark.parametrize("target", [INTEL, AMD, INTEL_AVX2], ids=["intel-avx512", "amd-avx512", "avx2"])
def test_strided_layers_of_wide_groups_take_four_blocks_padded_in_the_loads(target):
    """On 32 registers a stride-2 layer of four or more blocks a group takes 4 blocks x 7
    columns, padded inline; its stride-1 twin, a layer of one block a group and any layer on 16
    registers keep their tiles."""
    wide = target.capabilities.vector_registers == 32
    for task in REGNET_STRIDED:
        c = TEMPLATE.fallback(task, target)
        if wide:
            assert (c["tile_oc"], c["tile_ow"][1], c["pad"]) == (4, 7, "inline")
        else:
            assert c["tile_oc"] <= 2 and c["pad"] == "root"
    assert (TEMPLATE.fallback(REGNET_SAME, target)["tile_oc"], TEMPLATE.fallback(REGNET_SAME, target)["pad"]) == (2, "root")
    narrow = blocked_conv_task((1, 256, 28, 28), (256, 16, 3, 3), 16, 16, stride=2, pad=1, groups=16, bias=True)
    assert TEMPLATE.fallback(narrow, target)["tile_oc"] == 2


def test_strided_wide_group_fallbacks_compute_the_convolution(measure):
    """Checked by the runner against the numpy reference (AVX-512 where the host has it)."""
    target = INTEL if runs_here(INTEL) else INTEL_AVX2
    results = measure([MeasureInput(task, target, TEMPLATE.fallback(task, target)) for task in REGNET_STRIDED])
    assert all(r.ok for r in results), [r.error_msg[:300] for r in results]


@pytest.mark.parametrize("target", [INTEL, AMD, INTEL_AVX2], ids=["intel-avx512", "amd-avx512", "avx2"])
def test_grouped_layers_of_few_channels_a_group_pad_inline_and_dense_ones_at_root(target):
    """The copy at root is one pass over the input; a grouped layer of 16 channels a group (whole
    blocks) at stride 2 does 36 multiply-adds per input element, a depthwise one 9, and both pad
    in the loads; the same layer at stride 1 (144) and a dense one pad in a copy."""
    lanes = target.capabilities.lanes(4)
    grouped = dict(pad=1, groups=16, bias=True)
    strided = blocked_conv_task((1, 256, 28, 28), (256, 16, 3, 3), lanes, lanes, stride=2, **grouped)
    same = blocked_conv_task((1, 256, 28, 28), (256, 16, 3, 3), lanes, lanes, **grouped)
    depthwise = blocked_conv_task((1, 64, 28, 28), (64, 1, 3, 3), lanes, lanes, pad=1, depthwise=True)
    dense = blocked_conv_task((1, 64, 56, 56), (128, 64, 3, 3), lanes, lanes, stride=2, pad=1)
    pads = {name: TEMPLATE.fallback(task, target)["pad"]
            for name, task in [("strided", strided), ("same", same), ("depthwise", depthwise), ("dense", dense)]}
    assert pads == {"strided": "inline", "same": "root", "depthwise": "inline", "dense": "root"}
    several = _lanes_tasks(lanes)[0][0]  # groups of 4: a block holds several, loaded whole from the copy
    assert TEMPLATE.fallback(several, target)["pad"] == "root"


def test_sixteen_registers_tile_maps_four_and_eight_wide_in_one_block_by_two_rows(measure):
    """Rows that tile in at most 4 columns (a DCGAN's 4x4 phase, a 3x3 on 4x4, a stride-2 3x3
    onto 8x8) take one block by two rows on AVX2, where two blocks by one row met 4 pixels per
    weight vector; wider rows, odd row counts and 32 registers keep their tile; the new tiles
    compute the convolution."""
    phase = blocked_conv_task((1, 512, 5, 5), (256, 512, 2, 2), 8, 8)
    small = {"phase": phase, "3x3_4x4": blocked_conv_task((1, 256, 4, 4), (128, 256, 3, 3), 8, 8, pad=1, bias=True),
             "3x3_s2_8x8": blocked_conv_task((1, 64, 16, 16), (128, 64, 3, 3), 8, 8, stride=2, pad=1)}
    for name, task in small.items():
        assert _tile(task, INTEL_AVX2)[:2] == (1, 2), name
    assert _tile(blocked_conv_task((1, 256, 14, 14), (256, 256, 3, 3), 8, 8, stride=2, pad=1), INTEL_AVX2)[:2] == (2, 1)
    assert _tile(blocked_conv_task((1, 256, 5, 4), (256, 256, 1, 1), 8, 8), INTEL_AVX2)[:2] == (2, 1)  # 5 rows
    assert _tile(blocked_conv_task((1, 512, 4, 4), (512, 512, 3, 3), 16, 16, pad=1), INTEL)[:2] != (1, 2)
    if runs_here(INTEL_AVX2):
        results = measure([MeasureInput(t, INTEL_AVX2, TEMPLATE.fallback(t, INTEL_AVX2)) for t in small.values()])
        assert all(r.ok for r in results), [r.error_msg[:300] for r in results]
