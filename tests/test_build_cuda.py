"""Whole models for target cuda, checked here through the CPU emulation against onnxruntime."""
import json
import re
import sqlite3
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autosched import zoo
from autosched.cli import main
from autosched.compile.model import build_model
from autosched.errors import AutoschedError
from autosched.frontend.onnx import load_onnx
from tests.cuda_markers import needs_gpu, needs_nvcc, no_gpu_here

CUDA = "cuda -arch=sm_80"


@pytest.fixture(scope="module")
def mlp_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("zoo") / "mlp.onnx"
    onnx.save(zoo.mlp(), path)
    return path


def test_emulated_mlp_matches_onnxruntime(mlp_path, capsys):
    assert main(["check", str(mlp_path), "--target", CUDA, "--emulate"]) == 0
    out = capsys.readouterr().out
    assert "fc3/Gemm" in out and "ok" in out and "MISMATCH" not in out


def test_emulated_multi_output_ops_match_onnxruntime(tmp_path, capsys):
    """LayerNormalization with its Mean and InvStdDev outputs, then a Split: one kernel each."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "g"),
               numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "b"),
               numpy_helper.from_array(np.array([16, 32], np.int64), "split")]
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y", "mean", "inv"], axis=-1),
             helper.make_node("Split", ["y", "split"], ["s0", "s1"], axis=1),
             helper.make_node("Relu", ["s0"], ["r0"]), helper.make_node("Sigmoid", ["s1"], ["r1"])]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("r0", "r1", "mean", "inv")]
    graph = helper.make_graph(nodes, "multi", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 48])],
                              outputs, weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "multi.onnx")
    assert main(["check", str(tmp_path / "multi.onnx"), "--target", CUDA, "--emulate"]) == 0
    out = capsys.readouterr().out
    assert all(f"{name} " in out for name in ("r0", "r1", "mean", "inv")) and "MISMATCH" not in out


@pytest.mark.slow
def test_emulated_resnet18_matches_onnxruntime(tmp_path, capsys):
    path = tmp_path / "resnet18.onnx"
    onnx.save(zoo.resnet18(), path)
    assert main(["check", str(path), "--target", CUDA, "--emulate"]) == 0
    assert "MISMATCH" not in capsys.readouterr().out


@needs_nvcc
def test_cuda_build_is_one_library_of_kernels_and_executor(mlp_path, tmp_path):
    assert main(["build", str(mlp_path), "--target", CUDA, "-o", str(tmp_path / "mlp.so")]) == 0
    manifest = json.loads((tmp_path / "mlp.json").read_text())
    assert manifest["isa"] == "cuda-sm_80" and manifest["target"] == CUDA and not manifest["emulated"]
    source = (tmp_path / "mlp.cu").read_text()
    assert source.count('extern "C" __global__') == 3 and source.count("<<<dim3(") == 3
    assert (tmp_path / "mlp.weights").stat().st_size == manifest["weights_bytes"]
    # the profile: an event before each of the 3 launches and one after the last, read off the GPU's clock
    assert [f"cudaEventRecord(call_events[{k}])" in source for k in range(4)] == [True] * 4
    assert 'extern "C" int32_t autosched_model_profile(' in source and len(manifest["calls"]) == 3
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(tmp_path / "mlp.so")], capture_output=True,
                             text=True, check=True).stdout
    assert {"autosched_model_run", "autosched_model_profile"} <= set(re.findall(r" T (\w+)", symbols))


@needs_nvcc
@no_gpu_here
def test_cuda_check_without_a_gpu_says_how(mlp_path, capsys):
    assert main(["check", str(mlp_path), "--target", CUDA]) == 2
    err = capsys.readouterr().err
    assert "CUDA error loading the model" in err and "--emulate" in err


@pytest.mark.cuda
@needs_gpu
def test_cuda_mlp_on_the_gpu_matches_onnxruntime(mlp_path, capsys):
    assert main(["check", str(mlp_path), "--target", "cuda"]) == 0
    assert "MISMATCH" not in capsys.readouterr().out


@pytest.mark.cuda
@needs_gpu
def test_a_tune_on_the_gpu_ends_with_the_model_check_and_profiles_the_build(mlp_path, tmp_path):
    """As on a CPU: the tuned build timed against the untuned one on the GPU, and each kernel
    call's time in the model kept (the latency model's parts)."""
    from autosched.api import tune
    out = tune(mlp_path, "cuda", 12, db=tmp_path / "t.db", shipped=False)
    check = out.model_check
    assert check is not None and check.tuned_ms > 0 and check.untuned_ms > 0
    with sqlite3.connect(tmp_path / "t.db") as db:
        (calls, kernels_ms, tuned_ms), = db.execute("SELECT calls, kernels_ms, tuned_ms FROM model_times")
    assert calls == 3 and 0 < kernels_ms <= 1.5 * tuned_ms


def test_emulate_needs_a_cuda_target(mlp_path, tmp_path):
    with pytest.raises(AutoschedError, match="not a cuda target"):
        build_model(load_onnx(mlp_path), tmp_path / "m.so", "llvm", emulate=True)
