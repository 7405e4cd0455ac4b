"""CUDA target: -arch parsing, the default architecture and per-architecture device limits."""
import os

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


def _nvidia_smi(tmp_path, monkeypatch, line: str) -> None:
    """A script answering as nvidia-smi does on a GPU node (this machine has no GPU): first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\necho '{line}'\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_a_cuda_target_on_this_machines_gpu_carries_its_name(tmp_path, monkeypatch):
    """The fingerprint a tune here records under (its GPU runner names the device): what `db best`
    and the report look timings up by. A target of another architecture, or a CPU's, is unchanged."""
    _nvidia_smi(tmp_path, monkeypatch, "NVIDIA H200, 9.0")
    assert target_mod.detect_gpu() == ("NVIDIA H200", "sm_90") and target_mod.detect_cuda_arch() == "sm_90"
    tf32 = Target.parse("cuda -arch=sm_90 -precision=tf32")
    here = tf32.on_this_gpu()
    assert here.fingerprint == "cuda|NVIDIA H200|sm_90|tf32" and here == tf32.on_gpu("NVIDIA H200")
    assert here.on_this_gpu() is here
    for other in (Target.parse("cuda -arch=sm_80"), Target.parse("llvm")):
        assert other.on_this_gpu() is other


def test_db_best_finds_the_timed_build_of_this_machines_gpu(tmp_path, monkeypatch, capsys):
    """A GPU tune's model check keeps the build's timing under the GPU's name; `db best --target cuda`
    on that machine shows it beside the estimate, and on another machine does not."""
    from autosched.api import model_tasks
    from autosched.database import Database
    from autosched.database.model_times import BuildTiming, record_build_timing
    path = tmp_path / "mlp.onnx"
    onnx.save(zoo.mlp(), path)
    _nvidia_smi(tmp_path, monkeypatch, "NVIDIA H200, 9.0")
    here = Target.parse("cuda -arch=sm_90").on_this_gpu()
    db = Database(tmp_path / "t.db")
    record_build_timing(db, model_tasks(path, here, db=db, shipped=False)[1], here, BuildTiming(0.5, 0.6, 0.45, 3, 1))
    db.close()
    assert main(["db", "best", str(path), "--target", "cuda -arch=sm_90", "--db", str(tmp_path / "t.db")]) == 0
    assert "last timed build here: 0.5 ms" in capsys.readouterr().out
    _nvidia_smi(tmp_path, monkeypatch, "NVIDIA A100-SXM4-80GB, 8.0")
    assert main(["db", "best", str(path), "--target", "cuda -arch=sm_90", "--db", str(tmp_path / "t.db")]) == 0
    assert "no build of this model was timed here yet" in capsys.readouterr().out
