"""CUDA target: -arch parsing, the default architecture and per-architecture device limits."""
import onnx
import pytest

from autosched import target as target_mod
from autosched import zoo
from autosched.cli import main
from autosched.target import Target, TargetError, gpu_capabilities


def test_limits_per_architecture():
    a100, h100, ada = (gpu_capabilities(a) for a in ("sm_80", "sm_90a", "sm_89"))
    assert a100.max_shared_memory_per_block_optin == 163 * 1024
    assert h100.max_shared_memory_per_block_optin == 227 * 1024
    assert ada.max_shared_memory_per_block_optin == 99 * 1024
    for caps in (a100, h100, ada):
        assert caps.max_threads_per_block == 1024 and caps.warp_size == 32
        assert caps.max_shared_memory_per_block == 48 * 1024
        assert caps.max_registers_per_thread == 255 and caps.registers_per_sm == 65536
    assert h100.compute_capability == (9, 0) and Target.parse("cuda -arch=sm_90a").isa == "cuda-sm_90a"
    assert gpu_capabilities("sm_121").max_shared_memory_per_block_optin == 99 * 1024


def test_older_than_volta_is_refused():
    with pytest.raises(TargetError, match="sm_61 is older than Volta"):
        Target.parse("cuda -arch=sm_61")


def test_default_arch_comes_with_a_notice_when_no_gpu_answers(monkeypatch, caplog):
    monkeypatch.setattr(target_mod, "detect_cuda_arch", lambda: None)
    t = Target.parse("cuda")
    assert str(t) == "cuda -arch=sm_80" and t.fingerprint == "cuda|sm_80"
    assert "no -arch given and no GPU found; using -arch=sm_80" in caplog.text


def test_default_arch_is_the_local_gpu(monkeypatch, caplog):
    monkeypatch.setattr(target_mod, "detect_cuda_arch", lambda: "sm_90")  # stands in for nvidia-smi on a GPU node
    assert str(Target.parse("cuda")) == "cuda -arch=sm_90"
    assert not caplog.text


def test_explicit_arch_asks_no_gpu(monkeypatch):
    monkeypatch.setattr(target_mod, "detect_cuda_arch", lambda: pytest.fail("asked for the GPU"))
    assert Target.parse("cuda -arch=sm_86").capabilities.max_shared_memory_per_block_optin == 99 * 1024


def test_cli_says_the_default_arch_once(monkeypatch, tmp_path, capsys, caplog):
    monkeypatch.setattr(target_mod, "detect_cuda_arch", lambda: None)
    onnx.save(zoo.mlp(), tmp_path / "mlp.onnx")
    assert main(["tasks", str(tmp_path / "mlp.onnx"), "--target", "cuda"]) == 0
    captured = capsys.readouterr()
    assert "target: cuda -arch=sm_80" in captured.out
    # the CLI prints the autosched logger's warnings as `warning: ...` lines
    assert [r.getMessage() for r in caplog.records] == ["target cuda: no -arch given and no GPU found; using -arch=sm_80"]
