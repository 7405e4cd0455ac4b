"""Tensor cores under `-precision=tf32` (and fp16, bf16): the matmul and implicit-GEMM convolution templates as
warp-level mma.sync with a cp.async pipeline, checked in the CPU emulation against numpy (the
emulation runs the mma as a warp collective with the PTX fragment layout and TF32 rounding) and
read back from the SASS nvcc makes for sm_80 and sm_90 (no GPU is used)."""
import numpy as np
import onnx
import pytest

from autosched import zoo
from autosched.cli import main
from autosched.codegen.cuda import CudaRenderer
from autosched.codegen.nvcc import compile_cuda
from autosched.codegen.sass import kernel_sass, sass_available
from autosched.compile.emulation import build_emulated_kernel, emulated_kernel
from autosched.lower import lower
from autosched.lower.ir import AsyncWait, WarpMma, walk_stmts
from autosched.measure.nvcc import NvccBuilder
from autosched.measure.record import MeasureInput
from autosched.schedule import MmaTile, ScheduleError
from autosched.target import Target, TargetError
from autosched.templates import TemplateError, get_template
from search_spaces.cuda.conv2d_gemm import group_rows_fit
from search_spaces.cuda.gemm_mma import FALLBACK, MmaTiles
from search_spaces.llvm.conv2d import conv_dims
from tests.cuda_markers import ARCHS, needs_nvcc
from tests.gpu_schedules import tiled_matmul
from tests.task_helpers import attention_scores_task, conv_task, gemm_task, matmul_task

TF32 = Target.parse("cuda -arch=sm_80 -precision=tf32")
needs_sass = pytest.mark.skipif(not sass_available(), reason="cuobjdump/nvdisasm not installed (test extra)")

MATMULS = {
    "matmul_relu_odd": lambda: matmul_task((37, 29), (29, 51), relu=True),
    "gemm_dense_bias_trans_b": lambda: gemm_task((64, 100), (70, 100), (70,), trans_b=1),
    "gemm_trans_a_alpha_beta": lambda: gemm_task((20, 33), (20, 12), (33, 12), trans_a=1, alpha=0.5, beta=2.0),
    "one_row": lambda: matmul_task((1, 40), (40, 24)),
    "batched_attention": lambda: attention_scores_task((2, 3), 17, 8, 19),
}
CONVS = {
    "3x3_pad_bias_relu": lambda: conv_task((1, 5, 13, 11), (7, 5, 3, 3), pad=1, bias=True, epilogue="relu"),
    "3x3_stride2_residual": lambda: conv_task((2, 6, 9, 10), (4, 6, 3, 3), stride=2, pad=1, epilogue="residual"),
    "1x1": lambda: conv_task((2, 9, 7, 5), (11, 9, 1, 1)),
    "5x3_pad2": lambda: conv_task((1, 3, 10, 9), (6, 3, 5, 3), pad=2),
}
#: a ResNet-18 layer (layer3's 3×3 convolution: 256 → 256 channels on 14 × 14)
RESNET18_LAYER3 = (1, 256, 14, 14), (256, 256, 3, 3)


def _tf32(x: np.ndarray) -> np.ndarray:
    """x rounded as cvt.rna.tf32.f32 rounds it: to nearest, ties away from zero, 10 mantissa bits."""
    u = np.asarray(x, np.float32).view(np.uint32)
    return ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def _emulate(task, config, target=TF32):
    """(inputs, outputs the emulated kernel wrote, numpy's reference outputs)."""
    sched, args = get_template(task.op, "cuda").apply(task, config, target)
    inputs = task.random_inputs(0)
    want = task.reference(inputs)
    got = [np.full(w.shape, np.nan, np.float32) for w in want]
    build_emulated_kernel(sched, args, "candidate")(*inputs, *got)
    return inputs, got, want


def _assert_within_tf32(got, want, what: str) -> None:
    rtol, atol = TF32.tolerance
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * max(1.0, float(np.abs(w).max())), err_msg=what)


def _configs(task, n: int, seed: int) -> list:
    template = get_template(task.op, "cuda")
    space = template.space(task, TF32)
    rng = np.random.default_rng(seed)
    return [template.fallback(task, TF32)] + [space.get(int(i)) for i in rng.integers(0, len(space), n)]


def test_precision_is_a_cuda_target_option():
    assert TF32.precision == "tf32" and TF32.fingerprint == "cuda|sm_80|tf32" and TF32.tolerance == (1e-2, 1e-2)
    fp32 = Target.parse("cuda -arch=sm_80")
    assert fp32.precision == "fp32" and fp32.fingerprint == "cuda|sm_80" and fp32.tolerance == (1e-3, 1e-4)
    assert TF32.on_gpu("NVIDIA H100").fingerprint == "cuda|NVIDIA H100|sm_80|tf32"
    with pytest.raises(TargetError, match="needs tensor cores of sm_80 or newer, not sm_75"):
        Target.parse("cuda -arch=sm_75 -precision=tf32")
    with pytest.raises(TargetError, match="needs tensor cores of sm_80 or newer, not sm_75"):
        Target.parse("cuda -arch=sm_75 -precision=fp16")
    for precision, tolerance in (("fp16", (1e-2, 1e-2)), ("bf16", (5e-2, 5e-2))):
        target = Target.parse(f"cuda -arch=sm_90 -precision={precision}")
        assert target.fingerprint == f"cuda|sm_90|{precision}" and target.tolerance == tolerance
    with pytest.raises(TargetError, match="bad value 'tf32x' for -precision"):
        Target.parse("cuda -arch=sm_90 -precision=tf32x")


def test_tf32_selects_the_tensor_core_spaces_and_fp32_keeps_its_own():
    mm, conv, depthwise = MATMULS["matmul_relu_odd"](), CONVS["1x1"](), conv_task((1, 8, 12, 12), (8, 1, 3, 3), pad=1, group=8)
    fp32 = Target.parse("cuda -arch=sm_80")
    assert get_template("MatMul", "cuda").space(mm, TF32).template == "matmul_mma_cuda"
    assert get_template("MatMul", "cuda").space(mm, fp32).template == "matmul_tiled_cuda"
    assert get_template("Conv", "cuda").space(conv, TF32).template == "conv2d_mma_cuda"
    assert get_template("Conv", "cuda").space(depthwise, TF32).template == "conv2d_cuda"  # grouped: direct, fp32


@pytest.mark.parametrize("name", sorted(MATMULS) + sorted(CONVS))
def test_emulated_tf32_matmul_and_implicit_gemm_conv_match_numpy(name):
    """The fallback and random configs (3 for a matmul, 2 for a conv)."""
    task = MATMULS[name]() if name in MATMULS else CONVS[name]()
    for config in _configs(task, 3 if name in MATMULS else 2, seed=len(name)):
        _, got, want = _emulate(task, config)
        _assert_within_tf32(got, want, f"{name} config {config.to_json()}")


def test_the_emulation_rounds_the_inputs_as_the_tensor_cores_do():
    """The emulated answer is the product of the TF32-rounded inputs (up to fp32 summation order),
    not the exact fp32 product: the rounding is visible, and it is the GPU's."""
    task = matmul_task((64, 48), (48, 40))
    (a, b), [got], [exact] = _emulate(task, get_template("MatMul", "cuda").fallback(task, TF32))
    rounded = _tf32(a).astype(np.float64) @ _tf32(b).astype(np.float64)
    scale = float(np.abs(exact).max())
    assert np.abs(got - rounded).max() / scale < 2e-6
    assert np.abs(got - exact).max() / scale > 2e-5


def test_the_fallback_for_4096_cubed_passes_the_emulation():
    """The 4096³ fallback's config, emulated at 512³ (the emulation of 2·4096³ flops would take
    hours on a CPU): the same kernel but for the grid and the loop trip count."""
    template = get_template("MatMul", "cuda")
    big, task = matmul_task((4096, 4096), (4096, 4096)), matmul_task((512, 512), (512, 512))
    space, small = template.space(big, TF32), template.space(task, TF32)
    config = template.fallback(big, TF32)
    assert {k.name: config[k.name] for k in space.knobs} == {**FALLBACK}
    _, got, want = _emulate(task, small.from_values({k.name: config[k.name] for k in space.knobs}))
    _assert_within_tf32(got, want, "512³ with the 4096³ fallback")


def test_a_resnet18_layer_as_implicit_gemm_passes_the_emulation():
    task = conv_task(*RESNET18_LAYER3, pad=1)
    _, got, want = _emulate(task, get_template("Conv", "cuda").fallback(task, TF32))
    _assert_within_tf32(got, want, "ResNet-18 layer3 conv")


def test_the_emulation_sees_a_pipeline_that_does_not_wait_for_its_copies():
    """Waiting for one group fewer than the pipeline needs reads a shared tile before its cp.async
    copies landed: NaN (the emulation's fresh shared memory) in the result, as garbage on a GPU."""
    task = matmul_task((64, 64), (64, 64))
    template = get_template("MatMul", "cuda")
    config = template.space(task, TF32).from_values({"warps_m": 2, "warps_n": 2, "mma_m": 2, "mma_n": 2, "tile_k": 8,
                                                     "stages": 3, "pad": 1, "vec": 4, "raster": 1})
    sched, args = template.apply(task, config, TF32)
    func = lower(sched, args, "early")
    waits = [s for s in walk_stmts(func.body) if isinstance(s, AsyncWait)]
    assert [w.pending for w in waits] == [1]
    inputs = task.random_inputs(0)
    good = np.full((64, 64), np.nan, np.float32)
    emulated_kernel(func)(*inputs, good)
    _assert_within_tf32([good], task.reference(inputs), "3 stages")
    waits[0].pending = 2
    bad = np.full((64, 64), np.nan, np.float32)
    emulated_kernel(func)(*inputs, bad)
    assert np.isnan(bad).any()


def test_one_mma_per_lane_tile_and_k_step():
    task = matmul_task((128, 128), (128, 128))
    template = get_template("MatMul", "cuda")
    config = template.fallback(task, TF32)
    sched, args = template.apply(task, config, TF32)
    mmas = [s for s in walk_stmts(lower(sched, args, "mm").body) if isinstance(s, WarpMma)]
    assert len(mmas) == 1 and (mmas[0].shape, mmas[0].precision) == ("m16n8k8", "tf32")
    assert len(mmas[0].a) == 4 and len(mmas[0].b) == 2 and len(mmas[0].c) == 4


def _sass(task, arch: str, tmp_path):
    template = get_template(task.op, "cuda")
    target = Target.parse(f"cuda -arch={arch} -precision=tf32")
    config = template.fallback(task, target)
    sched, args = template.apply(task, config, target)
    built = compile_cuda(CudaRenderer().render(lower(sched, args, "kernel")), arch, cache_dir=tmp_path)
    mmas_a_k_step = config["mma_m"] * config["mma_n"] * config["tile_k"] // 8  # a warp's tiles × k8 steps
    return kernel_sass(built.path, "kernel"), built.usage["kernel"], mmas_a_k_step


@needs_nvcc
@needs_sass
@pytest.mark.parametrize("arch", ARCHS)
def test_the_4096_cubed_fallback_runs_on_tensor_cores_from_a_cp_async_pipeline(tmp_path, arch):
    sass, usage, mmas = _sass(matmul_task((4096, 4096), (4096, 4096)), arch, tmp_path)
    assert sass.count("HMMA") == mmas == 4 * 8 * 32 // 8  # a warp's 4 × 8 m16n8k8 tiles, 4 k8 steps of a 32 k step
    assert sass.count("LDGSTS", 128) == sass.count("LDGSTS") > 0  # 16-byte cp.async only
    assert sass.count("BAR") == 1  # one barrier a k step
    # 128 threads of 64 × 64 warp tiles: 128 accumulators each, and no spills within the file's share
    assert sass.spills == 0 and usage.spill_stores == usage.spill_loads == 0 and usage.registers <= 65536 // 128
    assert sass.count("FFMA") == 0


@needs_nvcc
@needs_sass
@pytest.mark.parametrize("arch", ARCHS)
def test_a_resnet18_layer_runs_on_tensor_cores_from_a_cp_async_pipeline(tmp_path, arch):
    sass, usage, mmas = _sass(conv_task(*RESNET18_LAYER3, pad=1), arch, tmp_path)
    assert sass.count("HMMA") == mmas and sass.count("LDGSTS") > 0 and sass.count("BAR") == 1
    assert sass.spills == 0 and usage.spill_stores == 0


@needs_nvcc
def test_sampled_tf32_configs_fit_the_device_and_pass_the_emulation(tmp_path):
    """≥ 95% of sampled configs build within sm_80's limits; the emulation passes a share of them."""
    tasks = [matmul_task((96, 80), (80, 72)), conv_task((1, 16, 12, 12), (24, 16, 3, 3), pad=1)]
    inputs = [MeasureInput(task, TF32, c) for task in tasks for c in _configs(task, 9, seed=11)]
    results = NvccBuilder(n_parallel=2, timeout=120, cache_dir=tmp_path).build(inputs)
    ok = [r.ok for r in results]
    assert sum(ok) >= 0.95 * len(ok), [r.error_msg for r in results if not r.ok]
    for inp in inputs[1:20:7]:
        _, got, want = _emulate(inp.task, inp.config)
        _assert_within_tf32(got, want, f"config {inp.config.to_json()}")


def test_check_compares_a_tf32_model_within_the_tf32_tolerance_and_says_so(tmp_path, capsys):
    """A small MLP's Gemms on tensor cores in the emulation, against onnxruntime's fp32 (the zoo's
    MLP passes too, in minutes)."""
    path = tmp_path / "mlp.onnx"
    onnx.save(zoo.mlp(batch=8, sizes=(96, 64, 10)), path)
    assert main(["check", str(path), "--target", "cuda -arch=sm_80 -precision=tf32", "--emulate"]) == 0
    out = capsys.readouterr().out
    assert "tolerance: rtol 0.01, atol 0.01 (the tf32 tolerance)" in out and "fc2/Gemm" in out
    assert "MISMATCH" not in out
    assert main(["check", str(path), "--target", "cuda -arch=sm_80 -precision=tf32", "--emulate",
                 "--rtol", "0", "--atol", "0"]) == 1
    assert "tolerance: rtol 0, atol 0 (given)" in capsys.readouterr().out


def test_a_block_whose_accumulators_overflow_the_register_file_is_refused():
    """16 warps of 64 × 64 tiles would hold 128 accumulators in each of 512 threads: nvcc would cap
    them at 128 registers and spill, so the template refuses the config by name."""
    task = matmul_task((512, 512), (512, 512))
    template = get_template("MatMul", "cuda")
    space = template.space(task, TF32)
    values = {"warps_m": 4, "warps_n": 4, "mma_m": 4, "mma_n": 8, "tile_k": 16, "stages": 2, "pad": 1, "vec": 4,
              "raster": 1}
    with pytest.raises(TemplateError, match="4 × 4 warps of 4 × 8 mma tiles need about 168 registers"):
        template.apply(task, space.from_values(values), TF32)
    template.apply(task, space.from_values({**values, "warps_n": 2}), TF32)  # 8 warps fit


def test_the_new_schedule_primitives_refuse_misuse():
    s, _ = tiled_matmul(64, 64, 64)
    local = next(st for st in s.stages if st.scope == "local")
    shared = next(st for st in s.stages if st.scope == "shared")
    with pytest.raises(ScheduleError, match="only a shared-memory stage can be pipelined"):
        local.pipelined(2)
    with pytest.raises(ScheduleError, match="a pipeline has 2 to 8 stages, not 1"):
        shared.pipelined(1)
    with pytest.raises(ScheduleError, match="only a shared-memory stage's rows are padded"):
        local.pad_storage(4)
    with pytest.raises(ScheduleError, match="a whole split takes factor="):
        local.split(local.leaf_axes[-1], nparts=2, whole=True)
    ko, ki, ci, cj = local.leaf_axes[-4:]
    with pytest.raises(ScheduleError, match="its k, rows and cols loops innermost, in that order"):
        local.tensorize(MmaTile(ci, ki, cj, ci, cj))
    shared.double_buffered()
    with pytest.raises(ScheduleError, match="either double buffered or pipelined"):
        shared.pipelined(3)


def _round(x: np.ndarray, precision: str) -> np.ndarray:
    """x rounded as cvt.rn.f16x2.f32 / cvt.rn.bf16x2.f32 round it: to nearest even, a half's
    range and 10 mantissa bits (numpy's float16 does the same), or bfloat16's 7."""
    x = np.asarray(x, np.float32)
    if precision == "fp16":
        with np.errstate(over="ignore"):  # beyond a half's range is infinite, as on the GPU
            return x.astype(np.float16).astype(np.float32)
    u = x.view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)).view(np.float32)


def test_numpy_rounding_of_the_16_bit_inputs_is_the_ptx_conversion():
    x = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 65519.0, 65520.0, 2 ** -25, 3 * 2 ** -25, -2.5 * 2 ** -24], np.float32)
    assert _round(x, "fp16").tolist() == [1.0, 1 + 2 ** -9, 65504.0, np.inf, 0.0, 2 ** -23, -2 ** -23]
    y = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -9)], np.float32)
    assert _round(y, "bf16").tolist() == [1.0, 1 + 2 ** -6, -1.0]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("name", ["matmul_relu_odd", "batched_attention", "3x3_stride2_residual"])
def test_emulated_16_bit_mma_is_the_product_of_the_rounded_inputs(precision, name):
    """fp16 and bf16 inputs (pairs of k in a register: another fragment layout than tf32's),
    accumulated in fp32: the emulated answer is the rounded inputs' product within fp32
    summation, and within the precision's tolerance of the exact one. Fallback and one random config."""
    target = Target.parse(f"cuda -arch=sm_80 -precision={precision}")
    task = MATMULS[name]() if name in MATMULS else CONVS[name]()
    template = get_template(task.op, "cuda")
    space = template.space(task, target)
    for config in (template.fallback(task, target), space.get(int(np.random.default_rng(3).integers(len(space))))):
        inputs, got, want = _emulate(task, config, target)
        # the anchor's two operands are the mma's inputs; an epilogue's (bias, residual, mask) stay fp32
        rounded = task.reference([_round(x, precision) if i < 2 else x for i, x in enumerate(inputs)])
        rtol, atol = target.tolerance
        for g, w, r in zip(got, want, rounded):
            scale = max(1.0, float(np.abs(w).max()))
            assert np.abs(g - r).max() / scale < 1e-5, f"{name} {precision} {config.to_json()}"
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * scale)


@needs_nvcc
@needs_sass
@pytest.mark.parametrize("precision, hmma", [("fp16", "HMMA.1688.F32"), ("bf16", "HMMA.1688.F32.BF16")])
@pytest.mark.parametrize("arch", ARCHS)
def test_16_bit_fallbacks_run_on_tensor_cores(tmp_path, arch, precision, hmma):
    target = Target.parse(f"cuda -arch={arch} -precision={precision}")
    for task in (matmul_task((4096, 4096), (4096, 4096)), conv_task(*RESNET18_LAYER3, pad=1)):
        template = get_template(task.op, "cuda")
        config = template.fallback(task, target)
        sched, args = template.apply(task, config, target)
        built = compile_cuda(CudaRenderer().render(lower(sched, args, "kernel")), arch, cache_dir=tmp_path)
        sass, usage = kernel_sass(built.path, "kernel"), built.usage["kernel"]
        mmas = config["mma_m"] * config["mma_n"] * config["tile_k"] // 8
        assert {op: n for op, n in sass.opcodes.items() if op.startswith("HMMA")} == {hmma: mmas}
        assert sass.count("LDGSTS") > 0
        assert sass.count("LDS", 64) >= mmas // config["mma_n"]  # A's pairs of k (k innermost): one LDS.64 each
        assert sass.spills == 0 and usage.spill_stores == 0 and sass.count("FFMA") == 0


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_the_emulated_mma_rounds_as_the_ptx_conversion_at_the_edges(precision):
    """A · I through the emulated mma is A rounded: ties, a half's largest value and subnormals, as
    numpy rounds them (no overflow: an infinite a · 0 would make the row NaN)."""
    target = Target.parse(f"cuda -arch=sm_80 -precision={precision}")
    task = matmul_task((16, 8), (8, 8))
    template = get_template("MatMul", "cuda")
    sched, args = template.apply(task, template.fallback(task, target), target)
    edges = [1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 65519.0, 2 ** -25, 3 * 2 ** -25,
             -2.5 * 2 ** -24, 1e-30, 3.0e-39, 0.1, 7.0]
    a = np.resize(np.array(edges, np.float32), (16, 8)) * np.where(np.arange(128).reshape(16, 8) % 3, 1, -1).astype(np.float32)
    got = np.full((16, 8), np.nan, np.float32)
    build_emulated_kernel(sched, args, "edges")(a, np.eye(8, dtype=np.float32), got)
    np.testing.assert_array_equal(got, _round(a, precision))


def _check_ldmatrix_lanes(func, block, rng) -> int:
    """Every WarpMma with `a_rows` in `func`: what ldmatrix.x4 gives each of a warp's 32 lanes
    (word i % 4 of row i / 4 of matrix j, the rows handed over by lanes 8j..8j+7) is the A
    element its scalar fragment a_j reads, and every row starts 16-byte aligned; the loops other
    than the warp's threads at random iterations. Returns the mmas checked."""
    from autosched.lower.ir import Allocate, For, ForKind, IfThenElse, Let, Seq
    from autosched.measure.static_model import Lanes
    lanes, checked = Lanes(block), 0

    def visit(s) -> None:
        nonlocal checked
        if isinstance(s, For):
            thread = s.kind is ForKind.THREAD and s.thread in lanes.threads
            lanes.env[s.var] = lanes.threads[s.thread] if thread else int(rng.integers(s.extent))
            visit(s.body)
        elif isinstance(s, Let):
            lanes.env[s.var] = lanes.value(s.value)
            visit(s.body)
        elif isinstance(s, Seq):
            for x in s.stmts:
                visit(x)
        elif isinstance(s, (Allocate, IfThenElse)):
            visit(s.body if isinstance(s, Allocate) else s.then)
        elif isinstance(s, WarpMma) and s.a_rows is not None:
            rows = np.broadcast_to(lanes.value(s.a_rows), (32,))
            assert np.all(rows % 4 == 0)
            lane = np.arange(32)
            for j, a in enumerate(s.a):
                want = np.broadcast_to(lanes.value(a.indices[0]), (32,))
                np.testing.assert_array_equal(rows[8 * j + lane // 4] + lane % 4, want)
            checked += 1

    visit(func.body)
    return checked


@pytest.mark.parametrize("task", [matmul_task((256, 512), (512, 256)), conv_task((1, 64, 14, 14), (64, 64, 3, 3), pad=1),
                                  attention_scores_task((2, 3), 17, 8, 19)], ids=["matmul", "conv3x3", "batched"])
def test_ldmatrix_hands_every_lane_the_a_elements_its_fragments_read(task):
    """tf32's A registers come from one ldmatrix.x4 (codegen) while the emulation reads the scalar
    fragments: the lane mapping is checked here, since no GPU runs it in this suite."""
    from autosched.measure.gpu_build import lower_for_gpu
    from autosched.measure.local import instantiate_from_template
    target = Target.parse("cuda -arch=sm_80 -precision=tf32")
    template = get_template(task.op, "cuda")
    space = template.space(task, target)
    rng = np.random.default_rng(0)
    configs = [template.fallback(task, target)] + [space.get(int(i)) for i in space.sample(12, rng)]
    checked = 0
    for config in configs:
        try:
            func, geometry = lower_for_gpu(MeasureInput(task, target, config), instantiate_from_template)
        except Exception:  # noqa: BLE001 - a config the template refuses for this shape
            continue
        for _ in range(3):
            checked += _check_ldmatrix_lanes(func, geometry.block, rng)
    assert checked > 0


@needs_nvcc
@needs_sass
@pytest.mark.parametrize("arch", ARCHS)
def test_tf32_a_fragments_are_one_ldmatrix_each(tmp_path, arch):
    sass, usage, mmas = _sass(matmul_task((4096, 4096), (4096, 4096)), arch, tmp_path)
    # 4 × 8 tiles × 4 k8 steps: one LDSM.x4 per A tile and k8 step (the 8 tiles along n share it),
    # where four scalar LDS were
    assert sass.count("LDSM") == mmas // 8 == 16


#: what split-K makes of a deep convolution: 2 groups of 32 output channels over 16 input channels each
def _split_conv():
    return conv_task((2, 32, 7, 6), (64, 16, 3, 3), pad=1, group=2, bias=True, epilogue="relu")


def test_groups_of_whole_tiles_run_on_tensor_cores_batched_over_the_groups():
    task = _split_conv()
    template = get_template("Conv", "cuda")
    space = template.space(task, TF32)
    assert space.template == "conv2d_mma_cuda"
    d = conv_dims(task)
    fitting = [c for c in _configs(task, 16, seed=5) if group_rows_fit(d, MmaTiles.of(c, TF32).padding(32)[0])]
    assert len(fitting) >= 4 and fitting[0] == template.fallback(task, TF32)
    for config in fitting[:4]:
        _, got, want = _emulate(task, config)
        _assert_within_tf32(got, want, f"grouped config {config.to_json()}")
    values = {k.name: template.fallback(task, TF32)[k.name] for k in space.knobs}
    straddling = space.from_values({**values, "warps_m": 2, "mma_m": 2, "raster": 1})  # 64 rows: two groups' worth
    with pytest.raises(TemplateError, match="straddle the 32 output channels of a group"):
        template.apply(task, straddling, TF32)


@needs_nvcc
@needs_sass
@pytest.mark.parametrize("arch", ARCHS)
def test_a_split_resnet18_layer_runs_on_tensor_cores_from_a_cp_async_pipeline(tmp_path, arch):
    """ResNet-18's 512-channel 3×3 conv as split-K makes it: 8 groups of 64 input channels."""
    sass, usage, mmas = _sass(conv_task((1, 512, 7, 7), (4096, 64, 3, 3), pad=1, group=8), arch, tmp_path)
    assert sass.count("HMMA") == mmas and sass.count("LDGSTS") > 0  # 4-byte copies, as the ungrouped conv's
    assert sass.count("BAR") == 1 and sass.spills == 0 and usage.spill_stores == 0

def test_grouped_fallbacks_keep_their_blocks_within_a_group():
    """96 and 160 channels a group (MobileNetV2's split 1×1 convs): the tensor-core fallback's
    rows (a raster group of blocks) divide the group; at fp32 the GEMM's 64 rows do not, so the
    1×1 conv stays direct."""
    template = get_template("Conv", "cuda")
    for oc in (192, 320):
        task = conv_task((1, 576, 7, 7), (oc, 288, 1, 1), group=2)
        config = template.fallback(task, TF32)
        assert (oc // 2) % MmaTiles.of(config, TF32).padding(oc // 2)[0] == 0
        template.apply(task, config, TF32)
        assert template.fallback(task, Target.parse("cuda -arch=sm_80"))["algorithm"] == "direct"
    assert template.fallback(conv_task((1, 960, 7, 7), (640, 480, 1, 1), group=2),
                             Target.parse("cuda -arch=sm_80"))["algorithm"] == "implicit_gemm"
