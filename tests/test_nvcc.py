"""nvcc builds of generated CUDA (no GPU needed): cubins, resource usage, limits before device time."""
import json
from dataclasses import dataclass

import pytest

from autosched.codegen import CompileError
from autosched.codegen.cuda import CudaRenderer
from autosched.codegen.nvcc import compile_cuda, parse_resource_usage
from autosched.lower import lower
from autosched.measure.nvcc import NvccBuilder
from autosched.measure.record import ErrorKind, MeasureInput
from autosched.space import ChoiceKnob, ConfigSpace
from autosched.target import Target
from tests.cuda_markers import ARCHS, needs_nvcc
from tests.gpu_schedules import tiled_matmul

PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'mm' for 'sm_90'
ptxas info    : Function properties for mm
    8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0]
ptxas info    : Compiling entry function 'add' for 'sm_90'
ptxas info    : Used 8 registers, used 0 barriers, 380 bytes cmem[0]
"""


def test_parse_resource_usage():
    usage = parse_resource_usage(PTXAS)
    assert usage["mm"].registers == 255 and usage["mm"].spill_stores == 12 and usage["mm"].spill_loads == 16
    assert usage["mm"].stack_bytes == 8 and usage["mm"].static_shared_bytes == 1024
    assert usage["add"].registers == 8 and usage["add"].spill_stores == 0


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
def test_matmul_compiles_and_reports_usage(tmp_path, arch):
    s, args = tiled_matmul(96, 80, 72, block=(32, 16, 8), thread=(4, 2), vec=2)
    built = compile_cuda(CudaRenderer().render(lower(s, args, "mm")), arch, cache_dir=tmp_path)
    assert built.path.read_bytes()[:4] == b"\x7fELF"
    assert 0 < built.usage["mm"].registers <= 255
    again = compile_cuda(CudaRenderer().render(lower(s, args, "mm")), arch, cache_dir=tmp_path)
    assert again == built  # from the cache


@needs_nvcc
def test_compile_error_names_the_line(tmp_path):
    with pytest.raises(CompileError, match="line 2: this is not cuda"):
        compile_cuda("// ok\nthis is not cuda\n", "sm_80", cache_dir=tmp_path)


@dataclass(frozen=True)
class MatmulTask:
    key: str = "mm_256"
    op: str = "test_gpu_matmul"


SPACE = ConfigSpace("test_gpu_matmul", [ChoiceKnob("tile", ("small", "huge_shared", "unbound"))])


def instantiate(inp: MeasureInput):
    what = inp.config["tile"]
    if what == "unbound":
        s, args = tiled_matmul(256, 256, 256)
        for stage in s.stages:
            stage.annotations = {k: v for k, v in stage.annotations.items() if not v.endswith(("x", "y"))}
        return s, args
    block = (128, 128, 72) if what == "huge_shared" else (32, 32, 8)
    return tiled_matmul(256, 256, 256, block=block, thread=(8, 8) if what == "huge_shared" else (4, 4))


@needs_nvcc
def test_builder_rejects_configs_beyond_the_device_before_running(tmp_path):
    builder = NvccBuilder(n_parallel=2, timeout=60, cache_dir=tmp_path, instantiate=instantiate)
    target = Target.parse("cuda -arch=sm_75")  # 64 KiB of opt-in shared memory
    inputs = [MeasureInput(MatmulTask(), target, SPACE.get(i)) for i in range(3)]
    ok, huge, unbound = builder.build(inputs)
    assert ok.ok, ok.error_msg
    manifest = json.loads(open(ok.artifact).read())
    assert manifest["geometry"] == {"grid": [8, 8, 1], "block": [8, 8, 1], "shared_bytes": 2048}
    assert manifest["symbol"] == "candidate" and manifest["arch"] == "sm_75" and manifest["usage"]["registers"] > 0
    assert huge.error_kind is ErrorKind.RESOURCE_LIMIT and "73728 bytes of shared memory exceed sm_75" in huge.error_msg
    assert huge.error_msg.startswith("test_gpu_matmul config 1 of test_gpu_matmul: ")
    assert unbound.error_kind is ErrorKind.INSTANTIATION_ERROR and "binds no loop" in unbound.error_msg
