"""Whole models for target cuda, checked here through the CPU emulation against onnxruntime."""
import onnx
import pytest

from autosched import zoo
from autosched.build import build_model
from autosched.cli import main
from autosched.errors import AutoschedError
from autosched.frontend.onnx import load_onnx

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


@pytest.mark.slow
def test_emulated_resnet18_matches_onnxruntime(tmp_path, capsys):
    path = tmp_path / "resnet18.onnx"
    onnx.save(zoo.resnet18(), path)
    assert main(["check", str(path), "--target", CUDA, "--emulate"]) == 0
    assert "MISMATCH" not in capsys.readouterr().out


def test_cuda_check_without_a_gpu_says_how(mlp_path, capsys):
    assert main(["check", str(mlp_path), "--target", CUDA]) == 2
    assert "--emulate runs its CUDA kernels in the CPU emulation" in capsys.readouterr().err


def test_emulate_needs_a_cuda_target(mlp_path, tmp_path):
    with pytest.raises(AutoschedError, match="not a cuda target"):
        build_model(load_onnx(mlp_path), tmp_path / "m.so", "llvm", emulate=True)
